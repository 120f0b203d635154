"""Pod start-up on the real node: pod create -> Running with a GPU claim and without one (the floor).

The node tier's node (`tests/node`: containerd 2.1.9 with CDI, runc 1.4.4, the CNI bridge, in namespaces of
its own) runs the real kubelet of each release asked for, registered with a control plane of that release
(kube-apiserver, kube-scheduler, kube-controller-manager, etcd from the toolchain); the chart's objects and
a one-GPU ResourceClaimTemplate come from `tests/node/test_dra.py`'s `gpu_node`, with our plugin as a host
process standing for its DaemonSet pod (simulated GPUs), or another plugin binary given by path. Per
kubelet release and plugin, on a fresh node:

* `--pods` pods with one GPU claim and as many without any claim, created one after another, alternating
  (floor, GPU, GPU, floor, ...); each is deleted once Running and gone before the next is created, so
  each starts alone on the node. One untimed pod of each kind first.
* `--burst` GPU pods created at once (one thread each, released together), then as many pods without
  claims: the time from the first create to the last pod Running, and each pod's own time.

A pod's time runs from just before its create request to the watch event that shows it Running (a
watch on the namespace's pods, this process's monotonic clock). Percentiles are nearest-rank. Prints one
Markdown table per kubelet release, one column per plugin; `--json` writes the same figures.

Run as root from the repository root, with the toolchain's node binaries and kubelets built:
`nice python -m bench.pod_startup [--kubelet 1.34] [--pods 30] [--burst 16] [--plugin PATH --plugin-args
TEMPLATE]` (driver/BENCHMARKS.md, "Pod start-up on the real node").
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import re
import shlex
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.cluster import Cluster
from tests.integration.controlplane import missing_assets, wait_until
from tests.node import images
from tests.node.kube import BUSYBOX, RELEASES, NodePlane
from tests.node.node import Node, missing
from tests.node.test_dra import claim_pod, gpu_node, plugin_paths, spawn_plugin
from tools import toolchain

#: What a pod runs: it ends at once on SIGTERM (a shell as PID 1 ignores it), so a deletion takes no grace.
POD_SCRIPT = "trap 'exit 0' TERM\nsleep 3600 & wait"
POD_TIMEOUT = 120.0
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


def percentile(samples: Sequence[float], pct: float) -> float:
    """Nearest rank: the smallest sample with at least `pct` percent of the samples at or below it."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


