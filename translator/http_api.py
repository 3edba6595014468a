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
client reads the 4xx instead of a connection reset. The server and its connections are here; one
request's reading, routing and answer are http_request.py's.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any, NoReturn

from translator.errors import counted
from translator.http_request import Handler

FD_PAUSE_SECONDS = 0.1  # out of file descriptors: how long accept() waits before trying again
MAX_CONNECTIONS = 512  # open at once (a thread each); more wait in the listen queue

# a route: the request's parsed JSON body (None for GET) and a check whether its client has left
Route = Callable[[Any, Callable[[], bool]], dict[str, Any]]


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
        thread) or `stop`; then drain, still accepting (new requests get 503), and close. A
        second signal while draining ends the process at once (stop_at_once)."""
        stop = stop or threading.Event()
        serving = threading.Thread(target=self.serve_forever, daemon=True)
        serving.start()
        try:
            while not stop.wait(0.5):  # the signal handlers run between waits
                pass
        finally:
            try:
                self.drain(drain_seconds)
            except (KeyboardInterrupt, SystemExit) as again:
                stop_at_once(again, self.busy)
            self.shutdown()
            self.server_close()

    def drain(self, seconds: float) -> bool:
        """Refuse new requests and wait until those being answered are done (True) or `seconds`
        pass (False)."""
        with self.changed:
            self.closing = True
            return self.changed.wait_for(lambda: self.busy == 0, timeout=seconds)


def stop_at_once(signal_exit: KeyboardInterrupt | SystemExit, busy: int) -> NoReturn:
    """End the process now with the signal's exit code (130 or 143), dropping the requests being
    answered. A normal exit would first wait for them: Python joins a ThreadPoolExecutor's threads
    at exit, and the route's work (a decoding) runs on one."""
    code = signal_exit.code if isinstance(signal_exit, SystemExit) else 128 + signal.SIGINT
    print(
        f"serve: stopped at once by a second signal; {counted(busy, 'request')} not answered",
        file=sys.stderr,
        flush=True,
    )
    sys.stdout.flush()
    os._exit(code if isinstance(code, int) else 1)
