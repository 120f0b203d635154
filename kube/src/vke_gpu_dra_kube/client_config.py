"""Where the API server is and how to talk to it: what the kubeconfig loader and the in-cluster set-up
produce and the lean transport (`rest`) consumes."""

from __future__ import annotations

from dataclasses import dataclass, field

from .credentials import ANONYMOUS, Credentials


@dataclass(frozen=True)
class ClientConfig:
    """`server`: the API server's base URL. `source` names where this came from, for messages (the
    kubeconfig file, or the service account). `ca_pem`: the CA certificates that sign the server's
    certificate (None: the system's). `tls_server_name`: the name to verify the server's certificate
    against (and send as SNI) instead of the URL's host. `proxy_url`: an HTTP(S) proxy."""

    server: str
    source: str
    credentials: Credentials = field(default=ANONYMOUS, repr=False)
    ca_pem: bytes | None = field(default=None, repr=False)
    insecure: bool = False
    tls_server_name: str | None = None
    proxy_url: str | None = field(default=None, repr=False)
