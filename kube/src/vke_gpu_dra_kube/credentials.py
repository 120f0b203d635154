"""Who the client is to the API server: the Authorization header and the client certificate of a request.

A `Credentials` object answers `identity()` before each request. Files named by a kubeconfig or the
service account (`tokenFile`, the in-cluster token, client certificate and key files) are re-read when
they change and at least every `RELOAD_PERIOD` seconds, as client-go does: bound service-account tokens
rotate. When a file cannot be read any more, the last good contents are used (and the failure logged).

A 401 answer makes the client look again before the next request (`rejected`); the request itself is
not repeated. Nothing here ever puts a token, password or key in a message or a repr.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from vke_gpu_dra_core.kubeconfig import KubeconfigError

log = logging.getLogger(__name__)

#: Seconds after which a credential file is read again even if it looks unchanged (client-go: a minute).
RELOAD_PERIOD: Final = 60.0


@dataclass(frozen=True)
class ClientCert:
    """A client certificate (PEM, with any intermediates) and its private key (PEM)."""

    cert_pem: bytes = field(repr=False)
    key_pem: bytes = field(repr=False)


@dataclass(frozen=True)
class Identity:
    """What one request presents: an Authorization header value and/or a client certificate."""

    authorization: str | None = field(default=None, repr=False)
    client_cert: ClientCert | None = None


class Credentials(Protocol):
    def identity(self, within: float) -> Identity:
        """The identity for the next request; `within`: seconds it may take. KubeconfigError if none."""
        ...

    def rejected(self, identity: Identity) -> None:
        """The API server answered 401 to `identity`: look again before the next request."""
        ...

    def ready(self) -> Identity | None:
        """The identity if it is known without running anything (to check it at start), else None."""
        ...


class WatchedFile:
    """A file read again when it changes (inode, size or modification time) and every `period` seconds."""

    def __init__(
        self,
        path: Path,
        what: str,
        *,
        period: float = RELOAD_PERIOD,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.what = what
        self._period = period
        self._clock = clock
        self._lock = threading.Lock()
        self._data: bytes | None = None
        self._signature: tuple[int, ...] | None = None
        self._read_at = 0.0
        self._stale = False
        self.read()  # a file that cannot be read at all is an error now, not at the first request

    def _signature_now(self) -> tuple[int, ...] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns)

    def mark_stale(self) -> None:
        with self._lock:
            self._stale = True

    def read(self) -> bytes:
        """The file's contents; KubeconfigError when it was never readable."""
        with self._lock:
            signature = self._signature_now()
            fresh = (
                self._data is not None
                and not self._stale
                and signature == self._signature
                and self._clock() - self._read_at < self._period
            )
            if fresh and self._data is not None:
                return self._data
            try:
                data = self.path.read_bytes()
            except OSError as err:
                reason = os.strerror(err.errno) if err.errno else type(err).__name__
                if self._data is None:
                    raise KubeconfigError(f"{self.what} {self.path} cannot be read: {reason}") from None
                log.warning(
                    "credential file cannot be read: keeping its last contents",
                    extra={"fields": {"file": str(self.path), "error": reason}},
                )
                self._read_at = self._clock()  # say it once a period, not per request
                return self._data
            self._data, self._signature, self._read_at, self._stale = data, signature, self._clock(), False
            return data


#: Where a credential comes from: fixed bytes, or a watched file.
Source = Callable[[], bytes]


def fixed(data: bytes) -> Source:
    return lambda: data


class KubeconfigCredentials:
    """A bearer token (inline and/or `tokenFile`), basic auth, and/or a client certificate and key."""

    def __init__(
        self,
        *,
        token: str | None = None,
        token_file: WatchedFile | None = None,
        basic: tuple[str, str] | None = None,
        cert: Source | None = None,
        key: Source | None = None,
        files: tuple[WatchedFile, ...] = (),
    ) -> None:
        self._token = token
        self._token_file = token_file
        self._basic = basic
        self._cert = cert
        self._key = key
        self._files = tuple(f for f in (token_file, *files) if f is not None)

    def _authorization(self) -> str | None:
        token = self._token
        if self._token_file is not None:  # the file wins; the inline token is the fallback (client-go)
            token = self._token_file.read().decode("utf-8", errors="replace").strip() or token
        if token:
            return f"Bearer {token}"
        if self._basic is not None:
            pair = f"{self._basic[0]}:{self._basic[1]}".encode()
            return f"Basic {base64.b64encode(pair).decode('ascii')}"
        return None

    def identity(self, within: float = 0.0) -> Identity:
        cert = None
        if self._cert is not None and self._key is not None:
            cert = ClientCert(self._cert(), self._key())
        return Identity(self._authorization(), cert)

    def ready(self) -> Identity | None:
        return self.identity()

    def rejected(self, identity: Identity) -> None:
        for file in self._files:
            file.mark_stale()


#: No credentials at all (anonymous requests).
ANONYMOUS: Final = KubeconfigCredentials()
