"""`translator serve`: answers equal to translate_lines' and score_lines', concurrent requests,
refusals as 4xx JSON, and the command's start and SIGTERM."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest

from tests.conftest import SENTENCES
from translator import __version__, http_api, http_request, serve
from translator.score import score_lines
from translator.translate import translate_lines, with_overrides


@pytest.fixture(scope="module")
def server(tiny):
    translator = serve.Translator(tiny.model, tiny.cfg, tiny.tokenizer, tiny.cfg.decode)
    httpd = http_api.JsonServer("127.0.0.1", 0, translator.routes(), log=None)
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


def test_prefixed_translations_are_translate_lines_own(tiny, server):
    lines, prefixes = SENTENCES[:3], ["Ein Hund", "", "Zwei"]
    status, reply = call(server + "/translate", {"text": lines, "prefix": prefixes, "beam": 2})
    assert status == 200
    decode = with_overrides(tiny.cfg.decode, beam_size=2)
    expected = translate_lines(
        tiny.model, tiny.tokenizer, lines, decode, warn=None, data=tiny.cfg.data, prefixes=prefixes
    )
    assert reply["translations"] == [hyps[0][0] for hyps in expected]
    assert reply["translations"][0].startswith("Ein Hund")
    status, one = call(server + "/translate", {"text": lines[2], "prefix": "Zwei", "beam": 2})
    assert status == 200 and one["translations"] == [reply["translations"][2]]
    # a prefix the model cannot output: the line without it, and a warning in the reply
    status, long = call(
        server + "/translate", {"text": lines[1], "prefix": "Hund " * 50, "beam": 2}
    )
    assert status == 200 and long["translations"] == [reply["translations"][1]]
    assert "line 1: the prefix is longer than" in long["warnings"][0]


def test_constrained_translations_are_translate_lines_own(tiny, server):
    lines = [SENTENCES[0], SENTENCES[1], SENTENCES[3]]  # none split for its length
    constraints = [["Hund"], [], ["Zwei", "spielen"]]
    body = {"text": lines, "constraints": constraints, "beam": 4}
    status, reply = call(server + "/translate", body)
    assert status == 200, reply
    decode = with_overrides(tiny.cfg.decode, beam_size=4)
    expected = translate_lines(
        tiny.model, tiny.tokenizer, lines, decode, data=tiny.cfg.data, constraints=constraints
    )
    assert reply["translations"] == [hyps[0][0] for hyps in expected]
    assert "Hund" in reply["translations"][0]
    body = {"text": lines[2], "constraints": ["Zwei", "spielen"], "beam": 4}
    status, one = call(server + "/translate", body)
    assert status == 200 and one["translations"] == [reply["translations"][2]], one
    # a blank prefix is none: no clash with the constraints
    body = {"text": lines[2], "prefix": " ", "constraints": ["Zwei", "spielen"], "beam": 4}
    status, blank = call(server + "/translate", body)
    assert status == 200 and blank["translations"] == one["translations"], blank


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
        ("POST", "/score", {"source": ["a"], "target": []}, 400, "1 source but 0 targets"),
        ("GET", "/nowhere", None, 404, "no such path"),
        ("GET", "/translate", None, 405, "/translate takes POST"),
        ("DELETE", "/health", None, 405, "/health takes GET"),
        ("POST", "/translate", b"[" * 100_000, 400, "not UTF-8 JSON"),  # nesting: no recursion
        ("POST", "/translate", b'{"text": [], "beam": 1' + b"0" * 5000 + b"}", 400, "JSON"),
        ("POST", "/translate", {"text": ["a"] * 1001}, 400, "1001 lines, over 1000"),
        ("POST", "/translate", {"text": ["a" * 100_001]}, 400, "100001 characters, over"),
        ("POST", "/translate", {"text": ["a"], "beam": 17}, 400, "from 1 to 16"),
        ("POST", "/translate", {"text": "a", "prefix": ["b"]}, 400, "'prefix' must be a string"),
        ("POST", "/translate", {"text": ["a"], "prefix": ["b", "c"]}, 400, "but 2 prefixes"),
        ("POST", "/translate", {"text": ["a"], "prefix": [3]}, 400, "'prefix' must be a string"),
        ("POST", "/translate", {"text": "a", "constraints": "b"}, 400, "a list of phrases"),
        ("POST", "/translate", {"text": ["a"], "constraints": ["b"]}, 400, "one such list a line"),
        ("POST", "/translate", {"text": ["a"], "constraints": [[3]]}, 400, "phrases must be a"),
        ("POST", "/translate", {"text": "a", "constraints": ["b"] * 17}, 400, "over 16 con"),
        ("POST", "/translate", {"text": "a", "constraints": ["b" * 100_000]}, 400, "characters"),
        (
            "POST",
            "/translate",
            {"text": ["a", "b"], "constraints": [[]]},
            400,
            "2 lines of text but 1 constraint list",
        ),
        (
            "POST",
            "/translate",
            {"text": "a", "constraints": ["b"], "prefix": "c"},
            400,
            "'prefix' and 'constraints' do not combine",
        ),
    ],
)
def test_bad_requests_get_a_4xx_and_an_error(server, method, path, body, status, message):
    got, reply = call(server + path, body, method)
    assert got == status and message in reply["error"]
    assert call(server + "/health")[1]["status"] == "ok"  # and the server goes on


def test_a_request_at_its_limits_is_taken():
    """MAX_LINES lines, and MAX_CHARACTERS characters, are still one request (over: refused)."""
    from translator import serve

    assert len(serve._lines(["a"] * serve.MAX_LINES, "'text' must be")) == serve.MAX_LINES
    assert serve._lines(["a" * serve.MAX_CHARACTERS], "'text' must be")
    with pytest.raises(serve.BadRequest):
        serve._lines(["a"] * (serve.MAX_LINES + 1), "'text' must be")


def test_a_body_opening_with_a_byte_order_mark_is_read(server):
    body = "\ufeff".encode() + json.dumps({"text": ["A dog."]}).encode()
    status, reply = call(server + "/translate", body)
    assert status == 200 and len(reply["translations"]) == 1


def test_a_body_over_the_limit_is_refused_unread(server, monkeypatch):
    monkeypatch.setattr(http_request, "MAX_BODY_BYTES", 100)
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
        url = first.split()[1]
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


def raw_request(server: str, head: bytes, wait: float = 30) -> bytes:
    """Send bytes as they are (headers a client library would not send) -> the raw answer."""
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait) as sock:
        sock.sendall(head)
        chunks = []
        while chunk := sock.recv(1 << 16):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize(
    "headers, status, message",
    [
        (b"Content-Length: -1", b"400", b"is not a number of bytes"),
        (b"Content-Length: +5", b"400", b"is not a number of bytes"),
        (b"Transfer-Encoding: chunked", b"400", b"Transfer-Encoding is not taken"),
        (b"Content-Length: 5\r\nTransfer-Encoding: chunked", b"400", b"Transfer-Encoding"),
    ],
)
def test_lengths_that_could_misread_a_body_are_refused(server, headers, status, message):
    answer = raw_request(
        server, b"POST /translate HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n\r\n{}"
    )
    assert answer.startswith(b"HTTP/1.1 " + status) and message in answer


@pytest.mark.parametrize(
    "request_line, status, message",
    [
        (b"TRACE /health HTTP/1.1", b"405", b"/health takes GET"),
        (b"FOO /translate HTTP/1.1", b"405", b"/translate takes POST"),
        (b"FOO /nowhere HTTP/1.1", b"404", b"no such path"),
        (b"GARBAGE", b"400", b"Bad request syntax"),
        (b"GET /health HTTP/2.0", b"505", b"Invalid HTTP version"),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1", b"414", b"URI Too Long"),
    ],
)
def test_what_http_server_refuses_itself_is_answered_in_json(server, request_line, status, message):
    """Unknown methods and malformed request lines: a status line and {"error": ...}, as our own
    refusals, not http.server's HTML page (or, for a malformed line, no status line at all)."""
    answer = raw_request(server, request_line + b"\r\nHost: x\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 " + status) and b"application/json" in head
    assert message in json.loads(body)["error"].encode()
    if status == b"405":
        assert b"\r\nAllow: " in head


