"""API clients of the official Kubernetes client, set up the same way for the plugin and the operator tools.

* Every request is tried once: the client library's own retries (urllib3's `Retry`) are off, so a
  caller with a deadline bounds each request by what is left of it, and no retry prints a warning line.
* `REQUEST_TIMEOUT` is the (connect, read) timeout of an ordinary request.
* A kubeconfig file is checked by the shared contract (`vke_gpu_dra_core.kubeconfig`) before the client
  reads it; whatever the client's loader then refuses is one `KubeconfigError` naming the file too.
  Messages never quote the file's contents.
* A kubeconfig that skips TLS verification is said once, in the log, not in a warning per request.
* `network_failure` says what went wrong on the way to the API server (DNS, TLS, refused, timeout).
"""

from __future__ import annotations

import logging
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit, urlunsplit

import urllib3
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from vke_gpu_dra_core import kubeconfig
from vke_gpu_dra_core.kubeconfig import KubeconfigError

log = logging.getLogger(__name__)

#: Client-side timeouts (connect, read) in seconds for ordinary requests.
REQUEST_TIMEOUT: Final = (10.0, 30.0)
#: No hidden retries: one attempt per request (callers decide about retrying, within their deadline).
NO_RETRIES: Final = urllib3.Retry(
    total=0, connect=0, read=0, redirect=0, status=0, other=0, raise_on_status=False
)
#: What the client's kubeconfig loader raises for a file it cannot use.
_LOADER_ERRORS: Final = (
    ConfigException,
    yaml.YAMLError,
    OSError,
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
)

#: A timeout as the client takes it: seconds for the whole request, or (connect, read).
Timeout = float | tuple[float, float]


def server_of(configuration: k8s_client.Configuration) -> str:
    """The API server's URL for messages, without any user:password part."""
    url = urlsplit(str(configuration.host))
    return urlunsplit(url._replace(netloc=url.netloc.rpartition("@")[2]))


def api_client(
    configuration: k8s_client.Configuration, *, pool_size: int | None = None
) -> k8s_client.ApiClient:
    """An API client on `configuration` with retries off; `pool_size` connections kept per server."""
    configuration.retries = NO_RETRIES
    if pool_size is not None:
        configuration.connection_pool_maxsize = pool_size
    if not configuration.verify_ssl:
        # urllib3 would print an InsecureRequestWarning for every request: say it once, in the log.
        warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
        log.warning(
            "TLS verification of the API server is off (the kubeconfig sets insecure-skip-tls-verify)",
            extra={"fields": {"server": server_of(configuration)}},
        )
    return k8s_client.ApiClient(configuration)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else type(err).__name__


def unusable(config_file: str | Path, err: BaseException) -> KubeconfigError:
    """The client's loader refused `config_file`: one line naming the file and the loader's complaint."""
    return KubeconfigError(f"kubeconfig {config_file} is not usable: {_first_line(err)}")


def kubeconfig_contexts(config_file: str) -> list[str]:
    """The context names of `config_file` (a path list is merged, as kubectl does); KubeconfigError."""
    try:
        contexts, _current = k8s_config.list_kube_config_contexts(config_file=config_file)
    except _LOADER_ERRORS as err:
        raise unusable(config_file, err) from None
    return [str(c.get("name")) for c in contexts or []]


def load_kubeconfig(config_file: str | Path, context: str | None = None) -> k8s_client.Configuration:
    """The client configuration of `context` (default: the current one) of `config_file`; KubeconfigError."""
    configuration = k8s_client.Configuration()
    try:
        k8s_config.load_kube_config(
            config_file=str(config_file),
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except _LOADER_ERRORS as err:
        raise unusable(config_file, err) from None
    return configuration


def from_kubeconfig(path: Path, *, pool_size: int | None = None) -> k8s_client.ApiClient:
    """An API client from the kubeconfig file at `path`, checked first; KubeconfigError if unusable."""
    kubeconfig.load(path)
    return api_client(load_kubeconfig(path), pool_size=pool_size)


# --- network failures in words ---------------------------------------------------------------------

#: `NetworkFailure.reason` values.
UNREACHABLE: Final = "Unreachable"
TIMEOUT: Final = "Timeout"
TLS_ERROR: Final = "TLSError"
TRANSPORT_ERROR: Final = "TransportError"

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


def _seconds(timeout: Timeout, part: int) -> str:
    value = timeout[part] if isinstance(timeout, tuple) else timeout
    return f"{value:.1f}".removesuffix(".0")


def _tls(text: str) -> NetworkFailure:
    found = re.search(r"certificate verify failed: ([^()'\"]+)", text) or re.search(
        r"\[SSL: [A-Z_]+\] ([^()'\"]+)", text
    )
    detail = found.group(1).strip() if found else "handshake failed"
    return NetworkFailure(
        TLS_ERROR, f"TLS failed ({detail}): check the kubeconfig's server URL and certificate-authority-data"
    )


def network_failure(  # noqa: PLR0911 (one answer per kind of failure)
    err: BaseException, timeout: Timeout = REQUEST_TIMEOUT, host: str | None = None
) -> NetworkFailure:
    """What went wrong on the way to the API server; `timeout` is the request's, `host` the server's."""
    if isinstance(err, ApiException) and not err.status:  # the client reports some TLS failures this way
        return _tls(str(err.reason or ""))
    cause: BaseException = err
    if isinstance(cause, urllib3.exceptions.MaxRetryError) and cause.reason is not None:
        cause = cause.reason
    if (
        isinstance(cause, urllib3.exceptions.ProtocolError)
        and cause.args
        and isinstance(cause.args[-1], TimeoutError)
    ):
        cause = cause.args[-1]
    text = str(cause)
    if isinstance(cause, urllib3.exceptions.NameResolutionError) or any(t in text for t in _DNS_TEXTS):
        conn = getattr(cause, "conn", None)
        where = host or getattr(conn, "host", None) or "the server's host"
        return NetworkFailure(
            UNREACHABLE,
            f"DNS lookup of {where} failed: check the server address in the kubeconfig and the DNS",
        )
    if isinstance(cause, urllib3.exceptions.SSLError) or "SSL" in text or "CERTIFICATE" in text:
        return _tls(text)
    system = re.search(r"\[Errno \d+\] [^'\"()]+", text)
    said = f"; {system.group(0).strip()}" if system else ""
    if isinstance(cause, ConnectionRefusedError) or "Connection refused" in text or "Errno 111" in text:
        return NetworkFailure(
            UNREACHABLE,
            f"connection refused: nothing listens at that address (is the cluster running?){said}",
        )
    # NewConnectionError (unreachable network or host) is a ConnectTimeoutError too: test it first.
    if isinstance(cause, urllib3.exceptions.NewConnectionError):
        return NetworkFailure(UNREACHABLE, f"cannot connect to the API server{said or ': ' + text}")
    if isinstance(cause, urllib3.exceptions.ConnectTimeoutError):
        return NetworkFailure(
            TIMEOUT,
            f"the connection timed out after {_seconds(timeout, 0)} s: check the address and any firewall",
        )
    if isinstance(cause, urllib3.exceptions.TimeoutError | TimeoutError):
        return NetworkFailure(TIMEOUT, f"the API server did not answer within {_seconds(timeout, 1)} s")
    if isinstance(cause, urllib3.exceptions.ProtocolError | ConnectionResetError):
        return NetworkFailure(TRANSPORT_ERROR, "the connection was closed by the server")
    return NetworkFailure(TRANSPORT_ERROR, f"network error: {_first_line(cause)}")
