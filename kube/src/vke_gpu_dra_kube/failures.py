"""What went wrong on the way to the API server, in words (DNS, TLS, refused, timeout, reset).

Pure mapping of socket, TLS and http.client errors, and of urllib3's; it imports neither the official
client nor the transport, so every caller (the driver's lean transport, the operator tools on the
official client) says the same. It does not load urllib3: an urllib3 error exists only once urllib3 has
been imported by its user.
"""

from __future__ import annotations

import http.client
import re
import socket
import ssl
import sys
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit, urlunsplit

from .reasons import CREDENTIALS_ERROR, TIMEOUT, TLS_ERROR, TRANSPORT_ERROR, UNREACHABLE
from .settings import REQUEST_TIMEOUT, Timeout

__all__ = [
    "CREDENTIALS_ERROR",
    "TIMEOUT",
    "TLS_ERROR",
    "TRANSPORT_ERROR",
    "UNREACHABLE",
    "NetworkFailure",
    "network_failure",
]


_DNS_TEXTS: Final = (
    "Name or service not known",
    "nodename nor servname",
    "Temporary failure in name resolution",
)


@dataclass(frozen=True)
class NetworkFailure:
    """A request that got no answer: `reason` (UNREACHABLE, TIMEOUT, TLS_ERROR or TRANSPORT_ERROR) and
    `message`, what happened in words (the cause, never an exception class)."""

    reason: str
    message: str

    def __str__(self) -> str:
        return self.message


def first_line(err: BaseException) -> str:
    """The first line of `err`'s message (200 characters at most), else its class name."""
    text = str(err).strip().splitlines()
    return text[0][:200] if text else type(err).__name__


def server_url(url: str) -> str:
    """`url` for messages, without any user:password part."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _seconds(timeout: Timeout, part: int) -> str:
    value = timeout[part] if isinstance(timeout, tuple) else timeout
    return f"{value:.1f}".removesuffix(".0")


def tls_failure(text: str) -> NetworkFailure:
    """A TLS handshake that failed, with OpenSSL's reason when `text` carries one."""
    found = re.search(r"certificate verify failed: ([^()'\"]+)", text) or re.search(
        r"\[SSL: [A-Z_]+\] ([^()'\"]+)", text
    )
    detail = found.group(1).strip() if found else "handshake failed"
    return NetworkFailure(
        TLS_ERROR, f"TLS failed ({detail}): check the kubeconfig's server URL and certificate-authority-data"
    )


def _urllib3_error(err: BaseException, *names: str) -> bool:
    """Whether `err` is one of urllib3's exceptions `names` (False while urllib3 is not loaded)."""
    module = sys.modules.get("urllib3.exceptions")
    return module is not None and isinstance(err, tuple(getattr(module, name) for name in names))


def network_failure(  # noqa: PLR0911 (one answer per kind of failure)
    err: BaseException,
    timeout: Timeout = REQUEST_TIMEOUT,
    host: str | None = None,
    *,
    connecting: bool = False,
) -> NetworkFailure:
    """What went wrong on the way to the API server; `timeout` is the request's, `host` the server's.
    `connecting`: `err` came while the connection was being opened (TCP, a proxy's tunnel, the TLS
    handshake), not while the request was sent or its answer read."""
    cause: BaseException = err
    reason = getattr(cause, "reason", None)  # what urllib3's MaxRetryError wraps
    if _urllib3_error(cause, "MaxRetryError") and isinstance(reason, BaseException):
        cause = reason
    if _urllib3_error(cause, "ProtocolError") and cause.args and isinstance(cause.args[-1], TimeoutError):
        cause = cause.args[-1]
    text = str(cause)
    if (
        isinstance(cause, socket.gaierror)
        or _urllib3_error(cause, "NameResolutionError")
        or any(t in text for t in _DNS_TEXTS)
    ):
        conn = getattr(cause, "conn", None)
        where = host or getattr(conn, "host", None) or "the server's host"
        return NetworkFailure(
            UNREACHABLE,
            f"DNS lookup of {where} failed: check the server address in the kubeconfig and the DNS",
        )
    if (
        isinstance(cause, ssl.SSLError)
        or _urllib3_error(cause, "SSLError")
        or "SSL" in text
        or "CERTIFICATE" in text
    ):
        return tls_failure(text)
    system = re.search(r"\[Errno \d+\] [^'\"()]+", text)
    said = f"; {system.group(0).strip()}" if system else ""
    if isinstance(cause, ConnectionRefusedError) or "Connection refused" in text or "Errno 111" in text:
        return NetworkFailure(
            UNREACHABLE,
            f"connection refused: nothing listens at that address (is the cluster running?){said}",
        )
    timed_out = isinstance(cause, TimeoutError) or _urllib3_error(cause, "TimeoutError")
    # NewConnectionError (unreachable network or host) is a ConnectTimeoutError too: test it first.
    if _urllib3_error(cause, "NewConnectionError") or (
        connecting and isinstance(cause, OSError) and not timed_out
    ):
        return NetworkFailure(UNREACHABLE, f"cannot connect to the API server{said or ': ' + text}")
    if _urllib3_error(cause, "ConnectTimeoutError") or (connecting and timed_out):
        return NetworkFailure(
            TIMEOUT,
            f"the connection timed out after {_seconds(timeout, 0)} s: check the address and any firewall",
        )
    if timed_out:
        return NetworkFailure(TIMEOUT, f"the API server did not answer within {_seconds(timeout, 1)} s")
    if isinstance(cause, ConnectionError | http.client.HTTPException) or _urllib3_error(
        cause, "ProtocolError"
    ):
        return NetworkFailure(TRANSPORT_ERROR, "the connection was closed by the server")
    return NetworkFailure(TRANSPORT_ERROR, f"network error: {first_line(cause)}")
