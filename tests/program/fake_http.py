"""A tiny HTTP server on 127.0.0.1 that records requests and answers from a handler function.

Used to test the dynamic providers with the real SDK clients (volcenginesdkvke, kubernetes)
at their HTTP boundary.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    body: Any


Responder = Callable[[Request], tuple[int, Any]]


@dataclass
class FakeServer:
    url: str
    requests: list[Request]


@contextmanager
def serve(responder: Responder) -> Iterator[FakeServer]:
    requests: list[Request] = []

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except json.JSONDecodeError:
                body = raw.decode("utf-8", "replace")
            parts = urlsplit(self.path)
            headers = {k.lower(): v for k, v in self.headers.items()}
            request = Request(self.command, parts.path, parse_qs(parts.query), headers, body)
            requests.append(request)
            status, payload = responder(request)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = _handle
        do_POST = _handle

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield FakeServer(url=f"http://127.0.0.1:{server.server_address[1]}", requests=requests)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