class PodWatch:
    """A watch on one namespace's pods: when each was first seen bound to a node, Running, and deleted."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self.changed = threading.Condition()
        self.error: BaseException | None = None
        url = urllib.parse.urlsplit(cluster.api.server)
        context = ssl.create_default_context(cafile=str(cluster.api.ca_file))
        self.connection = http.client.HTTPSConnection(url.hostname or "", url.port, context=context)
        self.connection.request(
            "GET", f"/api/v1/namespaces/{cluster.namespace}/pods?watch=1&timeoutSeconds=3600",
            headers={"Authorization": f"Bearer {cluster.api.token}", "Accept": "application/json"},
        )  # fmt: skip
        self.response = self.connection.getresponse()
        if self.response.status != 200:
            raise RuntimeError(f"pod watch: {self.response.status} {self.response.read()!r}")
        self.thread = threading.Thread(target=self._read, name="pod-watch", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for line in self.response:
                event = json.loads(line)
                now = time.monotonic()
                pod = event["object"]
                name = pod.get("metadata", {}).get("name", "")
                with self.changed:
                    if event["type"] == "DELETED":
                        self.gone.setdefault(name, now)
                    elif pod.get("spec", {}).get("nodeName"):
                        self.bound.setdefault(name, now)
                        if pod.get("status", {}).get("phase") == "Running":
                            self.running.setdefault(name, now)
                    self.changed.notify_all()
        except (OSError, ValueError, http.client.HTTPException) as exc:
            self.error = exc
        with self.changed:
            self.changed.notify_all()

    def wait(self, seen: dict[str, float], names: Sequence[str], what: str) -> None:
        deadline = time.monotonic() + POD_TIMEOUT
        with self.changed:
            while not all(n in seen for n in names):
                left = deadline - time.monotonic()
                if self.error is not None or not self.thread.is_alive() or left <= 0:
                    late = [n for n in names if n not in seen]
                    why = "; ".join(self._why(n) for n in late[:3])
                    raise RuntimeError(
                        f"pods {late} not {what} within {POD_TIMEOUT:.0f} s ({self.error}): {why}"
                    )
                self.changed.wait(min(left, 1.0))

    def _why(self, name: str) -> str:
        try:
            return f"{name}: {self.cluster.why_pending(self.cluster.namespace, name)}"
        except Exception as exc:  # only for the message
            return f"{name}: {exc}"

    def close(self) -> None:
        if self.connection.sock is not None:
            self.connection.sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(timeout=10)
        self.connection.close()


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


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _p50_p99(samples: Sequence[float]) -> str:
    return f"{_ms(percentile(samples, 50))} / {_ms(percentile(samples, 99))}"


def failures(failed: dict[str, str]) -> str:
    if not failed:
        return "none"
    reasons = sorted(set(failed.values()))
    return f"{len(failed)}: {', '.join(failed)} ({'; '.join(reasons)})"


def figures(run: Run, args: argparse.Namespace) -> dict[str, str]:
    """One row per figure: its label and this run's value."""
    overhead = percentile(run.gpu, 50) - percentile(run.floor, 50)
    return {
        f"pod without claims (floor), create -> Running, p50 / p99 ({args.pods} pods)": _p50_p99(run.floor),
        f"pod with one GPU claim, create -> Running, p50 / p99 ({args.pods} pods)": _p50_p99(run.gpu),
        "claim overhead: GPU p50 - floor p50": _ms(overhead),
        "pod with one GPU claim, create -> bound to the node, p50 / p99": _p50_p99(run.gpu_bound),
        f"{args.burst} GPU pods at once: first create -> all Running": _ms(run.burst_gpu_all),
        f"{args.burst} GPU pods at once: per pod, p50 / p99": _p50_p99(run.burst_gpu),
        f"{args.burst} pods without claims at once: first create -> all Running": _ms(run.burst_floor_all),
        f"{args.burst} pods without claims at once: per pod, p50 / p99": _p50_p99(run.burst_floor),
        "pods whose claims the kubelet failed to prepare at first (kubelet.log)": failures(
            run.failed_prepares
        ),
        "load average (1 min) before / after": f"{run.load[0]:.2f} / {run.load[1]:.2f}",
    }


def table(release: str, runs: dict[str, Run], args: argparse.Namespace) -> str:
    rows = {name: figures(run, args) for name, run in runs.items()}
    labels = list(next(iter(rows.values())))
    lines = [
        f"kubelet {release} (containerd 2.1.9, runc 1.4.4, {os.cpu_count()} CPUs), "
        f"{args.gpus} simulated GPUs",
        "",
        "| figure | " + " | ".join(runs) + " |",
        "|---|" + "---|" * len(runs),
    ]
    lines += [f"| {label} | " + " | ".join(rows[name][label] for name in runs) + " |" for label in labels]
    return "\n".join(lines)


