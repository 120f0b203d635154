"""A lean HTTP transport to the Kubernetes API server on urllib3 (no official client in the import path).

* One attempt per request (`settings.NO_RETRIES`, no redirects followed) with an explicit timeout:
  seconds for the whole request, or (connect, read).
* One connection pool of `pool_size` connections to the server, never blocking when it is full.
* TLS: the configured CA certificates (else the system's), the server's name checked (or
  `tls-server-name`), an optional client certificate. Client certificates and keys are loaded into the
  TLS context through a private temporary file (mode 0600) that is removed as soon as they are loaded.
  A configuration that skips verification is said once, in the log.
* Credentials are asked for before each request (tokens and exec plugins rotate); a 401 makes them look
  again before the next request.
* A request that gets no answer raises `TransportError` with the failure in words
  (`failures.network_failure`); any HTTP answer, 4xx and 5xx included, is returned as it is.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
import threading
from collections.abc import Sequence
from typing import Final
from urllib.parse import urlencode, urlsplit

import urllib3
from vke_gpu_dra_core.kubeconfig import KubeconfigError

from .client_config import ClientConfig
from .credentials import ClientCert
from .failures import NetworkFailure, network_failure, server_url
from .settings import NO_RETRIES, REQUEST_TIMEOUT, Timeout, say_tls_unverified, urllib3_timeout

log = logging.getLogger(__name__)

#: Connections kept per API server unless the caller says otherwise.
DEFAULT_POOL_SIZE: Final = 10
#: The User-Agent of every request.
USER_AGENT: Final = "vke-gpu-dra"


class TransportError(Exception):
    """A request that got no answer; `failure` says why in words."""

    def __init__(self, failure: NetworkFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def _seconds(timeout: Timeout) -> float:
    return sum(timeout) if isinstance(timeout, tuple) else timeout


def _load_client_cert(context: ssl.SSLContext, cert: ClientCert, source: str) -> None:
    fd, name = tempfile.mkstemp(prefix="client-cert-", suffix=".pem")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(cert.cert_pem.rstrip(b"\n") + b"\n" + cert.key_pem)
        context.load_cert_chain(name)
    except ssl.SSLError as err:
        raise KubeconfigError(
            f"{source}: the client certificate and key cannot be used ({err.reason or 'not PEM'})"
        ) from None
    finally:
        os.unlink(name)


def tls_context(config: ClientConfig, cert: ClientCert | None) -> ssl.SSLContext:
    """The TLS context for `config` presenting `cert`; KubeconfigError naming what cannot be used."""
    if config.insecure:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        try:
            context = ssl.create_default_context(
                cadata=config.ca_pem.decode("ascii", errors="replace") if config.ca_pem else None
            )
        except ssl.SSLError:
            raise KubeconfigError(f"{config.source}: the CA certificate is not a PEM certificate") from None
    if cert is not None:
        _load_client_cert(context, cert, config.source)
    return context


class RestClient:
    """Requests to one API server; `close()` drops its connections."""

    def __init__(self, config: ClientConfig, *, pool_size: int = DEFAULT_POOL_SIZE) -> None:
        parts = urlsplit(config.server)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise KubeconfigError(
                f"{config.source}: server {server_url(config.server)!r} is not an https:// or http:// URL"
            )
        self.config = config
        self.server = server_url(config.server).rstrip("/")
        self.host = parts.hostname
        self._base = config.server.rstrip("/")
        self._pool_size = pool_size
        self._lock = threading.Lock()
        self._pool: urllib3.PoolManager | None = None
        self._pool_cert: ClientCert | None = None
        if config.insecure and parts.scheme == "https":
            say_tls_unverified(log, self.server)
        ready = config.credentials.ready()
        self._pool_for(ready.client_cert if ready is not None else None)  # bad TLS settings fail now

    def _new_pool(self, cert: ClientCert | None) -> urllib3.PoolManager:
        kwargs: dict[str, object] = {"maxsize": self._pool_size, "block": False, "retries": NO_RETRIES}
        if self._base.startswith("https:"):
            kwargs["ssl_context"] = tls_context(self.config, cert)
            if self.config.insecure:
                kwargs["cert_reqs"] = ssl.CERT_NONE
            if self.config.tls_server_name:
                kwargs["server_hostname"] = self.config.tls_server_name
        if self.config.proxy_url:
            return urllib3.ProxyManager(self.config.proxy_url, num_pools=1, **kwargs)  # type: ignore[arg-type]
        return urllib3.PoolManager(num_pools=1, **kwargs)  # type: ignore[arg-type]

    def _pool_for(self, cert: ClientCert | None) -> urllib3.PoolManager:
        """The pool presenting `cert`; a new certificate (rotated by an exec plugin or on disk) gets a
        new pool, and the old one's connections are closed once their requests end."""
        with self._lock:
            if self._pool is None or cert != self._pool_cert:
                old, self._pool = self._pool, self._new_pool(cert)
                self._pool_cert = cert
                if old is not None:
                    old.clear()
            return self._pool

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: bytes | None = None,
        content_type: str = "application/json",
        timeout: Timeout = REQUEST_TIMEOUT,
        stream: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        """One attempt at `method path?query`; the answer whatever its status. `stream`: the body is left
        to read (then release or close the response). TransportError when no answer came;
        KubeconfigError when there are no credentials to send (an exec plugin failed)."""
        credentials = self.config.credentials
        identity = credentials.identity(_seconds(timeout))
        pool = self._pool_for(identity.client_cert)
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if identity.authorization:
            headers["Authorization"] = identity.authorization
        if body is not None:
            headers["Content-Type"] = content_type
        url = self._base + path + (f"?{urlencode(list(query))}" if query else "")
        try:
            response = pool.urlopen(
                method,
                url,
                body=body,
                headers=headers,
                timeout=urllib3_timeout(timeout),
                retries=NO_RETRIES,
                redirect=False,
                preload_content=not stream,
            )
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise TransportError(network_failure(err, timeout, self.host)) from err
        if response.status == 401:
            credentials.rejected(identity)
        return response

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.clear()
