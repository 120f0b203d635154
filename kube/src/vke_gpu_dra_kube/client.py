"""API clients of the official Kubernetes client, set up the same way for the plugin and the operator tools.

The operator tools use it; the kubelet plugin talks through the lean transport (`rest`) instead, so
that its start never imports the official client. Both follow `settings`:

* Every request is tried once: the client library's own retries (urllib3's `Retry`) are off, so a
  caller with a deadline bounds each request by what is left of it, and no retry prints a warning line.
* `REQUEST_TIMEOUT` is the (connect, read) timeout of an ordinary request.
* A kubeconfig file is checked by the shared contract (`vke_gpu_dra_core.kubeconfig`) before the client
  reads it; whatever the client's loader then refuses is one `KubeconfigError` naming the file too.
  Messages never quote the file's contents.
* A kubeconfig that skips TLS verification is said once, in the log, not in a warning per request.
* `network_failure` says what went wrong on the way to the API server (DNS, TLS, refused, timeout):
  `failures`, plus the official client's way of reporting some TLS failures.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Final

import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from vke_gpu_dra_core import kubeconfig
from vke_gpu_dra_core.kubeconfig import KubeconfigError

from . import failures
from .failures import (
    TIMEOUT,
    TLS_ERROR,
    TRANSPORT_ERROR,
    UNREACHABLE,
    NetworkFailure,
    first_line,
    server_url,
    tls_failure,
)
from .settings import NO_RETRIES, REQUEST_TIMEOUT, Timeout, say_tls_unverified

__all__ = [
    "NO_RETRIES",
    "REQUEST_TIMEOUT",
    "TIMEOUT",
    "TLS_ERROR",
    "TRANSPORT_ERROR",
    "UNREACHABLE",
    "NetworkFailure",
    "Timeout",
    "api_client",
    "from_kubeconfig",
    "kubeconfig_contexts",
    "load_kubeconfig",
    "network_failure",
    "server_of",
    "unusable",
]

log = logging.getLogger(__name__)

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


def server_of(configuration: k8s_client.Configuration) -> str:
    """The API server's URL for messages, without any user:password part."""
    return server_url(str(configuration.host))


def api_client(
    configuration: k8s_client.Configuration, *, pool_size: int | None = None
) -> k8s_client.ApiClient:
    """An API client on `configuration` with retries off; `pool_size` connections kept per server."""
    configuration.retries = NO_RETRIES
    if pool_size is not None:
        configuration.connection_pool_maxsize = pool_size
    if not configuration.verify_ssl:
        say_tls_unverified(log, server_of(configuration))
    return k8s_client.ApiClient(configuration)


def unusable(config_file: str | Path, err: BaseException) -> KubeconfigError:
    """The client's loader refused `config_file`: one line naming the file and the loader's complaint."""
    return KubeconfigError(f"kubeconfig {config_file} is not usable: {first_line(err)}")


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


# --- network failures in words (`failures`), with the official client's own way of reporting TLS ----


def network_failure(
    err: BaseException, timeout: Timeout = REQUEST_TIMEOUT, host: str | None = None
) -> NetworkFailure:
    """What went wrong on the way to the API server; `timeout` is the request's, `host` the server's."""
    if isinstance(err, ApiException) and not err.status:  # the client reports some TLS failures this way
        return tls_failure(str(err.reason or ""))
    return failures.network_failure(err, timeout, host)
