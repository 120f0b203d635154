"""Fetch a `procedure.Snapshot` from a live cluster with the official kubernetes client.

The client is set up by `vke_gpu_dra_kube.client`, as for the kubelet plugin (one attempt per
request, its timeouts, kubeconfig files checked before the client reads them, network failures in
words). Responses are read as raw JSON (`_preload_content=False`) so the checks see exactly what the
API server returns, independent of the client's model classes. Kubeconfig contents are never printed:
errors name the file, the context and the request, nothing else.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from vke_gpu_dra_core import kubeconfig
from vke_gpu_dra_kube import client as kube_client
from vke_gpu_dra_kube.client import REQUEST_TIMEOUT

from vke_gpu_dra_ops import procedure, taint_rules

#: Bytes of a pod log read for the nvidia-smi -L line.
LOG_LIMIT_BYTES = 64 * 1024


class ClusterError(Exception):
    """The cluster cannot be reached or refuses a request (exit code 2); the message is one line."""


DEFAULT_KUBECONFIG = "~/.kube/config"


def default_kubeconfig(environ: Mapping[str, str] | None = None) -> str:
    """What kubectl reads: $KUBECONFIG (a path list, merged), else ~/.kube/config."""
    env = os.environ if environ is None else environ
    paths = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    return os.pathsep.join(paths) if paths else DEFAULT_KUBECONFIG


def load_kubeconfig_dict(path: str | Path) -> dict[str, Any]:
    """The kubeconfig file at `path` as a map; `kubeconfig.KubeconfigError` naming the file otherwise.

    The checks are the shared contract's (`vke_gpu_dra_core.kubeconfig`): one reader of kubeconfig files
    for the driver and these tools. A context may name a cluster of another file of a path list, so
    each file is checked on its own shape only.
    """
    file = Path(path).expanduser()
    data = kubeconfig.parse(kubeconfig.read_text(file), file)
    for key, inner in (("clusters", "cluster"), ("contexts", "context"), ("users", "user")):
        kubeconfig.named(data, key, inner, file)
    return data


def _check_kubeconfig_files(kubeconfig_paths: str) -> None:
    """Validate each file of a path list; as kubectl, missing files of a list of several are skipped."""
    paths = [p for p in kubeconfig_paths.split(os.pathsep) if p]
    existing = [p for p in paths if Path(p).expanduser().exists()]
    if not existing:
        where = "--kubeconfig" if len(paths) == 1 else "--kubeconfig (from $KUBECONFIG)"
        raise ClusterError(f"{where} {kubeconfig_paths}: no such file")
    for p in existing:
        load_kubeconfig_dict(p)


def connect(kubeconfig_paths: str, context: str | None) -> client.ApiClient:
    """An API client for `context` (default: the kubeconfig's current context) of `kubeconfig_paths`."""
    config_file = os.pathsep.join(str(Path(p).expanduser()) for p in kubeconfig_paths.split(os.pathsep) if p)
    try:
        _check_kubeconfig_files(kubeconfig_paths)
        names = kube_client.kubeconfig_contexts(config_file)
        if context is not None and context not in names:
            known = ", ".join(names) or "none"
            raise ClusterError(f"--context {context}: no such context in the kubeconfig (contexts: {known})")
        return kube_client.api_client(kube_client.load_kubeconfig(config_file, context))
    except kubeconfig.KubeconfigError as exc:
        raise ClusterError(f"--kubeconfig: {exc}") from None


def server_of(api: client.ApiClient) -> str:
    """The API server's URL for messages, without any user:password part."""
    return kube_client.server_of(api.configuration)


_STATUS_HINTS = {
    401: " (unauthorised): check the kubeconfig's credentials (token or client certificate)",
    403: " (forbidden): the kubeconfig's user may not read it; check its RBAC",
}


class Fetcher:
    """Reads what the checks need; every request goes through `_call` for uniform error handling."""

    def __init__(self, api: client.ApiClient, settings: procedure.Settings) -> None:
        self.api = api
        self.settings = settings
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.resource = client.ResourceV1Api(api)
        self.apis = client.ApisApi(api)
        #: The client of each resource.k8s.io version DeviceTaintRules may be read from.
        self.rule_apis: dict[str, Any] = {
            "v1": self.resource,
            "v1beta2": client.ResourceV1beta2Api(api),
            "v1alpha3": client.ResourceV1alpha3Api(api),
        }

    def _call(
        self,
        what: str,
        fn: Any,
        *args: Any,
        missing_ok: bool = False,
        forbidden_ok: bool = False,
        **kwargs: Any,
    ) -> Any:
        """JSON of one request; None for 404 when `missing_ok` and for 403 when `forbidden_ok`; ClusterError
        otherwise."""
        try:
            resp = fn(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        except ApiException as exc:
            if (exc.status == 404 and missing_ok) or (exc.status == 403 and forbidden_ok):
                return None
            if not exc.status:  # no answer: the client reports TLS failures this way
                raise self._unreachable(what, exc) from None
            raise ClusterError(
                f"the API server at {server_of(self.api)} answered {exc.status} {exc.reason} to {what}"
                + _STATUS_HINTS.get(exc.status or 0, "")
            ) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._unreachable(what, exc) from None
        data = resp.data
        if what.endswith("/log"):
            return data.decode("utf-8", errors="replace")
        try:
            return json.loads(data)
        except ValueError:
            raise ClusterError(f"the API server at {server_of(self.api)} sent non-JSON for {what}") from None

    def call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """JSON of one request (what `_call` gives) for readers outside the checks (`vke-gpu-dra plan`)."""
        return self._call(what, fn, *args, **kwargs)

    def _unreachable(self, what: str, exc: BaseException) -> ClusterError:
        server = server_of(self.api)
        failure = kube_client.network_failure(exc, REQUEST_TIMEOUT, urlsplit(server).hostname)
        return ClusterError(f"cannot reach the API server at {server} while reading {what}: {failure}")

    def resource_versions(self) -> frozenset[str]:
        """The versions of resource.k8s.io this server serves (`v1`, `v1beta2`, ...)."""
        groups = self._call("/apis", self.apis.get_api_versions) or {}
        return frozenset(
            str(v.get("version"))
            for g in groups.get("groups", [])
            if g.get("name") == procedure.RESOURCE_GROUP
            for v in g.get("versions", [])
        )

    def _resources_of(self, version: str, api: Any) -> frozenset[str] | None:
        listing = self._call(
            f"/apis/{procedure.RESOURCE_GROUP}/{version}", api.get_api_resources, missing_ok=True
        )
        if listing is None:
            return None
        return frozenset(
            r.get("name", "") for r in listing.get("resources", []) if "/" not in r.get("name", "")
        )

    def api_resources(self, versions: frozenset[str] | None = None) -> frozenset[str] | None:
        """The resources resource.k8s.io/v1 serves; None when it is not served."""
        versions = self.resource_versions() if versions is None else versions
        if procedure.RESOURCE_VERSION not in versions:
            return None
        return self._resources_of(procedure.RESOURCE_VERSION, self.resource)

    def device_taint_rules(
        self, versions: frozenset[str], v1_resources: frozenset[str] | None
    ) -> tuple[list[dict[str, Any]] | None, str]:
        """The DeviceTaintRules from the newest version that serves them, and that group version; None and
        why not when no version serves them or the kubeconfig's user may not list them."""
        for version in taint_rules.VERSIONS:
            if version not in versions:
                continue
            api = self.rule_apis[version]
            served = (
                v1_resources if version == procedure.RESOURCE_VERSION else self._resources_of(version, api)
            )
            if not served or taint_rules.RESOURCE not in served:
                continue
            where = f"{procedure.RESOURCE_GROUP}/{version}"
            listing = self._call(f"devicetaintrules ({where})", api.list_device_taint_rule, forbidden_ok=True)
            if listing is None:
                return (
                    None,
                    f"the kubeconfig's user may not list devicetaintrules ({where}): grant list on them",
                )
            return list(listing.get("items") or []), where
        return None, (
            f"this API server serves no DeviceTaintRules (resource.k8s.io {', '.join(taint_rules.VERSIONS)}; "
            "before 1.37 they are off by default), so none applies"
        )

    def fit_settings_to_the_driver(self) -> procedure.Settings:
        """The settings for how the driver was deployed here (its plugin DaemonSet), see `procedure`."""
        ns = self.settings.namespace
        listing = self._call(f"daemonsets in {ns}", self.apps.list_namespaced_daemon_set, ns, missing_ok=True)
        return procedure.fit_to_driver(self.settings, (listing or {}).get("items") or [])

    def snapshot(self) -> procedure.Snapshot:
        s = self.settings
        versions = self.resource_versions()
        api_resources = self.api_resources(versions)
        served = api_resources is not None
        nodes = self._call("nodes", self.core.list_node, label_selector=s.node_selector)["items"]
        driver_pods = self._call(f"pods in {s.namespace}", self.core.list_namespaced_pod, s.namespace)[
            "items"
        ]
        device_classes = resource_slices = claims = rules = None
        rules_source = f"{procedure.RESOURCE_GROUP_VERSION} is not served"
        if served:
            device_classes = self._call("deviceclasses", self.resource.list_device_class)["items"]
            resource_slices = self._call("resourceslices", self.resource.list_resource_slice)["items"]
            claims = self._call(
                f"resourceclaims in {s.workload_namespace}",
                self.resource.list_namespaced_resource_claim,
                s.workload_namespace,
            )["items"]
            rules, rules_source = self.device_taint_rules(versions, api_resources)
        logs: dict[str, str] = {}
        deployment, sample_pods = self._deployment_and_pods(s.sample_deployment, logs)
        classic, classic_pods = self._deployment_and_pods(s.classic_deployment, logs)
        return procedure.Snapshot(
            api_resources=api_resources,
            nodes=nodes,
            driver_pods=driver_pods,
            device_classes=device_classes,
            resource_slices=resource_slices,
            sample_deployment=deployment,
            sample_pods=sample_pods,
            claims=claims,
            pod_logs=logs,
            classic_deployment=classic,
            classic_pods=classic_pods,
            device_taint_rules=rules,
            taint_rules_source=rules_source,
        )

    def _deployment_and_pods(
        self, name: str, logs: dict[str, str]
    ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """A workload Deployment (None when absent) and its pods; logs of its Running pods go to `logs`."""
        ns = self.settings.workload_namespace
        deployment = self._call(
            f"deployment {ns}/{name}", self.apps.read_namespaced_deployment, name, ns, missing_ok=True
        )
        match_labels = (deployment or {}).get("spec", {}).get("selector", {}).get("matchLabels") or {}
        if not match_labels:
            return deployment, []
        selector = ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))
        pods: list[dict[str, Any]] = self._call(
            f"pods in {ns}", self.core.list_namespaced_pod, ns, label_selector=selector
        )["items"]
        for pod in pods:
            if pod.get("status", {}).get("phase") == "Running":
                logs[pod["metadata"]["name"]] = self.pod_log(pod)
        return deployment, pods

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
