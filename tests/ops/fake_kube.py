"""A small HTTP fake of the Kubernetes API (read-only, the requests `vke-gpu-dra verify` makes).

It serves discovery (/apis, /apis/resource.k8s.io/v1), nodes, pods and their logs, DeviceClasses,
ResourceSlices, ResourceClaims and Deployments from a `FakeCluster`, on 127.0.0.1 with a threaded
http.server, so tests drive the real kubernetes client through a kubeconfig pointing at it.
`healthy_cluster()` builds the procedure's expected state; tests break one part of it.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml
from vke_gpu_dra_core import facts

JSON = dict[str, Any]
TOKEN = "fake-token-must-never-be-printed"
NODE = "192.168.2.8"
#: Pods of the procedure's release are named after it.
DRIVER_POD = f"{facts.NVIDIA_CHART}-kubelet-plugin-mq7x2"
SAMPLE_POD = "gpu-test-5c47d94bf9-fbx2k"
SAMPLE_UID = "691d19b1-5ca8-40c0-9d61-0a1b2c3d4e5f"
CLAIM = "gpu-test-5c47d94bf9-fbx2k-gpu-abcde"
GPU_LOG = "GPU 0: NVIDIA A30 (UUID: GPU-c8133a35-9d03-a6b2-31dd-26aa11bb22cc)\n"
#: The classic sample (`nvidia.com/gpu: 1`, no claim) and the claim the scheduler makes for it.
CLASSIC_POD = "gpu-test-classic-7c9d8b6f4-x2lqz"
CLASSIC_UID = "2f6c1d1e-8a4b-4c1e-9f1a-6d3b2a1c0e9f"
CLASSIC_CLAIM = f"{CLASSIC_POD}-extended-resources-k8p4t"
CLASSIC_LOG = "GPU 0: NVIDIA A30 (UUID: GPU-0d1e2f3a-4b5c-6d7e-8f90-a1b2c3d4e5f6)\n"
RESOURCE_V1 = [
    "deviceclasses",
    "resourceclaims",
    "resourceclaims/status",
    "resourceclaimtemplates",
    "resourceslices",
]


@dataclass
class FakeCluster:
    groups: dict[str, list[str]] = field(default_factory=dict)  # API group -> served versions
    resource_v1: list[str] = field(default_factory=list)
    nodes: list[JSON] = field(default_factory=list)
    pods: list[JSON] = field(default_factory=list)
    device_classes: list[JSON] = field(default_factory=list)
    resource_slices: list[JSON] = field(default_factory=list)
    claims: list[JSON] = field(default_factory=list)
    deployments: list[JSON] = field(default_factory=list)
    daemonsets: list[JSON] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)  # pod name -> log
    #: DeviceTaintRules, served by resource.k8s.io/<taint_rules_version> (None: by no version).
    taint_rules: list[JSON] = field(default_factory=list)
    taint_rules_version: str | None = None
    forbidden: set[str] = field(default_factory=set)  # paths answered 403
    status_override: int | None = None  # answer every request with this HTTP status
    requests: list[str] = field(default_factory=list)
    on_request: Callable[[str], None] | None = None
    #: What /version answers (its gitVersion).
    version: str = "v1.37.2"

    def pod(self, name: str) -> JSON:
        return next(p for p in self.pods if p["metadata"]["name"] == name)


def _meta(name: str, namespace: str | None = None, **extra: Any) -> JSON:
    meta: JSON = {"name": name, "uid": f"uid-{name}", **extra}
    if namespace:
        meta["namespace"] = namespace
    return meta


def node(name: str = NODE, labels: dict[str, str] | None = None) -> JSON:
    return {
        "metadata": _meta(name, labels=dict(facts.REQUIRED_NODE_LABELS) if labels is None else labels),
        "status": {
            "capacity": {"cpu": "14", "memory": "56Gi"},
            "allocatable": {"cpu": "13", "memory": "50Gi"},
        },
    }


def running_pod(name: str, namespace: str, node_name: str, labels: dict[str, str] | None = None) -> JSON:
    return {
        "metadata": _meta(name, namespace, labels=labels or {}),
        "spec": {"nodeName": node_name, "containers": [{"name": "main"}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {"name": "main", "ready": True, "restartCount": 0, "state": {"running": {}}}
            ],
        },
    }


def resource_slice(
    node_name: str = NODE, devices: int = 1, driver: str = facts.DRIVER_NAME, product: str | None = None
) -> JSON:
    attributes: JSON = {"type": {"string": "gpu"}}
    if product is not None:
        attributes[facts.ATTR_PRODUCT_NAME] = {"string": product}
    return {
        "metadata": _meta(f"{node_name}-{driver}-tn8wq"),
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": f"gpu-{i}", "attributes": copy.deepcopy(attributes)} for i in range(devices)
            ],
        },
    }


def sample_pod(namespace: str = "default") -> JSON:
    pod = running_pod(SAMPLE_POD, namespace, NODE, labels={"app": "gpu-test"})
    pod["metadata"]["uid"] = SAMPLE_UID
    pod["spec"]["containers"] = [{"name": "test", "resources": {"claims": [{"name": "gpu"}]}}]
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]
    pod["status"]["containerStatuses"][0]["name"] = "test"
    pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": CLAIM}]
    return pod


def allocated_claim(namespace: str = "default") -> JSON:
    return {
        "metadata": _meta(CLAIM, namespace, annotations={"resource.kubernetes.io/pod-claim-name": "gpu"}),
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": facts.DEVICE_CLASS_GPU.name, "count": 1}}
                ]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": facts.DRIVER_NAME, "pool": NODE, "device": "gpu-0"}
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": SAMPLE_POD, "uid": SAMPLE_UID}],
        },
    }


def classic_pod(namespace: str = "default", claim: str | None = CLASSIC_CLAIM) -> JSON:
    """A pod of gpu-test-classic once the 1.36 scheduler has bound it and recorded its claim."""
    pod = running_pod(CLASSIC_POD, namespace, NODE, labels={"app": "gpu-test-classic"})
    pod["metadata"]["uid"] = CLASSIC_UID
    pod["spec"]["containers"] = [
        {"name": "test", "resources": {"limits": {facts.GPU_EXTENDED_RESOURCE: "1"}}}
    ]
    pod["status"]["containerStatuses"][0]["name"] = "test"
    if claim is not None:
        pod["status"]["extendedResourceClaimStatus"] = {
            "resourceClaimName": claim,
            "requestMappings": [
                {
                    "containerName": "test",
                    "resourceName": facts.GPU_EXTENDED_RESOURCE,
                    "requestName": "container-0-request-0",
                }
            ],
        }
    return pod


def classic_claim(namespace: str = "default") -> JSON:
    request = "container-0-request-0"
    return {
        "metadata": _meta(
            CLASSIC_CLAIM,
            namespace,
            annotations={facts.EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
            ownerReferences=[{"apiVersion": "v1", "kind": "Pod", "name": CLASSIC_POD, "uid": CLASSIC_UID}],
        ),
        "spec": {
            "devices": {
                "requests": [
                    {"name": request, "exactly": {"deviceClassName": facts.DEVICE_CLASS_GPU.name, "count": 1}}
                ]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": request, "driver": facts.DRIVER_NAME, "pool": NODE, "device": "gpu-1"}
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": CLASSIC_POD, "uid": CLASSIC_UID}],
        },
    }


def classic_cluster() -> FakeCluster:
    """A 1.36 cluster: gpu.nvidia.com maps nvidia.com/gpu and the classic sample runs beside gpu-test."""
    cluster = healthy_cluster(devices=2)
    cluster.device_classes = [spec.manifest(extended_resource=True) for spec in facts.DEVICE_CLASSES]
    cluster.pods.append(classic_pod())
    cluster.claims.append(classic_claim())
    cluster.deployments.append(
        {
            "metadata": _meta("gpu-test-classic", "default"),
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "gpu-test-classic"}}},
        }
    )
    cluster.logs[CLASSIC_POD] = CLASSIC_LOG
    return cluster


def healthy_cluster(devices: int = 1) -> FakeCluster:
    """The state the procedure's "Step 3" and "Validating results" expect."""
    ns = facts.DRIVER_NAMESPACE
    return FakeCluster(
        groups={"apps": ["v1"], "resource.k8s.io": ["v1", "v1beta2"]},
        resource_v1=list(RESOURCE_V1),
        nodes=[node(), node("192.168.2.9", labels={"role": "system"})],
        pods=[
            running_pod(DRIVER_POD, ns, NODE, labels={"app": "kubelet-plugin"}),
            running_pod(f"{facts.NVIDIA_CHART}-controller-6d9f", ns, "192.168.2.9"),
            sample_pod(),
        ],
        device_classes=[spec.manifest() for spec in facts.DEVICE_CLASSES],
        resource_slices=[resource_slice(devices=devices)],
        claims=[allocated_claim()],
        deployments=[
            {
                "metadata": _meta("gpu-test", "default"),
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "gpu-test"}}},
            }
        ],
        logs={SAMPLE_POD: GPU_LOG},
    )


