"""An in-process HTTPS server that records what clients send, and the certificates it needs.

`make_pki` builds, with the openssl CLI, a CA, a server certificate for 127.0.0.1 / localhost /
kube.test signed by it, a client certificate (CN test-user) signed by it, and a second CA that signed
nothing. `RecordingServer` answers every request as `behaviour` says and records the method, path,
query, Authorization header and client certificate CN of each.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import struct
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from vke_gpu_dra_kube.rest import RestClient

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")

_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@dataclass(frozen=True)
class Pki:
    root: Path

    def __getattr__(self, name: str) -> Path:  # ca_crt, server_key, client_crt, other_ca_crt, ...
        return self.root / name.replace("_crt", ".crt").replace("_key", ".key")

    def text(self, name: str) -> str:
        return (self.root / name).read_text()


def _ca(root: Path, name: str) -> None:
    _openssl("req", "-x509", *_EC, "-days", "2", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=root)  # fmt: skip


def _leaf(root: Path, name: str, subject: str, extensions: str, serial: int) -> None:
    _openssl("req", *_EC, "-subj", subject, "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=root)
    (root / f"{name}.ext").write_text(extensions)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-set_serial", str(serial), "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt",
             cwd=root)  # fmt: skip


def make_pki(root: Path) -> Pki:
    root.mkdir(parents=True, exist_ok=True)
    _ca(root, "ca")
    _ca(root, "other_ca")
    _leaf(
        root,
        "server",
        "/CN=kube-apiserver",
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kube.test\nextendedKeyUsage=serverAuth\n",
        2,
    )
    _leaf(root, "client", "/CN=test-user/O=system:masters", "extendedKeyUsage=clientAuth\n", 3)
    _leaf(root, "client2", "/CN=rotated-user", "extendedKeyUsage=clientAuth\n", 4)  # fmt: skip
    return Pki(root)


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    query: list[tuple[str, str]]
    authorization: str | None
    client_cn: str | None
    content_type: str | None
    body: bytes


@dataclass
class RecordingServer:
    """`behaviour`: "ok" (200 with a JSON echo), "500", "reset" (the connection is reset, no answer)
    or "hang" (no answer until the server stops). `tokens`: when set, a request whose Authorization
    is not one of them gets 401."""

    pki: Pki | None = None
    require_client_cert: bool = False
    behaviour: str = "ok"
    tokens: set[str] | None = None
    seen: list[Seen] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> RecordingServer:
        context = None
        if self.pki is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.pki.server_crt, self.pki.server_key)
            context.load_verify_locations(self.pki.ca_crt)
            context.verify_mode = ssl.CERT_REQUIRED if self.require_client_cert else ssl.CERT_OPTIONAL
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
                rdns: Any = (peer or {}).get("subject", ())  # ((("commonName", "x"),), ...)
                subject: dict[str, str] = {k: v for rdn in rdns for k, v in rdn}
                url = urlsplit(self.path)
                server.seen.append(
                    Seen(self.command, url.path, parse_qsl(url.query), self.headers.get("Authorization"),
                         subject.get("commonName"), self.headers.get("Content-Type"), body)
                )  # fmt: skip
                if server.behaviour == "hang":
                    server._stop.wait(30)
                    return
                if server.behaviour == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()
                    return
                if server.tokens is not None and self.headers.get("Authorization") not in server.tokens:
                    self._answer(401, {"kind": "Status", "reason": "Unauthorized", "message": "Unauthorized"})
                elif server.behaviour == "500":
                    self._answer(500, {"kind": "Status", "reason": "InternalError", "message": "boom"})
                else:
                    self._answer(200, {"path": url.path, "user": subject.get("commonName")})

            def _answer(self, status: int, obj: dict[str, Any]) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def finish_request(self, request: Any, client_address: Any) -> None:
                if context is None:
                    super().finish_request(request, client_address)
                    return
                try:  # the handshake runs in the request's thread, not the accepting one
                    wrapped = context.wrap_socket(request, server_side=True)
                except (ssl.SSLError, OSError):
                    return
                try:
                    super().finish_request(wrapped, client_address)
                finally:
                    wrapped.close()

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"{'https' if self.pki else 'http'}://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(10)


def kubeconfig(
    server: str, cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A kubeconfig (as a dict) with one context `ctx` for cluster `c` at `server` and user `u`."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "ctx",
        "clusters": [{"name": "c", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": "u", "user": user or {}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
    }


#: Clients the tests opened, closed after each test by the folder's conftest.
_TRACKED: list[RestClient] = []


def track(client: RestClient) -> RestClient:
    """`client`, closed when the test ends."""
    _TRACKED.append(client)
    return client


def close_tracked() -> None:
    while _TRACKED:
        _TRACKED.pop().close()