def as_json(run: Run) -> dict[str, Any]:
    def summary(samples: Sequence[float]) -> dict[str, Any]:
        return {"n": len(samples), "p50": percentile(samples, 50), "p99": percentile(samples, 99),
                "mean": statistics.fmean(samples), "samples": list(samples)}  # fmt: skip

    return {
        "floor": summary(run.floor), "gpu": summary(run.gpu), "gpu_bound": summary(run.gpu_bound),
        "overhead_p50": percentile(run.gpu, 50) - percentile(run.floor, 50),
        "burst_gpu": {**summary(run.burst_gpu), "all_running": run.burst_gpu_all},
        "burst_floor": {**summary(run.burst_floor), "all_running": run.burst_floor_all},
        "load": list(run.load), "failed_prepares": run.failed_prepares,
    }  # fmt: skip


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.pod_startup", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--kubelet", action="append", choices=sorted(RELEASES), help="a release (default: all)"
    )
    parser.add_argument("--pods", type=int, default=30, help="pods of each kind, one after another (30)")
    parser.add_argument("--burst", type=int, default=16, help="pods of each kind created at once (16)")
    parser.add_argument("--gpus", type=int, default=16, help="the node's simulated GPUs (16; >= --burst)")
    parser.add_argument("--plugin", type=Path, help="another plugin binary, run side by side with ours")
    parser.add_argument(
        "--plugin-args", default="",
        help=f"its arguments, a shell-quoted template of {{{'}, {'.join(PLACEHOLDERS)}}}",
    )  # fmt: skip
    parser.add_argument("--plugin-env", action="append", default=[], help="KEY=VALUE for it (a template)")
    parser.add_argument("--plugin-name", help="its column's title (default: the binary's name)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--logs", type=Path, help="keep each node's logs in a folder of this one")
    args = parser.parse_args(argv)
    for option in ("pods", "burst", "gpus"):
        if getattr(args, option) < 1:
            parser.error(f"--{option} {getattr(args, option)}: must be at least 1")
    if args.gpus < args.burst:
        parser.error(f"--gpus {args.gpus}: must be at least --burst ({args.burst}), one GPU per pod")
    args.plugins = [PluginSpec("ours (vke_gpu_dra)")]
    if args.plugin is None:
        if args.plugin_args or args.plugin_env or args.plugin_name:
            parser.error("--plugin-args, --plugin-env and --plugin-name need --plugin")
        return args
    if not (args.plugin.is_file() and os.access(args.plugin, os.X_OK)):
        parser.error(f"--plugin {args.plugin}: not an executable file")
    env = []
    for item in args.plugin_env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--plugin-env {item!r}: must be KEY=VALUE")
        env.append((key, value))
    template = tuple(shlex.split(args.plugin_args))
    dummy = dict.fromkeys(PLACEHOLDERS, "x")
    allowed = f"allowed: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
    for part in (*template, *(v for _, v in env)):
        try:
            part.format_map(dummy)
        except KeyError as exc:
            parser.error(
                f"--plugin-args/--plugin-env {part!r}: unknown placeholder {{{exc.args[0]}}}; {allowed}"
            )
        except (ValueError, IndexError) as exc:
            parser.error(f"--plugin-args/--plugin-env {part!r}: {exc} (a brace itself is doubled); {allowed}")
    name = args.plugin_name or args.plugin.name
    args.plugins.append(PluginSpec(name, (str(args.plugin.resolve()), *template), tuple(env)))
    return args


@contextmanager
def plane_of(minor: str) -> Iterator[NodePlane]:
    assets = toolchain.kube_assets(minor)
    assert assets is not None
    plane = NodePlane(assets, minor)
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


def unavailable(releases: Sequence[str]) -> str | None:
    """Why the bench cannot run here, or None."""
    reason = missing()
    if reason:
        return reason
    for minor in releases:
        name = toolchain.KUBERNETES[minor]
        folder = toolchain.locate(name)
        reason = missing_assets(minor, toolchain.kube_assets(minor))
        if reason or folder is None or not (folder / "kubelet").exists():
            return f"{reason or f'no kubelet {minor}'}: scripts/toolchain --only etcd,{name}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    releases = args.kubelet or sorted(RELEASES)
    reason = unavailable(releases)
    if reason:
        print(f"pod_startup: {reason}", file=sys.stderr)
        return 1
    print(f"pod start-up on the real node: {args.pods} pods of each kind one by one, {args.burst} at once; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    results: dict[str, dict[str, Any]] = {}
    for n, minor in enumerate(releases):
        runs: dict[str, Run] = {}
        with plane_of(minor) as plane:
            # the plugins take turns going first, release by release
            for plugin in args.plugins if n % 2 == 0 else args.plugins[::-1]:
                began = time.monotonic()
                runs[plugin.name] = measure(plane, plugin, args)
                took = time.monotonic() - began
                print(
                    f"  kubelet {RELEASES[minor]}, {plugin.name}: {took:.0f} s, nothing left behind",
                    flush=True,
                )
        runs = {plugin.name: runs[plugin.name] for plugin in args.plugins}
        print("\n" + table(RELEASES[minor], runs, args) + "\n", flush=True)
        results[RELEASES[minor]] = {name: as_json(run) for name, run in runs.items()}
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
