"""One test's view of the real control plane: its namespace, the objects it made, the processes it started.

A test plays the parts no binary plays here: it creates Nodes and marks them Ready (kubelet and the node
lifecycle controller), creates the kubelet plugin's pods from the chart's DaemonSet template on a node and
marks them Running (the DaemonSet controller and kubelet), and talks to the plugin over its sockets
(`vke_gpu_dra_testing.kubelet_client`).
"""

from __future__ import annotations

import copy
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from vke_gpu_dra.kubelet.registration import registration_socket_name
from vke_gpu_dra_core import facts

from tests.chart.chartlib import CHART_DIR, find_helm

from .controlplane import (
    CLUSTER_SCOPED,
    PLURALS,
    ApiError,
    Client,
    ControlPlane,
    path_of,
    stop_processes,
    wait_until,
)

#: The label the tests' Nodes carry, valued with the test's namespace: the chart's kubelet plugin and the
#: tests' pods select it, so tests never see each other's nodes.
TEST_LABEL = "envtest.vke-gpu-dra.io/test"
BIN = Path(sys.executable).parent
_COUNTER = itertools.count(1)
JSON = dict[str, Any]
#: Figures the tests measured ("what: value"), printed with the tier's summary at the end of the run.
FIGURES: list[str] = []


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Plugin:
    """A running kubelet plugin process (simulated GPUs) and where its sockets are."""

    process: subprocess.Popen[bytes]
    root: Path
    node: str
    #: Its command line after `python -m vke_gpu_dra`.
    args: Sequence[str] = ()

    @property
    def registration_socket(self) -> Path:
        return self.root / "registry" / registration_socket_name(facts.DRIVER_NAME)

    @property
    def log(self) -> str:
        return (self.root / "plugin.log").read_text(errors="replace")

    @property
    def health_file(self) -> Path:
        """The file the plugin watches for simulated problems (docs/health.md):
        `<plugin data dir>/simulated-health`."""
        return self.root / "plugins" / facts.DRIVER_NAME / "simulated-health"

    def stop(self) -> tuple[int, str]:
        """SIGTERM, then its exit code and log."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        return self.process.returncode, self.log


@dataclass
class Cluster:
    plane: ControlPlane
    namespace: str
    api: Client
    tmp: Path
    cluster_scoped: list[str] = field(default_factory=list)
    processes: list[subprocess.Popen[Any]] = field(default_factory=list)

    @classmethod
    @contextmanager
    def for_test(cls, plane: ControlPlane, test_name: str) -> Iterator[Cluster]:
        slug = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")[:24].rstrip("-")
        namespace = f"t{next(_COUNTER)}-{slug}"
        api = plane.admin()
        api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": namespace}})  # fmt: skip
        tmp = Path(tempfile.mkdtemp(prefix="et", dir="/tmp"))  # short: unix socket paths
        cluster = cls(plane, namespace, api, tmp)
        try:
            yield cluster
        finally:
            cluster.close()

    def close(self) -> None:
        """Stop the test's processes, delete what it made cluster-wide and its namespace and folder."""
        try:
            stop_processes(self.processes)
            for path in [*reversed(self.cluster_scoped), f"/api/v1/namespaces/{self.namespace}"]:
                try:
                    self.api.delete(path)
                except ApiError as exc:
                    if exc.status != 404:
                        raise
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------------ objects

    def apply(self, obj: JSON, *, shared: bool = False) -> JSON:
        """Create `obj` (in this test's namespace when namespaced and none is set). Cluster-scoped objects
        are deleted after the test, unless `shared` (identical for every test, e.g. the DeviceClasses:
        created once, an existing one is kept)."""
        obj = copy.deepcopy(obj)
        cluster_scoped = PLURALS[obj["kind"]] in CLUSTER_SCOPED
        if not cluster_scoped:
            obj.setdefault("metadata", {}).setdefault("namespace", self.namespace)
        collection = path_of(obj, name=False)
        try:
            created: JSON = self.api.create(collection, obj)
        except ApiError as exc:
            if shared and exc.status == 409:
                return dict(self.api.get(path_of(obj)))
            raise
        if cluster_scoped and not shared:
            self.cluster_scoped.append(path_of(created))
        return created

    def node_name(self, suffix: str) -> str:
        return f"{self.namespace}-{suffix}"[:63].rstrip("-")

    def add_node(
        self, suffix: str, *, cpu: str = "16", memory: str = "64Gi", labels: dict[str, str] | None = None
    ) -> JSON:
        """A Node labelled for this test (and as a DRA GPU node), then Ready, as kubelet reports it, with
        the not-ready taint removed, as the node lifecycle controller does."""
        name = self.node_name(suffix)
        node_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            facts.LABEL_GPU_SCHEDULE: facts.LABEL_GPU_SCHEDULE_DRA,
            facts.LABEL_GPU_PRESENT: facts.LABEL_GPU_PRESENT_VALUE,
            TEST_LABEL: self.namespace,
            **(labels or {}),
        }
        self.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": node_labels}})
        resources = {"cpu": cpu, "memory": memory, "pods": "110"}
        status = {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "envtest",
                 "lastHeartbeatTime": now(), "lastTransitionTime": now()}
            ],
            "nodeInfo": {"containerRuntimeVersion": "containerd://2.1.3",
                         "kubeletVersion": f"v{self.plane.version}.0",
                         "architecture": "amd64", "operatingSystem": "linux"},
        }  # fmt: skip
        self.api.patch(f"/api/v1/nodes/{name}/status", {"status": status})
        node = self.api.get(f"/api/v1/nodes/{name}")
        node["spec"]["taints"] = []
        return dict(self.api.replace(f"/api/v1/nodes/{name}", node))

    def mark_running(self, pod: JSON) -> JSON:
        """Pod status as kubelet writes it once every container started and is ready."""
        spec, meta = pod["spec"], pod["metadata"]
        containers = [
            {"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": True, "started": True,
             "restartCount": 0, "state": {"running": {"startedAt": now()}}}
            for c in spec["containers"]
        ]  # fmt: skip
        conditions = [
            {"type": t, "status": "True", "lastTransitionTime": now()}
            for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        status = {"phase": "Running", "conditions": conditions, "containerStatuses": containers,
                  "hostIP": "127.0.0.1", "podIP": "127.0.0.1", "startTime": now()}  # fmt: skip
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
        return dict(self.api.patch(path, {"status": status}))

    def wait_scheduled(self, namespace: str, name: str, timeout: float = 60) -> JSON:
        """The pod once the scheduler bound it to a node."""
        pod = wait_until(
            lambda: (
                (p := self.api.get(f"/api/v1/namespaces/{namespace}/pods/{name}"))["spec"].get("nodeName")
                and p
            ),
            timeout=timeout,
        )
        assert pod, (
            f"pod {namespace}/{name} not scheduled within {timeout}s: {self.why_pending(namespace, name)}"
        )
        return dict(pod)

    def why_pending(self, namespace: str, name: str) -> str:
        pod = self.api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        return "; ".join(
            f"{c['type']}={c['status']} {c.get('reason', '')}: {c.get('message', '')}"
            for c in pod.get("status", {}).get("conditions") or []
        )

    def force_delete_pod(self, name: str) -> None:
        """Delete a pod at once (grace period 0), as kubelet's confirmation would: no kubelet runs here."""
        self.api.request(
            "DELETE", f"/api/v1/namespaces/{self.namespace}/pods/{name}", {"gracePeriodSeconds": 0}
        )

    def allocated_claim(
        self,
        name: str,
        node: str,
        requests: list[JSON],
        results: list[JSON],
        *,
        config: list[JSON] | None = None,
        compact: bool = False,
    ) -> JSON:
        """A ResourceClaim of `requests` in the test's namespace, its allocation (`results` on `node`, and
        `config` when given) written by the admin as the scheduler would, `compact` as Go clients send it;
        the stored claim."""
        created = self.apply(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name},
                "spec": {"devices": {"requests": requests}},
            }
        )
        on_node = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        selector = {"nodeSelectorTerms": [on_node]}
        devices: JSON = {"results": results, **({"config": config} if config else {})}
        created["status"] = {"allocation": {"devices": devices, "nodeSelector": selector}}
        path = f"/apis/resource.k8s.io/v1/namespaces/{self.namespace}/resourceclaims/{name}/status"
        return dict(self.api.request("PUT", path, created, compact=compact))

    def claim_of(self, pod: JSON) -> JSON:
        """The ResourceClaim the pod's only claim status names (from a template, or the claim the scheduler
        made for its extended resources)."""
        status = pod.get("status", {})
        names = [s["resourceClaimName"] for s in status.get("resourceClaimStatuses") or []]
        if status.get("extendedResourceClaimStatus"):
            names.append(status["extendedResourceClaimStatus"]["resourceClaimName"])
        [name] = names
        path = f"/apis/resource.k8s.io/v1/namespaces/{pod['metadata']['namespace']}/resourceclaims/{name}"
        return dict(self.api.get(path))

    def pods(self, selector: str = "") -> list[JSON]:
        query = {"labelSelector": selector} if selector else {}
        return self.api.items(f"/api/v1/namespaces/{self.namespace}/pods", **query)

    def slices_of(self, node: str) -> list[JSON]:
        return self.api.items(
            "/apis/resource.k8s.io/v1/resourceslices", fieldSelector=f"spec.nodeName={node}"
        )

    # ------------------------------------------------------------------ the chart

    def install_chart(
        self, *, release: str | None = None, values: dict[str, Any] | None = None
    ) -> list[JSON]:
        """`helm template` of driver/chart (simulated GPUs, the plugin on this test's nodes) into this
        namespace, every object created on the server; the rendered objects."""
        helm = find_helm()
        assert helm, "helm not found: run scripts/setup (it installs helm into .venv/bin)"
        release = release or self.namespace
        affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": TEST_LABEL, "operator": "In", "values": [self.namespace]}]}
        ]}}}  # fmt: skip
        chart_values = {
            "deviceSource": {"type": "simulated", "simulatedGpus": 4},
            "kubeletPlugin": {"affinity": affinity},
            **(values or {}),
        }
        values_file = self.tmp / "values.yaml"
        values_file.write_text(yaml.safe_dump(chart_values))
        rendered = subprocess.run(
            [str(helm), "template", release, str(CHART_DIR), "--namespace", self.namespace,
             "--skip-tests", "--values", str(values_file)],
            capture_output=True, text=True, check=True, timeout=60,
            env={**os.environ, "HELM_CACHE_HOME": str(self.tmp / "helm"),
                 "HELM_CONFIG_HOME": str(self.tmp / "helm"), "HELM_DATA_HOME": str(self.tmp / "helm")},
        ).stdout  # fmt: skip
        objects = [d for d in yaml.safe_load_all(rendered) if d]
        for obj in objects:
            self.apply(obj, shared=obj["kind"] == "DeviceClass")
        return objects

    def plugin_pod(self, objects: list[JSON], node: str, *, running: bool = True) -> JSON:
        """A pod of the chart's DaemonSet on `node`, as the DaemonSet controller makes it; Running."""
        [daemonset] = [o for o in objects if o["kind"] == "DaemonSet"]
        template = copy.deepcopy(daemonset["spec"]["template"])
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**template["metadata"], "name": f"{daemonset['metadata']['name'][:40]}-{node[-12:]}",
                         "namespace": self.namespace},
            "spec": {**template["spec"], "nodeName": node},
        }  # fmt: skip
        created = self.apply(pod)
        return self.mark_running(created) if running else created

    def token(self, service_account: str, pod: JSON | None = None) -> str:
        """A service-account token from `kubectl create token`; bound to `pod` like the projected token
        kubelet mounts into it (the API server then adds the pod's node to the token's identity)."""
        bound = (
            ["--bound-object-kind", "Pod", "--bound-object-name", pod["metadata"]["name"],
             "--bound-object-uid", pod["metadata"]["uid"]]
            if pod else []
        )  # fmt: skip
        result = subprocess.run(
            [str(BIN / "kubectl"), "--kubeconfig", str(self.plane.kubeconfig), "-n", self.namespace,
             "create", "token", service_account, "--duration", "1h", *bound],
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        return result.stdout.strip()

    # ------------------------------------------------------------------ the plugin process

    def start_plugin(
        self, node: str, token: str, *, gpus: int = 4, product: str = "", extra_args: Sequence[str] = ()
    ) -> Plugin:
        """The kubelet plugin (`python -m vke_gpu_dra`, simulated GPUs) for `node`, authenticated with
        `token`, with `extra_args` added to its command line; stopped by PID after the test if the test
        did not stop it."""
        root = self.tmp / node[-12:]
        root.mkdir()
        kubeconfig = self.plane.write_kubeconfig(root / "kubeconfig", token)
        args = [
            "--node-name", node, "--kubeconfig", str(kubeconfig),
            "--plugin-data-dir", str(root / "plugins" / facts.DRIVER_NAME),
            "--registrar-dir", str(root / "registry"), "--cdi-root", str(root / "cdi"),
            "--device-source", "simulated", "--simulated-gpus", str(gpus),
            "--healthcheck-port", "0", "--metrics-port", "0", "--log-format", "json",
            *(["--simulated-product", product] if product else []),
            *extra_args,
        ]  # fmt: skip
        return self._run_plugin(root, node, args)

    def restart_plugin(self, plugin: Plugin) -> Plugin:
        """The same plugin command again, on the same node and directories (its log starts anew), once the
        process has exited."""
        assert plugin.process.poll() is not None, "stop the plugin before starting it again"
        return self._run_plugin(plugin.root, plugin.node, plugin.args)

    def _run_plugin(self, root: Path, node: str, args: Sequence[str]) -> Plugin:
        with (root / "plugin.log").open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "vke_gpu_dra", *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append(process)
        return Plugin(process, root, node, args)

    def driver_on_new_node(
        self,
        suffix: str = "gpu",
        *,
        gpus: int = 4,
        extra_args: Sequence[str] = (),
        objects: list[JSON] | None = None,
    ) -> tuple[Plugin, JSON]:
        """The chart (installed unless `objects` are its rendered objects), a Ready node, the plugin's pod
        Running there and the plugin process (`gpus` simulated GPUs, `extra_args`) with its pod's token;
        returns once its slice is published."""
        objects = self.install_chart() if objects is None else objects
        node = self.add_node(suffix)
        name = node["metadata"]["name"]
        pod = self.plugin_pod(objects, name)
        [service_account] = [o for o in objects if o["kind"] == "ServiceAccount"]
        token = self.token(service_account["metadata"]["name"], pod)
        plugin = self.start_plugin(name, token, gpus=gpus, extra_args=extra_args)
        published = wait_until(lambda: self.slices_of(name) or plugin.process.poll() is not None, timeout=60)
        assert published and plugin.process.poll() is None, f"no slice published:\n{plugin.log}"
        return plugin, node
