"""`translator serve`: a model behind a small JSON-over-HTTP API (Python's own http.server).

    POST /translate  {"text": ["A dog runs.", ...], "beam": 5, "nbest": 2}
                 ->  {"translations": ["Ein Hund rennt.", ...],
                      "nbest": [[{"text": ..., "score": ...}, ...], ...],   (with "nbest")
                      "warnings": [...]}
    POST /score      {"source": [...], "target": [...]}  ->  {"scores": [...], "tokens": [...]}
    GET  /health     ->  {"status": "ok", "direction": "en->de", "device": ...}

"text" may be one string (then "translations" holds one). The model is loaded once; requests are
answered by threads, and decode one at a time (a lock around the model: a batch of lines already
fills the cores, and decoding with alignments is not thread-safe). A malformed request gets a
4xx status and {"error": "..."}, never a traceback; the server keeps going.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from translator.config import Config, DecodeConfig
from translator.data.tokenizer import Tokenizer
from translator.errors import TranslatorError
from translator.loading import Checkpoints, load_models
from translator.model.ensemble import Ensemble
from translator.model.transformer import Transformer
from translator.score import score_lines
from translator.stream import log as log_line
from translator.stream import model_precision
from translator.translate import translate_lines, with_overrides

MAX_BODY_BYTES = 1 << 20  # a request's JSON; a client with more sends several requests
IDLE_SECONDS = 60  # a silent connection is closed after this
MAX_BEAM = 64  # per-request beam or n-best: a wider one would hold the model for minutes


class BadRequest(Exception):
    """What is wrong with a request, sent back as {"error": ...} with `status`."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


class Translator:
    """A loaded model and what answering a request with it takes; one request at a time."""

    def __init__(
        self,
        model: Transformer | Ensemble,
        cfg: Config,
        tokenizer: Tokenizer,
        decode: DecodeConfig,
        device: str = "",
    ) -> None:
        self.model, self.cfg, self.tokenizer, self.decode = model, cfg, tokenizer, decode
        self.device = device
        self.lock = threading.Lock()

    def translate(self, request: dict[str, Any]) -> dict[str, Any]:
        _only_keys(request, {"text", "beam", "nbest"})
        text = request.get("text")
        lines = [text] if isinstance(text, str) else text
        _check_strings(lines, "text")
        beam = _small_int(request, "beam")
        nbest = _small_int(request, "nbest")
        decode = with_overrides(self.decode, beam_size=beam)
        warnings: list[str] = []
        with self.lock:
            found = translate_lines(
                self.model,
                self.tokenizer,
                lines,
                decode,
                nbest or 1,
                warn=warnings.append,
                data=self.cfg.data,
            )
        reply: dict[str, Any] = {"translations": [hyps[0][0] for hyps in found]}
        if nbest:
            reply["nbest"] = [[{"text": t, "score": s} for t, s in hyps] for hyps in found]
        reply["warnings"] = warnings
        return reply

    def score(self, request: dict[str, Any]) -> dict[str, Any]:
        _only_keys(request, {"source", "target"})
        sources, targets = request.get("source"), request.get("target")
        _check_strings(sources, "source")
        _check_strings(targets, "target")
        if len(sources) != len(targets):
            raise BadRequest(f"{len(sources)} sources but {len(targets)} targets")
        warnings: list[str] = []
        with self.lock:
            pairs = score_lines(
                self.model, self.tokenizer, sources, targets, self.cfg.data, warn=warnings.append
            )
        # JSON has no NaN: a pair too long to score is null
        scores = [None if math.isnan(p.log_prob) else p.log_prob for p in pairs]
        return {"scores": scores, "tokens": [p.tokens for p in pairs], "warnings": warnings}

    def health(self) -> dict[str, Any]:
        data = self.cfg.data
        return {
            "status": "ok",
            "direction": f"{data.src_lang}->{data.tgt_lang}",
            "device": self.device,
        }


def _only_keys(request: Any, keys: set[str]) -> None:
    if not isinstance(request, dict):
        raise BadRequest("the body is not a JSON object")
    if unknown := sorted(set(request) - keys):
        raise BadRequest(f"unknown key {unknown[0]!r}; valid keys: {', '.join(sorted(keys))}")


def _check_strings(value: Any, key: str) -> None:
    if not isinstance(value, list) or not all(isinstance(line, str) for line in value):
        raise BadRequest(f"{key!r} must be a string or a list of strings")


