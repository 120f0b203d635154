"""`FakeAPIServer`: the resources, faults and holds of the fake, served over HTTP(S) on 127.0.0.1 in a
thread of its own."""

from __future__ import annotations

import socket
import ssl
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

from .faults import FaultControls
from .handler import Handler
from .kubeconfig import write_kubeconfig
from .slices import SliceStore


class _Listener(ThreadingHTTPServer):
    """Listens with the system's backlog, as the API server's Go listener does. The standard library's
    5 would drop the connection requests of a burst (a plugin reading many claims at once) and make
    each wait a second for its SYN to be sent again, which no real API server does."""

    request_queue_size = socket.SOMAXCONN


class FakeAPIServer(SliceStore, FaultControls):
    """State, HTTP serving and test helpers. Use as a context manager or call start()/stop()."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        super().__init__()
        #: Serve HTTPS with this context (a test's self-signed certificate) instead of HTTP.
        self.ssl_context = ssl_context
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> FakeAPIServer:
        server = self

        class ServerHandler(Handler):
            api = server

        self._httpd = _Listener(("127.0.0.1", 0), ServerHandler)
        self._httpd.daemon_threads = True
        if self.ssl_context is not None:
            self._httpd.socket = self.ssl_context.wrap_socket(self._httpd.socket, server_side=True)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-apiserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> FakeAPIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"{'https' if self.ssl_context else 'http'}://{host!s}:{port}"

    def write_kubeconfig(self, path: Path, *, insecure: bool = False) -> Path:
        return write_kubeconfig(path, self.url, insecure=insecure)