def kubelet_plugin_daemonset(affinity: JSON | None, device_source: str = "nvml") -> JSON:
    """The chart's kubelet plugin DaemonSet as the API server returns it (the fields verify reads)."""
    spec: JSON = {
        "containers": [{"name": "plugin", "env": [{"name": "DEVICE_SOURCE", "value": device_source}]}]
    }
    if affinity is not None:
        spec["affinity"] = affinity
    return {
        "metadata": _meta(
            "vke-gpu-dra-kubelet-plugin",
            facts.DRIVER_NAMESPACE,
            labels={"app.kubernetes.io/component": "kubelet-plugin", "app.kubernetes.io/name": "vke-gpu-dra"},
        ),
        "spec": {"template": {"metadata": {}, "spec": spec}},
    }


def local_cluster() -> FakeCluster:
    """What the `local` stack deploys into a kind cluster: no DRA labels, plugin on every node, simulated."""
    c = healthy_cluster(devices=4)
    c.nodes = [node("kind-control-plane", labels={"kubernetes.io/hostname": "kind-control-plane"})]
    c.pods = [
        running_pod(
            DRIVER_POD, facts.DRIVER_NAMESPACE, "kind-control-plane", labels={"app": "kubelet-plugin"}
        ),
        {**sample_pod(), "spec": {**sample_pod()["spec"], "nodeName": "kind-control-plane"}},
    ]
    c.resource_slices = [resource_slice("kind-control-plane", devices=4)]
    c.daemonsets = [kubelet_plugin_daemonset(None, "simulated")]
    c.logs = {SAMPLE_POD: "NVIDIA_VISIBLE_DEVICES=gpu-0\n"}
    return c


