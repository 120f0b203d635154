"""The workload of one plugin on one kubelet release, on a fresh node: pods one by one, then at once."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.integration.cluster import Cluster
from tests.integration.controlplane import wait_until
from tests.node import images
from tests.node.kube import BUSYBOX, NodePlane
from tests.node.node import Node
from tests.node.test_dra import claim_pod, gpu_node, plugin_paths, spawn_plugin

from .watch import PodWatch

#: What a pod runs: it ends at once on SIGTERM (a shell as PID 1 ignores it), so a deletion takes no grace.
POD_SCRIPT = "trap 'exit 0' TERM\nsleep 3600 & wait"
#: The kubelet's log line when it could not prepare a pod's claims (before or in the plugin's call).
PREPARE_FAILED = re.compile(
    r'"Failed to prepare dynamic resources" err="(?P<err>(?:[^"\\]|\\.)*)" pod="(?P<pod>[^"]+)"'
)
#: Placeholders a `--plugin-args` template may use (test_dra.plugin_paths, and the simulated GPU count).
PLACEHOLDERS = (
    "node_name", "kubeconfig", "kubelet_root", "plugin_data_dir", "registrar_dir", "cdi_root",
    "pod_resources_socket", "gpus",
)  # fmt: skip


@dataclass(frozen=True)
class PluginSpec:
    """A plugin the workload runs with: ours (`argv` empty) or a binary and its argument template."""

    name: str
    argv: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def starter(self, gpus: int) -> Callable[[Node, Cluster], subprocess.Popen[bytes]] | None:
        if not self.argv:
            return None

        def start(node: Node, cluster: Cluster) -> subprocess.Popen[bytes]:
            values = {**plugin_paths(node, cluster), "gpus": str(gpus)}
            argv = [part.format_map(values) for part in self.argv]
            return spawn_plugin(node, cluster, argv, {k: v.format_map(values) for k, v in self.env})

        return start


@dataclass
class Run:
    """The figures of one plugin on one kubelet release (seconds)."""

    floor: list[float] = field(default_factory=list)
    gpu: list[float] = field(default_factory=list)
    gpu_bound: list[float] = field(default_factory=list)
    burst_gpu: list[float] = field(default_factory=list)
    burst_gpu_all: float = 0.0
    burst_floor: list[float] = field(default_factory=list)
    burst_floor_all: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)
    #: Pods whose claims the kubelet failed to prepare at its first try, with its first error (kubelet.log).
    failed_prepares: dict[str, str] = field(default_factory=dict)


def create(cluster: Cluster, pod: dict[str, Any]) -> float:
    """Create `pod`; the monotonic time just before the request."""
    began = time.monotonic()
    cluster.api.create(f"/api/v1/namespaces/{cluster.namespace}/pods", pod)
    return began


def delete_all(cluster: Cluster, watch: PodWatch, names: Sequence[str]) -> None:
    for name in names:
        cluster.api.delete(f"/api/v1/namespaces/{cluster.namespace}/pods/{name}")
    watch.wait(watch.gone, names, "deleted by the kubelet")


def pods_of(node: str, name: str, gpu: bool) -> dict[str, Any]:
    """`claim_pod`'s pod running POD_SCRIPT; without its claim (the floor) unless `gpu`."""
    pod = claim_pod("one-gpu", node, BUSYBOX, POD_SCRIPT, name=name)
    if not gpu:
        del pod["spec"]["resourceClaims"], pod["spec"]["containers"][0]["resources"]
    return pod


def one_by_one(cluster: Cluster, watch: PodWatch, node: str, pods: int, run: Run) -> None:
    """Untimed warm-up of each kind, then `pods` of each kind, alternating, each alone on the node."""
    order: list[tuple[str, bool, list[float] | None]] = [
        ("warm-floor", False, None),
        ("warm-gpu", True, None),
    ]
    for i in range(pods):
        pair = [(f"floor-{i}", False, run.floor), (f"gpu-{i}", True, run.gpu)]
        order += pair if i % 2 == 0 else pair[::-1]
    for name, gpu, samples in order:
        began = create(cluster, pods_of(node, name, gpu))
        watch.wait(watch.running, [name], "Running")
        if samples is not None:
            samples.append(watch.running[name] - began)
            if gpu:
                run.gpu_bound.append(watch.bound[name] - began)
        delete_all(cluster, watch, [name])


