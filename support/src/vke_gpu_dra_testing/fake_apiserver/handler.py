"""The HTTP side of one connection: reads a request, lets the faults and holds have it, checks the token,
then hands it to the watch or the routes and writes the answer (a Status body for an `ApiError`)."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from ..k8s_protobuf import PROTOBUF, wants_protobuf
from . import claim_protobuf
from .errors import ApiError
from .kubeconfig import TOKEN
from .list_options import invalid_list_options, list_option_errors
from .routes import RESOURCE, route
from .watch import serve_watch

if TYPE_CHECKING:
    from .server import FakeAPIServer


class Handler(BaseHTTPRequestHandler):
    """Serves one connection for `api` (a subclass per server sets it)."""

    api: FakeAPIServer
    protocol_version = "HTTP/1.1"
    # Headers and body are separate writes: without TCP_NODELAY every response waits for the
    # client's delayed ACK (about 40 ms on Linux), as a real apiserver's never does.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send(self, code: int, body: dict[str, Any] | bytes) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", PROTOBUF if isinstance(body, bytes) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any] | bytes:
        """The request's body: JSON as a dict, a protobuf one as its bytes."""
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if (self.headers.get("Content-Type") or "") == PROTOBUF:
            return raw
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError as err:
            raise ApiError(400, "BadRequest", f"invalid JSON body: {err}") from err

    def _handle(self, method: str) -> None:
        split = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        path = split.path.rstrip("/")
        api = self.api
        body: dict[str, Any] = {}
        wire = b""
        accept = self.headers.get("Accept") or "application/json"
        try:
            if method in ("POST", "PUT", "PATCH", "DELETE"):
                sent = self._body()
                if isinstance(sent, bytes):
                    wire = sent
                else:
                    body = sent
            hold = api._admit(method, self.path)
            if hold is not None and not api._hold_request(hold):
                self.close_connection = True  # the server stopped: drop the request unanswered
                return
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if (
                method == "GET"
                and path == f"{RESOURCE}/resourceslices"
                and query.get("watch") in ("true", "1")
            ):
                errors = list_option_errors(query, watch=True, watch_list_enabled=api.watch_list)
                if errors:
                    raise invalid_list_options(errors)
                serve_watch(self, api, query)
                return
            content_type = self.headers.get("Content-Type") or ""
            code, result = route(
                api, method, path, query, body, content_type=content_type, accept=accept, wire=wire
            )
            self._send(code, result)
        except ApiError as err:
            if wants_protobuf(accept):
                self._send(err.code, claim_protobuf.status_body(err))
            else:
                self._send(err.code, err.status())

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_PATCH(self) -> None:
        self._handle("PATCH")