def _small_int(request: dict[str, Any], key: str) -> int | None:
    value = request.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_BEAM:
        raise BadRequest(f"{key!r} must be an integer from 1 to {MAX_BEAM}")
    return value


def make_server(
    translator: Translator, host: str, port: int, log: Callable[[str], None] | None = None
) -> ThreadingHTTPServer:
    """An HTTP server on host:port (0: any free port; see server.server_address) answering with
    `translator`; `log` gets one line per request (None: silent)."""
    routes = {
        ("POST", "/translate"): translator.translate,
        ("POST", "/score"): translator.score,
        ("GET", "/health"): lambda _request: translator.health(),
    }

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: a client sends many requests on one socket
        # seconds a connection may stay silent (idle between requests, or a body that stops
        # short of its Content-Length) before its thread gives it up
        timeout = IDLE_SECONDS

        def do_GET(self) -> None:
            self._answer("GET")

        def do_POST(self) -> None:
            self._answer("POST")

        def do_PUT(self) -> None:
            self._answer("PUT")

        def do_DELETE(self) -> None:
            self._answer("DELETE")

        def _answer(self, method: str) -> None:
            start = time.perf_counter()
            path = self.path.split("?", 1)[0]
            try:
                status, reply = HTTPStatus.OK, self._route(method, path)
            except BadRequest as err:
                status, reply = err.status, {"error": str(err)}
            except TranslatorError as err:  # a request the model cannot serve (a beam too wide)
                status, reply = HTTPStatus.BAD_REQUEST, {"error": str(err)}
            except Exception as err:  # noqa: BLE001 (a failure of ours: this request alone fails)
                status = HTTPStatus.INTERNAL_SERVER_ERROR
                reply = {"error": f"internal error: {type(err).__name__}: {err}"}
            body = json.dumps(reply, ensure_ascii=False).encode()
            # after a refusal the request's body may be unread: it must not be taken for the next
            self.close_connection = self.close_connection or status != HTTPStatus.OK
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
            if log is not None:
                log(f"{method} {path} {status.value} {time.perf_counter() - start:.3f}s")

        def _route(self, method: str, path: str) -> dict[str, Any]:
            methods = [m for m, p in routes if p == path]
            if not methods:
                raise BadRequest(f"no such path {path}", HTTPStatus.NOT_FOUND)
            if method not in methods:
                raise BadRequest(f"{path} takes {methods[0]}", HTTPStatus.METHOD_NOT_ALLOWED)
            request = self._read_json() if method == "POST" else None
            return routes[method, path](request)

        def _read_json(self) -> Any:
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                raise BadRequest(
                    "a POST needs a Content-Length", HTTPStatus.LENGTH_REQUIRED
                ) from None
            if length > MAX_BODY_BYTES:
                raise BadRequest(
                    f"the body has {length} bytes, over {MAX_BODY_BYTES}: send fewer lines a "
                    "request",
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                )
            try:
                body = self.rfile.read(length)
            except TimeoutError:
                raise BadRequest(
                    f"the body stopped short of its Content-Length for {IDLE_SECONDS} s",
                    HTTPStatus.REQUEST_TIMEOUT,
                ) from None
            try:
                return json.loads(body.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                raise BadRequest(f"the body is not UTF-8 JSON: {err}") from None

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per request comes from _answer, through `log`

    return ThreadingHTTPServer((host, port), Handler)


def run(
    ckpt: Checkpoints,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    beam: int | None = None,
    length_penalty: float | None = None,
    batch_tokens: int | None = None,
    device: str | None = None,
    dtype: str | None = None,
    quiet: bool = False,
) -> None:
    """The `serve` command: load the checkpoint(s) once, answer until Ctrl-C or SIGTERM."""
    model, cfg, tokenizer = load_models(ckpt, device, dtype)
    decode = with_overrides(
        cfg.decode, beam_size=beam, length_penalty=length_penalty, batch_tokens=batch_tokens
    )
    precision = model_precision(model, dtype or cfg.decode.dtype)
    translator = Translator(model, cfg, tokenizer, decode, precision)
    try:
        server = make_server(translator, host, port, log=None if quiet else log_line)
    except OSError as err:
        raise TranslatorError(
            f"cannot listen there: {err.strerror or err}",
            f"{host}:{port}",
            "choose another --port (or stop what holds it)",
        ) from None
    address, bound = server.server_address[:2]
    # the first line a supervisor (or a test) waits for, also with --quiet
    log_line(f"serve: {precision}; http://{address}:{bound} (POST /translate, /score; GET /health)")
    try:
        server.serve_forever()
    finally:
        server.server_close()
