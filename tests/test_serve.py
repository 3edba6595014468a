"""`translator serve`: answers equal to translate_lines' and score_lines', concurrent requests,
refusals as 4xx JSON, and the command's start and SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from tests.conftest import SENTENCES
from translator import serve
from translator.score import score_lines
from translator.translate import translate_lines, with_overrides


@pytest.fixture(scope="module")
def server(tiny):
    translator = serve.Translator(tiny.model, tiny.cfg, tiny.tokenizer, tiny.cfg.decode, "cpu")
    httpd = serve.make_server(translator, "127.0.0.1", 0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def call(url: str, body=None, method: str | None = None) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_translations_are_translate_lines_own(tiny, server):
    lines = SENTENCES[:5]
    status, reply = call(server + "/translate", {"text": lines, "beam": 3, "nbest": 2})
    assert status == 200
    decode = with_overrides(tiny.cfg.decode, beam_size=3)
    expected = translate_lines(
        tiny.model, tiny.tokenizer, lines, decode, 2, warn=None, data=tiny.cfg.data
    )
    assert reply["translations"] == [hyps[0][0] for hyps in expected]
    assert [[(h["text"], h["score"]) for h in hyps] for hyps in reply["nbest"]] == [
        [(t, pytest.approx(s, abs=1e-5)) for t, s in hyps] for hyps in expected
    ]
    status, one = call(server + "/translate", {"text": lines[0], "beam": 3})  # a string: one
    assert status == 200 and one["translations"] == [reply["translations"][0]]


def test_scores_are_score_lines_own_and_json_has_no_nan(tiny, server):
    long = " ".join(["A man rides a bike."] * 20)  # over the tiny model's positions
    sources, targets = [*SENTENCES[:2], long], ["Ein Hund.", "", "Zwei Hunde."]
    status, reply = call(server + "/score", {"source": sources, "target": targets})
    assert status == 200
    pairs = score_lines(tiny.model, tiny.tokenizer, sources, targets, tiny.cfg.data, warn=None)
    assert reply["scores"][:2] == pytest.approx([p.log_prob for p in pairs[:2]], abs=1e-5)
    assert reply["scores"][2] is None and "line 3" in reply["warnings"][0]
    assert reply["tokens"] == [p.tokens for p in pairs]


def test_concurrent_requests_each_get_their_own_answer(tiny, server):
    expected = {
        line: translate_lines(
            tiny.model, tiny.tokenizer, [line], tiny.cfg.decode, warn=None, data=tiny.cfg.data
        )[0][0][0]
        for line in SENTENCES[:6]
    }
    answers: dict[str, str] = {}

    def ask(line: str) -> None:
        for _ in range(3):
            _, reply = call(server + "/translate", {"text": [line]})
            answers.setdefault(line, reply["translations"][0])
            assert reply["translations"][0] == answers[line]

    threads = [threading.Thread(target=ask, args=(line,)) for line in expected]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == expected


@pytest.mark.parametrize(
    "method, path, body, status, message",
    [
        ("POST", "/translate", b"{not json", 400, "not UTF-8 JSON"),
        ("POST", "/translate", b"\xff\xfe", 400, "not UTF-8 JSON"),
        ("POST", "/translate", [1, 2], 400, "not a JSON object"),
        ("POST", "/translate", {"txt": ["a"]}, 400, "unknown key 'txt'"),
        ("POST", "/translate", {"text": ["a", 3]}, 400, "'text' must be a string or a list"),
        ("POST", "/translate", {"text": ["a"], "beam": 0}, 400, "'beam' must be an integer"),
        ("POST", "/translate", {"text": ["a"], "nbest": True}, 400, "'nbest' must be"),
        ("POST", "/score", {"source": ["a"], "target": []}, 400, "1 sources but 0 targets"),
        ("GET", "/nowhere", None, 404, "no such path"),
        ("GET", "/translate", None, 405, "/translate takes POST"),
        ("DELETE", "/health", None, 405, "/health takes GET"),
    ],
)
def test_bad_requests_get_a_4xx_and_an_error(server, method, path, body, status, message):
    got, reply = call(server + path, body, method)
    assert got == status and message in reply["error"]
    assert call(server + "/health")[1]["status"] == "ok"  # and the server goes on


def test_a_body_over_the_limit_is_refused_unread(server, monkeypatch):
    monkeypatch.setattr(serve, "MAX_BODY_BYTES", 100)
    status, reply = call(server + "/translate", {"text": ["A dog runs."] * 20})
    assert status == 413 and "over 100" in reply["error"]


def test_the_command_prints_its_address_and_stops_on_sigterm(tiny):
    proc = subprocess.Popen(
        [sys.executable, "-m", "translator", "serve", str(tiny.path), "--port", "0", "-q"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stderr.readline()
        url = first.split("; ")[1].split(" ")[0]
        assert url.startswith("http://127.0.0.1:")
        status, reply = call(url + "/translate", {"text": ["A dog."]})
        assert status == 200 and len(reply["translations"]) == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "Traceback" not in err


def test_a_port_in_use_is_a_one_line_error(tiny, server):
    port = server.rsplit(":", 1)[1]
    result = subprocess.run(
        [sys.executable, "-m", "translator", "serve", str(tiny.path), "--port", port, "-q"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and result.stderr.startswith("error: 127.0.0.1:")
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1


def test_a_body_shorter_than_its_length_times_out(server, monkeypatch):
    import http.client

    monkeypatch.setattr(serve, "IDLE_SECONDS", 1)  # read when the handler class is made
    host, port = server.removeprefix("http://").split(":")
    quick = serve.make_server(
        serve.Translator(None, None, None, None), host, 0
    )  # a fresh server, so that its handler takes the 1-second timeout
    thread = threading.Thread(target=quick.serve_forever, daemon=True)
    thread.start()
    try:
        stalled = http.client.HTTPConnection(host, quick.server_address[1], timeout=30)
        stalled.putrequest("POST", "/translate")
        stalled.putheader("Content-Length", "100")
        stalled.endheaders(b'{"text": ')  # and nothing more
        response = stalled.getresponse()
        assert response.status == 408 and "stopped short" in json.loads(response.read())["error"]
    finally:
        quick.shutdown()
        quick.server_close()
