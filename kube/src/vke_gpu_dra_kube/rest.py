"""A lean HTTP transport to the Kubernetes API server on the standard library's `http.client` (neither
the official client nor urllib3 in the import path).

* One attempt per request, no redirects followed, with an explicit timeout: seconds for the whole
  request, or (connect, read). An idle connection that the server has closed is found before a request
  is sent on it and replaced by a new one; a request that was sent is never sent again.
* Connections are kept for reuse: at most `pool_size` idle ones, the most recently used lent first. A
  request never waits for one (it opens a new one when none is idle; one handed back to a full pool is
  closed). A connection goes back only when its answer was read to the end and the server keeps it open.
* TLS: the configured CA certificates (else the system's), the server's name checked (or
  `tls-server-name`, also sent as SNI), an optional client certificate. Client certificates and keys are
  loaded into the TLS context through a private temporary file (mode 0600) that is removed as soon as
  they are loaded; a new certificate (rotated by an exec plugin or on disk) gets new connections. A
  configuration that skips verification is said once, in the log.
* `proxy-url`: an http:// server is asked through the proxy (absolute URIs), an https:// server through
  the proxy's CONNECT tunnel. An https:// proxy is spoken to over TLS (the system's CA certificates, its
  name checked); it can carry http:// servers only (no TLS inside TLS).
* Credentials are asked for before each request (tokens and exec plugins rotate); a 401 makes them look
  again before the next request.
* A request that gets no answer raises `TransportError` with the failure in words
  (`failures.network_failure`); any HTTP answer, 4xx and 5xx included, is returned as a `Response`.
"""

from __future__ import annotations

import http.client
import logging
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Final
from urllib.parse import SplitResult, urlencode, urlsplit

from vke_gpu_dra_core.kubeconfig import KubeconfigError

from .client_config import ClientConfig
from .connections import Connection, Lease, Pool, Response, TransportError
from .credentials import ClientCert
from .failures import network_failure, server_url
from .settings import REQUEST_TIMEOUT, Timeout, log_tls_unverified

__all__ = ["DEFAULT_POOL_SIZE", "USER_AGENT", "Response", "RestClient", "TransportError", "tls_context"]

log = logging.getLogger(__name__)

#: Idle connections kept per API server unless the caller says otherwise.
DEFAULT_POOL_SIZE: Final = 10
#: The User-Agent of every request.
USER_AGENT: Final = "vke-gpu-dra"
#: Ports of URLs that name none.
_PORTS: Final = {"http": 80, "https": 443}


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


def _port(parts: SplitResult, what: str) -> int:
    """The port of the URL `parts` (its scheme's when it names none); KubeconfigError saying `what`."""
    try:
        port = parts.port
    except ValueError:
        raise KubeconfigError(f"{what}: the port must be a number from 0 to 65535") from None
    return _PORTS[parts.scheme] if port is None else port