def test_a_body_shorter_than_its_length_times_out(server, monkeypatch):
    monkeypatch.setattr(http_request.Handler, "timeout", 1)
    answer = raw_request(
        server, b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"
    )
    assert answer.startswith(b"HTTP/1.1 408") and b"stopped short" in answer


def test_head_and_options_answer_as_load_balancers_expect(server):
    head = raw_request(server, b"HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")  # no body
    assert f"\r\nServer: translator/{__version__}\r\n".encode() in head  # not Python's version
    options = raw_request(
        server, b"OPTIONS /translate HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert options.startswith(b"HTTP/1.1 200") and b"Allow: POST, OPTIONS" in options


def test_a_lone_surrogate_becomes_one_replacement_character(server):
    status, reply = call(server + "/translate", b'{"text": ["A dog \\ud83d runs."]}')
    assert status == 200 and len(reply["translations"]) == 1
    assert serve._lines(["A \ud83d b"], "") == ["A \ufffd b"]


def test_two_content_lengths_are_refused(server):
    answer = raw_request(
        server,
        b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 40\r\n"
        b"\r\n{}GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 400") and b"more than one Content-Length" in answer
    assert answer.count(b"HTTP/1.1") == 1  # the smuggled request was not answered


def test_requests_decode_one_at_a_time(tiny, monkeypatch):
    inside, most = [0], [0]

    def slow_translate(*args, **kwargs):
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        time.sleep(0.05)
        inside[0] -= 1
        return [[("x", 0.0)]]

    monkeypatch.setattr(serve, "translate_lines", slow_translate)
    translator = serve.Translator(tiny.model, tiny.cfg, tiny.tokenizer, tiny.cfg.decode)
    threads = [
        threading.Thread(target=translator.translate, args=({"text": ["a"]},)) for _ in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most == [1]


def test_a_stop_lets_requests_being_answered_finish_and_refuses_new_ones():
    """serve_until_stopped, as the command runs it: the stop (a signal there) drains while the
    server still accepts, so a new connection gets 503, not a reset."""
    started, release, stop = threading.Event(), threading.Event(), threading.Event()

    def slow(_body, _client_left):
        started.set()
        release.wait(30)
        return {"done": True}

    routes = {("POST", "/slow"): slow, ("GET", "/health"): lambda _body, _left: {"status": "ok"}}
    httpd = http_api.JsonServer("127.0.0.1", 0, routes, log=None)
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    serving = threading.Thread(target=httpd.serve_until_stopped, args=(30, stop))
    serving.start()
    answers = []
    request = threading.Thread(target=lambda: answers.append(call(url + "/slow", {})))
    request.start()
    assert started.wait(30)
    stop.set()
    while not httpd.closing:
        time.sleep(0.01)
    assert call(url + "/health")[0] == 503  # a new connection, while the slow one is answered
    release.set()
    request.join(30)
    serving.join(30)
    assert not serving.is_alive() and answers == [(200, {"done": True})]


# A server as `translator serve` runs one: the CLI's SIGTERM handler, the work on one
# ThreadPoolExecutor thread (serve.Translator's model thread), which Python joins at exit
SLOW_SERVER = """
import signal, sys, time
from concurrent.futures import ThreadPoolExecutor
from translator import http_api
from translator.cli import _terminate

signal.signal(signal.SIGTERM, _terminate)
model = ThreadPoolExecutor(1)
slow = lambda body, left: model.submit(time.sleep, 60).result() or {}
httpd = http_api.JsonServer("127.0.0.1", 0, {("POST", "/slow"): slow}, log=None)
print(httpd.server_address[1], flush=True)
httpd.serve_until_stopped(60)
"""


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_second_signal_stops_the_server_at_once(signum, code):
    """The first signal drains (the slow request would be answered); the second one ends the
    process without waiting for the work in hand (it used to wait for the decoding to end)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_SERVER], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        url = f"http://127.0.0.1:{int(proc.stdout.readline())}"

        def ask() -> None:
            with contextlib.suppress(OSError):  # its connection is dropped
                call(url + "/slow", {})

        threading.Thread(target=ask, daemon=True).start()
        time.sleep(1)  # the request is in hand
        proc.send_signal(signum)
        time.sleep(1)
        assert proc.poll() is None  # draining: the first signal waits for the request
        began = time.monotonic()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert time.monotonic() - began < 10 and proc.returncode == code
    assert b"stopped at once by a second signal; 1 request not answered" in err
    assert b"Traceback" not in err


def test_an_overflowing_model_s_scores_are_null_in_valid_json_with_a_warning(tiny):
    from tests.test_translate import overflowing
    from translator.line_warnings import NOT_FINITE

    translator = serve.Translator(
        overflowing(tiny.model), tiny.cfg, tiny.tokenizer, tiny.cfg.decode
    )
    for reply in (
        translator.translate({"text": SENTENCES[:2], "nbest": 2}),
        translator.score({"source": SENTENCES[:2], "target": SENTENCES[:2]}),
    ):
        json.dumps(reply, allow_nan=False)  # NaN is not JSON: a client's parser refuses it
        assert f"lines 1, 2: {NOT_FINITE}" in reply["warnings"]


def test_requests_decode_on_one_thread_whatever_thread_answers_them(tiny, monkeypatch):
    """glibc keeps a heap per allocating thread at its peak: decoding in each connection's
    thread grew the server by a working set per thread. All model work runs on one thread."""
    seen = []
    real = serve.translate_lines
    monkeypatch.setattr(
        serve,
        "translate_lines",
        lambda *a, **k: seen.append(threading.current_thread().name) or real(*a, **k),
    )
    translator = serve.Translator(tiny.model, tiny.cfg, tiny.tokenizer, tiny.cfg.decode)
    askers = [
        threading.Thread(target=translator.translate, args=({"text": SENTENCES[:2]},))
        for _ in range(6)
    ]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join()
    assert len(seen) == 6 and len(set(seen)) == 1 and seen[0].startswith("model")


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads CPU time from /proc")
def test_out_of_file_descriptors_the_server_waits_instead_of_spinning(tiny):
    """socketserver retries a failed accept() at once while the connection waits: a busy loop.
    Under `ulimit -n 64` with more connections than that, the server's CPU stays near idle,
    it says why once, and it answers again when they close."""
    import resource

    def few_fds() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    proc = subprocess.Popen(
        [sys.executable, "-m", "translator", "serve", str(tiny.path), "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=few_fds,
    )
    clients = []
    try:
        url = proc.stderr.readline().split()[1]
        host, port = url.removeprefix("http://").split(":")
        for _ in range(80):
            clients.append(socket.create_connection((host, int(port))))

        def cpu_seconds() -> float:
            fields = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        time.sleep(1)
        before = cpu_seconds()
        time.sleep(3)
        assert cpu_seconds() - before < 1.5  # a busy loop takes the whole 3 s of a core
        for client in clients:
            client.close()
        clients = []
        status, _ = call(url + "/health")
        assert status == 200
    finally:
        for client in clients:
            client.close()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert err.count("out of file descriptors: new connections wait") == 1


def test_a_request_whose_client_left_before_its_turn_is_not_decoded(tiny, monkeypatch):
    """An abandoned request (a client's timeout, a closed tab) must not hold the model: before
    its turn the server checks that its client is still there."""
    release, decoded, lines = threading.Event(), [], []
    real = serve.translate_lines

    def recorded(model, tokenizer, texts, *args, **kwargs):
        decoded.append(texts[0])
        if texts[0] == "first":
            release.wait(30)
        return real(model, tokenizer, texts, *args, **kwargs)

    monkeypatch.setattr(serve, "translate_lines", recorded)
    translator = serve.Translator(tiny.model, tiny.cfg, tiny.tokenizer, tiny.cfg.decode)
    httpd = http_api.JsonServer("127.0.0.1", 0, translator.routes(), log=lines.append)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        first = threading.Thread(target=call, args=(url + "/translate", {"text": ["first"]}))
        first.start()
        while not decoded:
            time.sleep(0.01)
        body = json.dumps({"text": ["abandoned"]}).encode()
        with socket.create_connection(("127.0.0.1", httpd.server_address[1])) as gone:
            gone.sendall(
                b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
                + body
            )
            while httpd.busy < 2:  # read and waiting for the model
                time.sleep(0.01)
        release.set()
        first.join(30)
        assert call(url + "/translate", {"text": ["third"]})[0] == 200
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert decoded == ["first", "third"]
    assert "POST /translate not answered: the client left before its turn" in lines


def test_a_request_sent_a_byte_at_a_time_is_cut_off_at_its_deadline(server, monkeypatch):
    """The idle timeout is per read: a client sending a byte now and then would hold its thread
    forever. From its first byte a whole request must arrive within REQUEST_SECONDS."""
    monkeypatch.setattr(http_request, "REQUEST_SECONDS", 1)
    host, port = server.removeprefix("http://").split(":")
    start = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        try:
            for byte in b"POST /translate HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
                sock.sendall(bytes([byte]))
                time.sleep(0.1)
            answer = sock.recv(1 << 16)
        except (BrokenPipeError, ConnectionResetError):
            answer = b""
    assert answer == b"" and time.monotonic() - start < 5  # closed, well before 10 s of bytes


def test_a_body_sent_slower_than_the_deadline_gets_a_408(server, monkeypatch):
    monkeypatch.setattr(http_request, "REQUEST_SECONDS", 1)
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
        for _ in range(30):
            try:
                sock.sendall(b" ")
            except (BrokenPipeError, ConnectionResetError):
                break
            time.sleep(0.1)
            if select_readable(sock):
                break
        answer = sock.recv(1 << 16)
    assert answer.startswith(b"HTTP/1.1 408") and b"over 1 s since the request began" in answer


def select_readable(sock: socket.socket) -> bool:
    import select

    return bool(select.select([sock], [], [], 0)[0])


def test_a_body_over_the_limit_gets_its_413_while_the_client_still_sends(server, monkeypatch):
    """The 413 is sent before the body is read; closing with the body unread reset the
    connection, and a client still sending got the reset instead of the answer."""
    monkeypatch.setattr(http_request, "MAX_BODY_BYTES", 100)
    body = b'{"text": ["' + b"a" * (8 << 20) + b'"]}'
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        head = b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
        sock.sendall(head + body)
        answer = b""
        while chunk := sock.recv(1 << 16):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413") and b"over 100" in answer


def test_connections_over_the_cap_wait_until_one_closes(tiny, monkeypatch):
    """A thread per connection: MAX_CONNECTIONS bounds them; more wait in the listen queue."""
    monkeypatch.setattr(http_api, "MAX_CONNECTIONS", 3)
    lines: list[str] = []
    routes = {("GET", "/health"): lambda _body, _left: {"status": "ok"}}
    httpd = http_api.JsonServer("127.0.0.1", 0, routes, log=lines.append)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    idle = [socket.create_connection(("127.0.0.1", httpd.server_address[1])) for _ in range(3)]
    try:
        answers: list = []
        waiting = threading.Thread(target=lambda: answers.append(call(url + "/health")))
        waiting.start()
        time.sleep(1.5)
        assert answers == [] and len(httpd.connections) == 3
        idle.pop().close()
        waiting.join(30)
        assert answers == [(200, {"status": "ok"})]
    finally:
        for sock in idle:
            sock.close()
        httpd.shutdown()
        httpd.server_close()
    assert lines.count("3 connections open: new ones wait until one closes") == 1


def test_serve_flags_reach_the_decode_settings(tiny, monkeypatch):
    """`serve`'s decoding flags override the checkpoint's decode.* values; the rest stay."""
    from typer.testing import CliRunner

    from translator import cli

    seen = {}

    def capture(model, cfg, tokenizer, decode, terms=None):
        seen["d"] = decode
        return SimpleNamespace(routes=dict)

    monkeypatch.setattr(serve, "Translator", capture)
    monkeypatch.setattr(http_api.JsonServer, "serve_until_stopped", lambda self, seconds: None)
    flags = ["--beam", "3", "--max-len-a", "0.5", "--max-len-b", "6", "--min-len", "2"]
    flags += ["--no-repeat-ngram-size", "3", "--unk-penalty", "2.5", "--length-penalty", "1.5"]
    result = CliRunner().invoke(cli.app, ["serve", str(tiny.path), "--port", "0", "-q", *flags])
    assert result.exit_code == 0, result.output
    decode = seen["d"]
    assert (
        decode.beam_size,
        decode.max_len_a,
        decode.max_len_b,
        decode.min_len,
        decode.no_repeat_ngram_size,
        decode.unk_penalty,
        decode.length_penalty,
        decode.batch_tokens,
    ) == (3, 0.5, 6, 2, 3, 2.5, 1.5, tiny.cfg.decode.batch_tokens)


def test_a_servers_term_list_joins_each_requests_constraints(tiny):
    """serve --terminology: a line holding a source term gets its target as a constraint, beside
    the request's own; a request with a prefix is translated without the list."""
    from translator.terminology import Terms

    terms = Terms([("dogs", "Hunde")])
    translator = serve.Translator(tiny.model, tiny.cfg, tiny.tokenizer, tiny.cfg.decode, terms)
    lines = [SENTENCES[1], SENTENCES[4]]
    reply = translator.translate({"text": lines, "constraints": [[], ["Frau"]], "beam": 4})
    decode = with_overrides(tiny.cfg.decode, beam_size=4)
    expected = translate_lines(
        tiny.model,
        tiny.tokenizer,
        lines,
        decode,
        data=tiny.cfg.data,
        constraints=[["Hunde"], ["Frau"]],
    )
    assert reply["translations"] == [hyps[0][0] for hyps in expected]
    assert "Hunde" in reply["translations"][0]
    prefixed = translator.translate({"text": lines[0], "prefix": "Zwei", "beam": 4})
    plain = translate_lines(
        tiny.model, tiny.tokenizer, lines[:1], decode, data=tiny.cfg.data, prefixes=["Zwei"]
    )
    assert prefixed["translations"] == [plain[0][0][0]]