# --------------------------------------------------------------------------- HTTP


def _selected(obj: JSON, selector: str | None) -> bool:
    if not selector:
        return True
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in (term.split("=", 1) for term in selector.split(",")))


def _list(kind: str, items: list[JSON]) -> JSON:
    return {"kind": f"{kind}List", "apiVersion": "v1", "metadata": {}, "items": copy.deepcopy(items)}


def _ns(items: list[JSON], namespace: str) -> list[JSON]:
    return [i for i in items if i["metadata"].get("namespace") == namespace]


class _Handler(BaseHTTPRequestHandler):
    cluster: FakeCluster

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def _send(self, code: int, body: JSON | str) -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str) -> None:
        self._send(
            code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code}
        )

    def do_GET(self) -> None:
        c = self.cluster
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        c.requests.append(url.path)
        if c.on_request:
            c.on_request(url.path)
        if c.status_override:
            self._status(c.status_override, "Unauthorized")
            return
        if url.path in c.forbidden:
            self._status(403, "Forbidden")
            return
        answer = self._route(url.path.rstrip("/") or "/", query.get("labelSelector"))
        if answer is None:
            self._status(404, "NotFound")
        else:
            self._send(200, answer)

    def _route(self, path: str, selector: str | None) -> JSON | str | None:  # noqa: PLR0911, PLR0912
        c = self.cluster
        v1 = "v1" in c.groups.get("resource.k8s.io", [])
        if path == "/version":
            return {"major": "1", "minor": c.version.split(".")[1], "gitVersion": c.version}
        if path == "/apis":
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": g,
                        "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                        "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]},
                    }
                    for g, vs in c.groups.items()
                ],
            }
        if m := re.fullmatch(r"/apis/resource.k8s.io/(v1\w*)", path):
            if m[1] not in c.groups.get("resource.k8s.io", []):
                return None
            names = c.resource_v1 if m[1] == "v1" else []
            if c.taint_rules_version == m[1]:
                names = [*names, "devicetaintrules", "devicetaintrules/status"]
            return {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"resource.k8s.io/{m[1]}",
                "resources": [
                    {
                        "name": r,
                        "singularName": "",
                        "namespaced": r.startswith("resourceclaim"),
                        "kind": "X",
                        "verbs": ["get", "list"],
                    }
                    for r in names
                ],
            }
        if path == f"/apis/resource.k8s.io/{c.taint_rules_version}/devicetaintrules":
            return _list("DeviceTaintRule", c.taint_rules)
        if path == "/api/v1/nodes":
            return _list("Node", [n for n in c.nodes if _selected(n, selector)])
        if m := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods", path):
            return _list("Pod", [p for p in _ns(c.pods, m[1]) if _selected(p, selector)])
        if m := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/log", path):
            return c.logs.get(m[2]) if any(p["metadata"]["name"] == m[2] for p in _ns(c.pods, m[1])) else None
        if m := re.fullmatch(r"/apis/apps/v1/namespaces/([^/]+)/daemonsets", path):
            return _list("DaemonSet", _ns(c.daemonsets, m[1]))
        if m := re.fullmatch(r"/apis/apps/v1/namespaces/([^/]+)/deployments/([^/]+)", path):
            found = [d for d in _ns(c.deployments, m[1]) if d["metadata"]["name"] == m[2]]
            return copy.deepcopy(found[0]) if found else None
        if not v1:
            return None
        if path == "/apis/resource.k8s.io/v1/deviceclasses":
            return _list("DeviceClass", c.device_classes)
        if path == "/apis/resource.k8s.io/v1/resourceslices":
            return _list("ResourceSlice", c.resource_slices)
        if m := re.fullmatch(r"/apis/resource.k8s.io/v1/namespaces/([^/]+)/resourceclaims", path):
            return _list("ResourceClaim", _ns(c.claims, m[1]))
        return None


@contextmanager
def serve(cluster: FakeCluster) -> Iterator[str]:
    """Serve `cluster` on 127.0.0.1; yields the base URL."""
    handler = type("Handler", (_Handler,), {"cluster": cluster})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def write_kubeconfig(path: Path, server: str, context: str = "fake") -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": server}}],
                "users": [{"name": "fake", "user": {"token": TOKEN}}],
                "contexts": [{"name": context, "context": {"cluster": "fake", "user": "fake"}}],
                "current-context": context,
            }
        )
    )
    return path
