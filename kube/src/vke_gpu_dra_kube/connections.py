"""Connections to the API server for `rest.RestClient`: a small pool of `http.client` connections, and
the `Response` a request answers, read at once or streamed, whose connection goes back to the pool only
when its body was read to the end on a connection the server keeps open."""

from __future__ import annotations

import contextlib
import http.client
import select
import socket
import ssl
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from .failures import NetworkFailure, network_failure
from .settings import Timeout

#: The most bytes `Response.stream` yields at once.
STREAM_CHUNK: Final = 65536


class TransportError(Exception):
    """A request that got no answer; `failure` says why in words."""

    def __init__(self, failure: NetworkFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class Connection(http.client.HTTPConnection):
    """A connection to the API server or to the proxy in front of it (through whose CONNECT `tunnel` the
    server is reached). With `tls`, TLS is spoken on it (to the server when tunnelling, else to the host
    connected to) and the certificate checked against `tls_name`, which is also sent as SNI."""

    def __init__(
        self,
        host: str,
        port: int,
        tls: ssl.SSLContext | None,
        tls_name: str,
        tunnel: tuple[str, int] | None = None,
    ) -> None:
        super().__init__(host, port)
        self._tls = tls
        self._tls_name = tls_name
        if tls is not None:
            self.default_port = 443  # the Host header names the port only when it is not the scheme's
        if tunnel is not None:
            self.set_tunnel(*tunnel)

    def connect(self) -> None:
        super().connect()  # TCP, then the proxy's CONNECT when tunnelling
        if self._tls is not None:
            self.sock = self._tls.wrap_socket(self.sock, server_hostname=self._tls_name)

    def dropped(self) -> bool:
        """Whether this idle connection cannot take a request: closed, or readable (the server closed
        it, or sent what was not asked for). Does not wait."""
        sock = self.sock
        if sock is None or sock.fileno() < 0:
            return True
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))


def close_all(connections: list[Connection]) -> None:
    for conn in connections:
        conn.close()


class Pool:
    """Open connections to one server: at most `size` idle ones, the most recently used lent first.
    Never waits: `get` is None when none is idle, and the caller opens one with `connect`."""

    def __init__(self, new: Callable[[], Connection], size: int) -> None:
        self._new = new
        self._size = size
        self._idle: list[Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        weakref.finalize(self, close_all, self._idle)  # a pool never closed closes its connections

    def get(self) -> Connection | None:
        """An idle connection still open, else None; those found closed are dropped on the way."""
        while True:
            with self._lock:
                if not self._idle:
                    return None
                conn = self._idle.pop()
            if not conn.dropped():
                return conn
            conn.close()

    def connect(self, timeout: float) -> Connection:
        """A new connection, open within `timeout` seconds; the error that stopped it else."""
        conn = self._new()
        conn.timeout = timeout
        try:
            conn.connect()
        except BaseException:
            conn.close()
            raise
        return conn

    def put(self, conn: Connection) -> None:
        """`conn`, free again: kept if there is room and the pool is open, else closed."""
        with self._lock:
            if not self._closed and len(self._idle) < self._size:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the idle connections; those lent out are closed when they are handed back."""
        with self._lock:
            self._closed = True
            idle = self._idle[:]
            self._idle.clear()
        close_all(idle)


@dataclass(frozen=True, slots=True)
class Lease:
    """`conn`, lent by `pool` to one request until its answer is read; `sock` is its socket."""

    conn: Connection
    pool: Pool
    sock: socket.socket


def _read_to_end(answer: http.client.HTTPResponse) -> bool:
    """Whether `answer`'s body was read to its end on a connection the server keeps open."""
    if answer.will_close:
        return False
    return answer.isclosed() if answer.length is None else answer.length == 0


class Response:
    """An answer of the API server: `status`, `reason`, `headers` and the body, `data`.

    The body of an answer to a `stream=True` request is left to read: `stream()` as it arrives, or
    `read()` at once; then `close()` (from the reading thread; `shutdown()` stops a read from another).
    The connection goes back to the pool when the body was read to its end and the server keeps it open;
    otherwise it is closed. A failure while reading raises TransportError.
    """

    def __init__(self, answer: http.client.HTTPResponse, lease: Lease, timeout: Timeout, host: str) -> None:
        self.status: int = answer.status
        self.reason: str = answer.reason
        self.headers: http.client.HTTPMessage = answer.headers
        self._data = b""
        self._answer: http.client.HTTPResponse | None = answer
        self._lease: Lease | None = lease
        self._timeout = timeout
        self._host = host
        self._stopped = False
        self._lock = threading.Lock()

    @property
    def data(self) -> bytes:
        """The body; what was left unread of it is read to its end now."""
        if self._answer is not None:
            self.read()
        return self._data

    def read(self) -> bytes:
        """What was left unread of the body, read to its end (and kept in `data`); then closed."""
        rest = self._read(None)
        self._data += rest
        self.close()
        return rest

    def stream(self, amt: int = STREAM_CHUNK) -> Iterator[bytes]:
        """The body as it arrives, `amt` bytes at most at a time (each chunk of a chunked body as soon
        as it comes); closed at its end."""
        while chunk := self._read(amt):
            yield chunk
        self.close()

    def close(self) -> None:
        """Done with the answer: its connection goes back to the pool if the body was read to its end,
        else it is closed. Closing again does nothing."""
        self._give_back(reuse=True)

    def shutdown(self) -> None:
        """Stop a read of the body in progress in another thread (a watch being stopped): the read ends
        in TransportError, or as the end of the body, and the connection is dropped. Nothing once
        closed."""
        with self._lock:
            if self._lease is None:
                return
            self._stopped = True
            with contextlib.suppress(OSError):  # already closed by the server
                self._lease.sock.shutdown(socket.SHUT_RDWR)

    def __del__(self) -> None:
        # An answer dropped before it was closed (a watch stopped before it was read) drops its connection.
        if getattr(self, "_lease", None) is not None:
            self._give_back(reuse=False)

    def _read(self, amt: int | None) -> bytes:
        answer = self._answer
        if answer is None:
            return b""
        try:
            return answer.read() if amt is None else answer.read1(amt)
        except (OSError, http.client.HTTPException, ValueError) as err:
            self._give_back(reuse=False)
            raise TransportError(network_failure(err, self._timeout, self._host)) from err

    def _give_back(self, *, reuse: bool) -> None:
        with self._lock:
            answer, lease = self._answer, self._lease
            self._answer = self._lease = None
            reuse = reuse and not self._stopped
        if answer is None or lease is None:
            return
        reuse = reuse and _read_to_end(answer)
        answer.close()
        if reuse:
            lease.pool.put(lease.conn)
        else:
            lease.conn.close()