class RestClient:
    """Requests to one API server; `close()` drops its idle connections."""

    def __init__(self, config: ClientConfig, *, pool_size: int = DEFAULT_POOL_SIZE) -> None:
        parts = urlsplit(config.server)
        if parts.scheme not in _PORTS or not parts.hostname:
            raise KubeconfigError(
                f"{config.source}: server {server_url(config.server)!r} is not an https:// or http:// URL"
            )
        if pool_size < 1:
            raise ValueError(f"pool_size must be 1 or more, not {pool_size}")
        self.config = config
        self.server = server_url(config.server).rstrip("/")
        self.host = parts.hostname
        self._port = _port(parts, f"{config.source}: server {self.server!r}")
        self._https = parts.scheme == "https"
        self._tls_name = (config.tls_server_name or self.host).rstrip(".")
        #: Where requests are sent: the server's path, or for a proxy the absolute URI.
        self._target = parts.path.rstrip("/")
        self._proxy: tuple[str, int, ssl.SSLContext | None] | None = None
        if config.proxy_url:
            self._proxy = self._proxy_of(config.proxy_url)
            if not self._https:
                self._target = f"http://{parts.netloc.rpartition('@')[2]}{self._target}"
        self._pool_size = pool_size
        self._lock = threading.Lock()
        self._pool: Pool | None = None
        self._pool_cert: ClientCert | None = None
        if config.insecure and self._https:
            log_tls_unverified(log, self.server)
        ready = config.credentials.ready()
        self._pool_for(ready.client_cert if ready is not None else None)  # bad TLS settings fail now

    def _proxy_of(self, url: str) -> tuple[str, int, ssl.SSLContext | None]:
        """The proxy's host, port and, for an https:// proxy, the TLS context to speak to it."""
        parts = urlsplit(url)
        where = f"{self.config.source}: proxy-url {server_url(url)!r}"
        if parts.scheme not in _PORTS or not parts.hostname:
            raise KubeconfigError(f"{where} is not an http:// or https:// URL")
        if parts.scheme == "https" and self._https:
            raise KubeconfigError(
                f"{where}: an https:// server cannot be reached through an https:// proxy "
                "(use an http:// proxy: the server's TLS goes through its CONNECT tunnel)"
            )
        tls = ssl.create_default_context() if parts.scheme == "https" else None
        return parts.hostname, _port(parts, where), tls

    def _connection(self, tls: ssl.SSLContext | None) -> Connection:
        """A new, unopened connection; `tls` the context for the server (None: http://)."""
        if self._proxy is None:
            return Connection(self.host, self._port, tls, self._tls_name)
        host, port, proxy_tls = self._proxy
        if tls is not None:
            return Connection(host, port, tls, self._tls_name, tunnel=(self.host, self._port))
        return Connection(host, port, proxy_tls, host.rstrip("."))

    def _pool_for(self, cert: ClientCert | None) -> Pool:
        """The pool presenting `cert`; a new certificate gets a new pool, and the old one's connections
        are closed once their requests end."""
        with self._lock:
            if self._pool is None or cert != self._pool_cert:
                tls = tls_context(self.config, cert) if self._https else None
                old = self._pool
                self._pool = Pool(lambda: self._connection(tls), self._pool_size)
                self._pool_cert = cert
                if old is not None:
                    old.close()
            return self._pool

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: bytes | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
        timeout: Timeout = REQUEST_TIMEOUT,
        stream: bool = False,
    ) -> Response:
        """One attempt at `method path?query`, asking for an answer in `accept`; the answer whatever its
        status, its body read unless `stream` (then read and close the response). TransportError when no
        answer came; KubeconfigError when there are no credentials to send (an exec plugin failed)."""
        credentials = self.config.credentials
        identity = credentials.identity(_seconds(timeout))
        pool = self._pool_for(identity.client_cert)
        headers = {"Accept": accept, "User-Agent": USER_AGENT}
        if identity.authorization:
            headers["Authorization"] = identity.authorization
        if body is not None:
            headers["Content-Type"] = content_type
        target = self._target + path + (f"?{urlencode(list(query))}" if query else "")
        response = self._send(pool, method, target, body=body, headers=headers, timeout=timeout)
        if not stream:
            response.read()
        if response.status == 401:
            credentials.rejected(identity)
        return response

    def _send(
        self,
        pool: Pool,
        method: str,
        target: str,
        *,
        body: bytes | None,
        headers: dict[str, str],
        timeout: Timeout,
    ) -> Response:
        """Send the request once, on an idle connection or a new one; the answer, its body unread."""
        started = time.monotonic()
        connect_s, read_s = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        conn = pool.get()
        if conn is None:
            try:
                conn = pool.connect(connect_s)
            except (OSError, http.client.HTTPException) as err:
                raise TransportError(network_failure(err, timeout, self.host, connecting=True)) from err
        if not isinstance(timeout, tuple):  # what is left of the whole request's time
            read_s = timeout - (time.monotonic() - started)
            if read_s <= 0:
                pool.put(conn)  # nothing was sent on it
                raise TransportError(network_failure(TimeoutError(), timeout, self.host))
        sock = conn.sock
        try:
            sock.settimeout(read_s)
            conn.request(method, target, body=body, headers=headers)
            answer = conn.getresponse()
        except BaseException as err:
            conn.close()
            if isinstance(err, OSError | http.client.HTTPException):
                raise TransportError(network_failure(err, timeout, self.host)) from err
            raise
        return Response(answer, Lease(conn, pool, sock), timeout, self.host)

    def close(self) -> None:
        """Close the idle connections (those in use when their requests end); later requests open new
        ones."""
        with self._lock:
            old, self._pool = self._pool, None
        if old is not None:
            old.close()