def at_once(cluster: Cluster, watch: PodWatch, node: str, count: int, gpu: bool) -> tuple[list[float], float]:
    """`count` pods created together: each pod's create -> Running, and first create -> last Running."""
    kind = "gpu" if gpu else "floor"
    names = [f"burst-{kind}-{i}" for i in range(count)]
    manifests = [pods_of(node, name, gpu) for name in names]
    gate = threading.Barrier(count)
    began: dict[str, float] = {}
    failures: list[BaseException] = []

    def send(pod: dict[str, Any]) -> None:
        gate.wait()
        try:
            began[pod["metadata"]["name"]] = create(cluster, pod)
        except Exception as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=send, args=(pod,)) for pod in manifests]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"creating {kind} pods at once: {failures[0]}")
    watch.wait(watch.running, names, "Running")
    each = [watch.running[n] - began[n] for n in names]
    whole = max(watch.running[n] for n in names) - min(began.values())
    delete_all(cluster, watch, names)
    return each, whole


def no_claims_left(cluster: Cluster) -> bool:
    return not cluster.api.items(f"/apis/resource.k8s.io/v1/namespaces/{cluster.namespace}/resourceclaims")


def failed_prepares(kubelet_log: str) -> dict[str, str]:
    """The pods the kubelet failed to prepare claims for (it tries again at its next pod sync, after
    syncFrequency: a minute, give or take half), each with the first error, shortened."""
    failed: dict[str, str] = {}
    for line in kubelet_log.splitlines():
        match = PREPARE_FAILED.search(line)
        if match:
            error = match.group("err").replace('\\"', '"')
            why = error.rsplit(": ", 1)[-1] if "forbidden" in error else error
            why = re.sub(r"node '[^']+'", "the node", why)
            failed.setdefault(match.group("pod").rsplit("/", 1)[-1], why[:120])
    return failed


def measure(plane: NodePlane, plugin: PluginSpec, args: argparse.Namespace) -> Run:
    """The workload on a fresh node with `plugin`; the node must leave nothing behind."""
    run = Run()
    load_before = os.getloadavg()[0]
    node = Node().start()
    try:
        node.import_image(
            images.build(node.base / "images" / "busybox.tar", BUSYBOX, images.busybox_entries())
        )
        source = ["--device-source", "simulated", "--simulated-gpus", str(args.gpus)]
        with gpu_node(node, plane, source, plugin=plugin.starter(args.gpus)) as cluster:
            watch = PodWatch(cluster)
            try:
                one_by_one(cluster, watch, node.name, args.pods, run)
                if not wait_until(lambda: no_claims_left(cluster), timeout=60):
                    raise RuntimeError("the one-by-one pods' claims were not deleted")
                run.burst_gpu, run.burst_gpu_all = at_once(cluster, watch, node.name, args.burst, True)
                run.burst_floor, run.burst_floor_all = at_once(cluster, watch, node.name, args.burst, False)
            finally:
                watch.close()
    except BaseException:
        print(node.logs(), file=sys.stderr)
        raise
    finally:
        kubelet_log = node.logs_dir / "kubelet.log"
        run.failed_prepares = failed_prepares(
            kubelet_log.read_text(errors="replace") if kubelet_log.exists() else ""
        )
        if args.logs is not None:  # the node's logs (kubelet, containerd, plugin), before they go with it
            slug = re.sub(r"[^a-z0-9.]+", "-", f"{plane.version}-{plugin.name}".lower()).strip("-")
            shutil.copytree(node.logs_dir, args.logs / slug, dirs_exist_ok=True)
        node.stop()
    left = node.leftovers()
    if left:
        raise RuntimeError(f"node {node.name} left things behind: {left}")
    run.load = (load_before, os.getloadavg()[0])
    return run
