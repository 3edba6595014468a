"""JSON over HTTP on Python's own http.server: the plumbing under `translator serve`.

A route maps (method, path) to a function of the request's parsed JSON body (None for GET) that
returns the reply's JSON object, or raises BadRequest (its status and {"error": ...}). What a
server facing real clients needs beyond http.server's defaults is here: a read timeout (a silent
or half-sent request does not hold its thread forever), a refused Transfer-Encoding and strict
Content-Length (no body read past its end, none read to the end of the stream), a listen queue
for bursts, one log line for a client that left (no traceback), IPv6, and a drain at shutdown:
new requests get 503 while those being answered finish (serve_until_stopped). Bounds on what
clients can hold: MAX_CONNECTIONS open at once (more wait in the listen queue), a whole request
within REQUEST_SECONDS of its first byte (a client sending a byte now and then does not hold a
thread forever), and a request whose client has left before its turn is not answered (the route
asks `client_left`). A refusal that leaves a body unread is followed by a lingering close, so the
client reads the 4xx instead of a connection reset.
"""

from __future__ import annotations

import errno
import io
import json
import select
import socket
import sys
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY_BYTES = 1 << 20  # a request's JSON; a client with more sends several requests
FD_PAUSE_SECONDS = 0.1  # out of file descriptors: how long accept() waits before trying again
IDLE_SECONDS = 60  # a connection silent this long (idle, or a body short of its length) is closed
REQUEST_SECONDS = 120  # from a request's first byte to the end of its body
MAX_CONNECTIONS = 512  # open at once (a thread each); more wait in the listen queue
LINGER_SECONDS = 2  # after a refusal, how long an unread body is read and dropped before closing

# a route: the request's parsed JSON body (None for GET) and a check whether its client has left
Route = Callable[[Any, Callable[[], bool]], dict[str, Any]]


class ClientLeft(Exception):
    """Raised by a route whose client closed its connection before the answer was worked out."""


class BadRequest(Exception):
    """What is wrong with a request, sent back as {"error": ...} with `status`."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


class JsonServer(ThreadingHTTPServer):
    """A thread per connection, answering `routes`; `log` gets one line per request (None: none).

    The routes dict may be filled after the server is made (and bound): `translator serve` binds
    first, so that a port in use is refused before the model loads.
    """

    request_queue_size = 128  # a burst of new connections waits in the queue, is not refused
    daemon_threads = True  # idle keep-alive connections do not hold the exit (drain waits for work)

    def __init__(
        self,
        host: str,
        port: int,
        routes: dict[tuple[str, str], Route],
        log: Callable[[str], None] | None,
    ) -> None:
        # IPv4 or IPv6, as the host says
        self.address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        self.routes, self.log = routes, log
        self.busy = 0  # requests being answered
        self.connections: set[socket.socket] = set()  # open, each with its thread
        self.out_of_fds = False  # said once until an accept succeeds again
        self.at_capacity = False  # said once until the connections fall under the cap again
        self.closing = False
        self.changed = threading.Condition()
        super().__init__((host, port), Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        """accept(); out of file descriptors, a pause and one log line. socketserver drops the
        failed accept and selects again at once: the waiting connection made that a busy loop
        (a core kept busy, /health unanswered) until clients closed theirs. At MAX_CONNECTIONS
        nothing is accepted: new connections wait in the listen queue until one closes."""
        with self.changed:
            if len(self.connections) >= MAX_CONNECTIONS:
                if self.log is not None and not self.at_capacity:
                    self.log(f"{MAX_CONNECTIONS} connections open: new ones wait until one closes")
                self.at_capacity = True
                # woken by a close; the pause bounds how long shutdown() waits for this loop
                self.changed.wait_for(
                    lambda: len(self.connections) < MAX_CONNECTIONS, FD_PAUSE_SECONDS * 5
                )
                if len(self.connections) >= MAX_CONNECTIONS:
                    raise OSError(errno.EAGAIN, "at the connection cap")  # selects again
            self.at_capacity = False
        try:
            accepted = super().get_request()
        except OSError as err:
            if err.errno in (errno.EMFILE, errno.ENFILE):
                if self.log is not None and not self.out_of_fds:
                    self.log("out of file descriptors: new connections wait (raise `ulimit -n`)")
                self.out_of_fds = True
                time.sleep(FD_PAUSE_SECONDS)
            raise
        self.out_of_fds = False
        return accepted

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.changed:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(request)
        with self.changed:
            self.connections.discard(request)
            self.changed.notify_all()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A failure outside a request's answer (the client gone mid-write): one line."""
        if self.log is not None:
            self.log(f"connection from {client_address[0]}: {sys.exc_info()[1]!r}")

    def enter(self) -> bool:
        """Count a request in; False once draining (it is refused)."""
        with self.changed:
            if self.closing:
                return False
            self.busy += 1
            return True

    def leave(self) -> None:
        with self.changed:
            self.busy -= 1
            self.changed.notify_all()

    def serve_until_stopped(
        self, drain_seconds: float, stop: threading.Event | None = None
    ) -> None:
        """Serve from a thread of its own until Ctrl-C or SIGTERM (raised in this, the main
        thread) or `stop`; then drain, still accepting (new requests get 503), and close."""
        stop = stop or threading.Event()
        serving = threading.Thread(target=self.serve_forever, daemon=True)
        serving.start()
        try:
            while not stop.wait(0.5):  # the signal handlers run between waits
                pass
        finally:
            self.drain(drain_seconds)
            self.shutdown()
            self.server_close()

    def drain(self, seconds: float) -> bool:
        """Refuse new requests and wait until those being answered are done (True) or `seconds`
        pass (False)."""
        with self.changed:
            self.closing = True
            return self.changed.wait_for(lambda: self.busy == 0, timeout=seconds)


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
    server_version, sys_version = "translator", ""  # not the Python version
    timeout = IDLE_SECONDS
    server: JsonServer
    body_unread = False  # a refusal then closes with a linger (`finish`)

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
            return json.loads(body.decode("utf-8"))
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

    def _send(self, method: str, path: str, status: HTTPStatus, reply: dict, start: float) -> None:
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
            status_text = f"{status.value}, not delivered: the client left"
        else:
            status_text = str(status.value)
        if self.server.log is not None:
            self.server.log(f"{method} {path} {status_text} {time.perf_counter() - start:.3f}s")

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
