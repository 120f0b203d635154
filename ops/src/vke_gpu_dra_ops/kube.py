"""Fetch a `checks.Snapshot` from a live cluster with the official kubernetes client.

Responses are read as raw JSON (`_preload_content=False`) so the checks see exactly what the API
server returns, independent of the client's model classes. Kubeconfig contents are never printed:
errors name the file, the context and the request, nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from vke_gpu_dra_ops import checks

#: Seconds a single API request may take.
REQUEST_TIMEOUT = 15
#: Bytes of a pod log read for the nvidia-smi -L line.
LOG_LIMIT_BYTES = 64 * 1024


class ClusterError(Exception):
    """The cluster cannot be reached or refuses a request (exit code 2); the message is one line."""


def connect(kubeconfig: str, context: str | None) -> client.ApiClient:
    """An API client for `context` (default: the kubeconfig's current context) of `kubeconfig`."""
    path = Path(kubeconfig).expanduser()
    if not path.is_file():
        raise ClusterError(f"--kubeconfig {kubeconfig}: no such file")
    try:
        contexts, _current = config.list_kube_config_contexts(config_file=str(path))
    except (ConfigException, yaml.YAMLError, ValueError, TypeError, AttributeError) as exc:
        raise ClusterError(
            f"--kubeconfig {kubeconfig}: not a usable kubeconfig ({type(exc).__name__})"
        ) from None
    names = [c.get("name") for c in contexts or []]
    if context is not None and context not in names:
        raise ClusterError(
            f"--context {context}: no such context in the kubeconfig (contexts: {', '.join(names) or 'none'})"
        )
    cfg = client.Configuration()
    try:
        config.load_kube_config(
            config_file=str(path), context=context, client_configuration=cfg, persist_config=False
        )
    except (ConfigException, yaml.YAMLError, ValueError, TypeError, AttributeError) as exc:
        raise ClusterError(
            f"--kubeconfig {kubeconfig}: not a usable kubeconfig ({type(exc).__name__})"
        ) from None
    cfg.retries = urllib3.Retry(total=1, connect=1, read=0, backoff_factor=0)
    return client.ApiClient(cfg)


def server_of(api: client.ApiClient) -> str:
    """The API server's URL for messages, without any user:password part."""
    url = urlsplit(str(api.configuration.host))
    return urlunsplit(url._replace(netloc=url.netloc.rpartition("@")[2]))


class Fetcher:
    """Reads what the checks need; every request goes through `_call` for uniform error handling."""

    def __init__(self, api: client.ApiClient, settings: checks.Settings) -> None:
        self.api = api
        self.settings = settings
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.resource = client.ResourceV1Api(api)
        self.apis = client.ApisApi(api)

    def _call(self, what: str, fn: Any, *args: Any, missing_ok: bool = False, **kwargs: Any) -> Any:
        """JSON of one request; None for 404 when `missing_ok`; ClusterError otherwise."""
        try:
            resp = fn(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        except ApiException as exc:
            if exc.status == 404 and missing_ok:
                return None
            raise ClusterError(
                f"the API server at {server_of(self.api)} answered {exc.status} {exc.reason} to {what}"
                + (": check the kubeconfig's credentials and RBAC" if exc.status in (401, 403) else "")
            ) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ClusterError(
                f"cannot reach the API server at {server_of(self.api)} ({type(exc).__name__}) "
                f"while reading {what}"
            ) from None
        data = resp.data
        if what.endswith("/log"):
            return data.decode("utf-8", errors="replace")
        try:
            return json.loads(data)
        except ValueError:
            raise ClusterError(f"the API server at {server_of(self.api)} sent non-JSON for {what}") from None

    def api_resources(self) -> frozenset[str] | None:
        groups = self._call("/apis", self.apis.get_api_versions) or {}
        versions = {
            v.get("groupVersion")
            for g in groups.get("groups", [])
            if g.get("name") == checks.RESOURCE_GROUP
            for v in g.get("versions", [])
        }
        if checks.RESOURCE_GROUP_VERSION not in versions:
            return None
        listing = self._call(
            f"/apis/{checks.RESOURCE_GROUP_VERSION}", self.resource.get_api_resources, missing_ok=True
        )
        if listing is None:
            return None
        return frozenset(
            r.get("name", "") for r in listing.get("resources", []) if "/" not in r.get("name", "")
        )

    def snapshot(self) -> checks.Snapshot:
        s = self.settings
        api_resources = self.api_resources()
        served = api_resources is not None
        nodes = self._call("nodes", self.core.list_node, label_selector=s.node_selector)["items"]
        driver_pods = self._call(f"pods in {s.namespace}", self.core.list_namespaced_pod, s.namespace)[
            "items"
        ]
        device_classes = resource_slices = claims = None
        if served:
            device_classes = self._call("deviceclasses", self.resource.list_device_class)["items"]
            resource_slices = self._call("resourceslices", self.resource.list_resource_slice)["items"]
            claims = self._call(
                f"resourceclaims in {s.workload_namespace}",
                self.resource.list_namespaced_resource_claim,
                s.workload_namespace,
            )["items"]
        deployment = self._call(
            f"deployment {s.workload_namespace}/{s.sample_deployment}",
            self.apps.read_namespaced_deployment,
            s.sample_deployment,
            s.workload_namespace,
            missing_ok=True,
        )
        sample_pods: list[dict[str, Any]] = []
        logs: dict[str, str] = {}
        match_labels = (deployment or {}).get("spec", {}).get("selector", {}).get("matchLabels") or {}
        if match_labels:
            selector = ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))
            sample_pods = self._call(
                f"pods in {s.workload_namespace}",
                self.core.list_namespaced_pod,
                s.workload_namespace,
                label_selector=selector,
            )["items"]
            for pod in sample_pods:
                if pod.get("status", {}).get("phase") == "Running":
                    logs[pod["metadata"]["name"]] = self.pod_log(pod)
        return checks.Snapshot(
            api_resources=api_resources,
            nodes=nodes,
            driver_pods=driver_pods,
            device_classes=device_classes,
            resource_slices=resource_slices,
            sample_deployment=deployment,
            sample_pods=sample_pods,
            claims=claims,
            pod_logs=logs,
        )

    def pod_log(self, pod: dict[str, Any]) -> str:
        """Log of the pod's container that uses a claim (else its first container); '' if unreadable."""
        containers = pod.get("spec", {}).get("containers") or [{}]
        container = next(
            (c for c in containers if (c.get("resources") or {}).get("claims")), containers[0]
        ).get("name")
        name, ns = pod["metadata"]["name"], pod["metadata"].get("namespace", self.settings.workload_namespace)
        try:
            text = self._call(
                f"pods/{name}/log",
                self.core.read_namespaced_pod_log,
                name,
                ns,
                container=container,
                limit_bytes=LOG_LIMIT_BYTES,
                missing_ok=True,
            )
        except ClusterError:
            return ""  # e.g. 400 while the container starts: the log check reports it
        return text or ""
