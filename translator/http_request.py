"""One HTTP request under `translator serve`, on a connection of http_api.JsonServer: its body
read within its deadlines and refused where it could be misread, its route called, its JSON answer
sent and logged in one line (http_api.py says what the whole server guards against)."""

from __future__ import annotations

import io
import json
import select
import socket
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from translator import __version__

if TYPE_CHECKING:
    from translator.http_api import JsonServer

MAX_BODY_BYTES = 1 << 20  # a request's JSON; a client with more sends several requests
IDLE_SECONDS = 60  # a connection silent this long (idle, or a body short of its length) is closed
REQUEST_SECONDS = 120  # from a request's first byte to the end of its body
LINGER_SECONDS = 2  # after a refusal, how long an unread body is read and dropped before closing


class ClientLeft(Exception):
    """Raised by a route whose client closed its connection before the answer was worked out."""


class BadRequest(Exception):
    """What is wrong with a request, sent back as {"error": ...} with `status`."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


class RequestClock(socket.SocketIO):
    """A connection's reading side with a deadline per request: the idle timeout applies to each
    read, and from a request's first byte all of it must arrive within REQUEST_SECONDS."""

    def __init__(self, sock: socket.socket, idle_seconds: float) -> None:
        super().__init__(sock, "rb")
        self.sock, self.idle_seconds = sock, idle_seconds
        self.deadline: float | None = None  # set by a request's first byte

    def readinto(self, buffer: Any) -> int | None:
        if self.deadline is None:
            got = super().readinto(buffer)
            if got:
                self.deadline = time.monotonic() + REQUEST_SECONDS
            return got
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the request took over {REQUEST_SECONDS} s to arrive")
        self.sock.settimeout(min(self.idle_seconds, left))
        try:
            return super().readinto(buffer)
        finally:
            self.sock.settimeout(self.idle_seconds)  # writing the answer keeps the idle timeout


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a client sends many requests on one socket
    server_version = f"translator/{__version__}"  # the Server header, without Python's version
    # what a refusal of a malformed request line is sent as: HTTP/0.9, http.server's default,
    # has no status line or headers
    default_request_version = "HTTP/1.0"
    timeout = IDLE_SECONDS
    server: JsonServer
    body_unread = False  # a refusal then closes with a linger (`finish`)

    def version_string(self) -> str:
        return self.server_version

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the plain reader setup() made (the socket stays open)
        self.clock = RequestClock(self.connection, self.timeout)
        self.rfile = io.BufferedReader(self.clock)

    def handle_one_request(self) -> None:
        self.clock.deadline = None  # the next request's clock starts at its first byte
        super().handle_one_request()

    def finish(self) -> None:
        super().finish()
        if self.body_unread:
            self._linger()

    def _linger(self) -> None:
        """Say that nothing more is sent, then read and drop what the client still sends, for
        LINGER_SECONDS at most: closing with unread bytes resets the connection, and a client
        still sending its body would get that reset instead of the answer before it."""
        try:
            self.connection.shutdown(socket.SHUT_WR)
            until = time.monotonic() + LINGER_SECONDS
            while (left := until - time.monotonic()) > 0:
                self.connection.settimeout(left)
                if not self.connection.recv(1 << 16):
                    return
        except OSError:  # the client reset it, closed it first, or the time ran out
            pass

    def client_left(self) -> bool:
        """Whether the client closed its side (so no answer can reach it): a read of what is
        waiting, without taking it. A client that half-closes after its request counts as gone."""
        try:
            if not _readable(self.connection):
                return False  # nothing to read: still connected
            return not self.connection.recv(1, socket.MSG_PEEK)  # b"": the client closed
        except OSError:
            return True

    def do_GET(self) -> None:
        self._answer("GET")

    def do_HEAD(self) -> None:  # load balancers' and `curl -I`'s checks: GET's status, no body
        self._answer("HEAD")

    def do_POST(self) -> None:
        self._answer("POST")

    def do_PUT(self) -> None:
        self._answer("PUT")

    def do_PATCH(self) -> None:
        self._answer("PATCH")

    def do_DELETE(self) -> None:
        self._answer("DELETE")

    def do_OPTIONS(self) -> None:
        self._answer("OPTIONS")

    def _answer(self, method: str) -> None:
        start = time.perf_counter()
        path = self.path.split("?", 1)[0]
        self.body_unread = "Transfer-Encoding" in self.headers or self.headers.get(
            "Content-Length", "0"
        ) not in ("0", "")
        if not self.server.enter():
            busy = {"error": "the server is shutting down"}
            self._send(method, path, HTTPStatus.SERVICE_UNAVAILABLE, busy, start)
            return
        try:
            status, reply = self._reply(method, path)
        except ClientLeft:
            self.close_connection = True
            if self.server.log is not None:
                self.server.log(f"{method} {path} not answered: the client left before its turn")
        else:
            self._send(method, path, status, reply, start)
        finally:
            self.server.leave()

    def _reply(self, method: str, path: str) -> tuple[HTTPStatus, dict[str, Any]]:
        try:
            return HTTPStatus.OK, self._route(method, path)
        except BadRequest as err:
            return err.status, {"error": str(err)}
        except ClientLeft:
            raise
        except Exception as err:  # noqa: BLE001 (a failure of ours: this request alone fails)
            error = f"internal error: {type(err).__name__}: {err}"
            return HTTPStatus.INTERNAL_SERVER_ERROR, {"error": error}

    def _route(self, method: str, path: str) -> dict[str, Any]:
        methods = [m for m, p in self.server.routes if p == path]
        if not methods:
            raise BadRequest(f"no such path {path}", HTTPStatus.NOT_FOUND)
        if method == "OPTIONS":
            return {"methods": methods}
        asked = "GET" if method == "HEAD" else method
        if asked not in methods:
            raise BadRequest(f"{path} takes {methods[0]}", HTTPStatus.METHOD_NOT_ALLOWED)
        if asked != "POST":
            if self._body_length():
                self.close_connection = True  # its unread body must not be read as a request
            return self.server.routes[asked, path](None, self.client_left)
        return self.server.routes[asked, path](self._read_json(), self.client_left)

    def _body_length(self) -> int:
        """The request's Content-Length, refused where it would let a body be misread."""
        if "Transfer-Encoding" in self.headers:  # chunked, or beside a length: a smuggling risk
            raise BadRequest("a Transfer-Encoding is not taken: send a Content-Length")
        lengths = self.headers.get_all("Content-Length") or []
        if len(lengths) > 1:  # which one a proxy in front used is unknown: a smuggling risk
            raise BadRequest("more than one Content-Length")
        if not lengths:
            return 0
        raw = lengths[0]
        if not (raw.isascii() and raw.isdigit()):
            raise BadRequest(f"Content-Length {raw!r} is not a number of bytes")
        if int(raw) > MAX_BODY_BYTES:
            raise BadRequest(
                f"the body has {raw} bytes, over {MAX_BODY_BYTES}: send fewer lines a request",
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            )
        return int(raw)

    def _read_json(self) -> Any:
        if "Content-Length" not in self.headers and "Transfer-Encoding" not in self.headers:
            raise BadRequest("a POST needs a Content-Length", HTTPStatus.LENGTH_REQUIRED)
        length = self._body_length()
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            late = self.clock.deadline is not None and time.monotonic() >= self.clock.deadline
            why = f"over {REQUEST_SECONDS} s since the request began" if late else "for {} s"
            raise BadRequest(
                f"the body stopped short of its Content-Length {why.format(self.timeout)}",
                HTTPStatus.REQUEST_TIMEOUT,
            ) from None
        self.body_unread = False
        try:
            return json.loads(body.decode("utf-8-sig"))  # a byte order mark is allowed (RFC 8259)
        except (UnicodeDecodeError, ValueError, RecursionError) as err:  # ValueError: JSON's
            raise BadRequest(f"the body is not UTF-8 JSON: {err}") from None

    def handle_expect_100(self) -> bool:
        """`Expect: 100-continue`: a body that would be refused is refused before it is sent."""
        try:
            self._body_length()
        except BadRequest as err:
            self.body_unread = True  # a client may send it anyway
            self._send("POST", self.path, err.status, {"error": str(err)}, time.perf_counter())
            return False
        return super().handle_expect_100()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (a malformed request line, a line or headers over its
        limits, an unknown method) in JSON, as ours are, not its HTML page; an unknown method
        gets what PUT gets (405 and Allow, or 404 for an unknown path)."""
        if code == HTTPStatus.NOT_IMPLEMENTED and self.command:
            self._answer(self.command)
            return
        self.log_error("code %d, message %s", code, message)  # one line, as before
        status = HTTPStatus(code)
        self._write(self.command or "", "", status, {"error": message or status.phrase})

    def _send(self, method: str, path: str, status: HTTPStatus, reply: dict, start: float) -> None:
        status_text = self._write(method, path, status, reply)
        if self.server.log is not None:
            self.server.log(f"{method} {path} {status_text} {time.perf_counter() - start:.3f}s")

    def _write(self, method: str, path: str, status: HTTPStatus, reply: dict) -> str:
        """Send the answer -> its status as the log line says it."""
        body = json.dumps(reply, ensure_ascii=False).encode()
        # after a refusal the request's body may be unread: it must not be taken for the next
        self.close_connection = self.close_connection or status != HTTPStatus.OK
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            if method == "OPTIONS" or status == HTTPStatus.METHOD_NOT_ALLOWED:
                methods = reply.get("methods") or [m for m, p in self.server.routes if p == path]
                self.send_header("Allow", ", ".join([*methods, "OPTIONS"]))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if method != "HEAD":
                self.wfile.write(body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return f"{status.value}, not delivered: the client left"
        return str(status.value)

    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        pass  # `_send` logs each request once, with its time

    def log_message(self, format: str, *args: Any) -> None:
        # what http.server refuses itself (a malformed request line, a timeout): one line
        if self.server.log is not None:
            self.server.log(f"{self.address_string()}: {format % args}")


def _readable(sock: socket.socket) -> bool:
    """Whether a read would return at once; poll, not select, which fails past fd 1023."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([sock], [], [], 0)[0])  # Windows
