"""NVIDIA's quickstart shapes on the real node: our manifests of them (`tests/node/quickstart/*.yaml`, after
the shapes of NVIDIA's k8s-dra-driver-gpu demo/specs/quickstart) applied as they are, on the real kubelet
of each release, containerd 2.1 with CDI and runc, and the real scheduler:

* one pod with one GPU; two pods with one GPU each (NVIDIA's gpu-test1); two containers sharing one claim
  (gpu-test2); two pods sharing one ResourceClaim (gpu-test3);
* time-slicing (gpu-test6: a Deployment whose claims' GpuConfig asks for TimeSlicing, interval Long);
* MPS with its control daemon (gpu-test-mps: two containers of one pod sharing an MPS claim).

Each pod reaches Running, and each container sees exactly the devices of its claims: its GPUs' device
nodes (and the control nodes), `nvidia-smi -L` from the driver root through the claim's CDI spec (the
fake libnvidia-ml lists only the GPUs whose node the container has), and the environment the spec sets.
Time-slicing and MPS show what the plugin told the GPUs (the fake nvidia-smi's record of compute mode
and time-slice) and, for MPS, that the claim's control daemon ran on the node (its Deployment, pod and
log), that the shm tmpfs the plugin mounted is the node's, and that both containers reached it through
the pipe directory the spec gives them. Deleting the namespace has the kubelet unprepare every claim,
which sets the GPUs back.

Only the workload and its place are swapped: the manifests' image and command (ubuntu's bash running
`nvidia-smi -L`) become the tier's probe image (busybox, and the loader and libc nvidia-smi needs) and the
probe below, with `imagePullPolicy: Never` (no registry is reachable), and each pod gets a nodeSelector
for the test's node (the tier's control plane keeps the Nodes of earlier tests, and the slices their
plugins left: without it the scheduler places pods there, where no kubelet runs).

The plugin runs two ways, each on a node of its own per release, NVML as its device source (the fake
driver root, its device nodes made with mknod):

* the chart's DaemonSet pod (`helm install` of driver/chart with the driver image built without Docker,
  as test_chart_daemonset.py), gates TimeSlicingSettings and MPSSupport: with MPSSupport the chart mounts
  the plugin's data folder with Bidirectional propagation, so the MPS shm tmpfs the plugin mounts there
  reaches the node, where the control daemon's pod and the workload bind it; the daemon runs the driver
  image's `chroot`, and its startup probe that image's `cat`;
* a process of the test standing for that pod (as test_dra.py), the same gates, in the node's mount
  namespace, so the MPS shm tmpfs it mounts is the node's.

Every shape runs both ways.

The driver root holds what a real one has for MPS: a shell (busybox) and /dev/null for the daemon's
`chroot /driver-root sh -c ...`, and an nvidia-cuda-mps-control whose daemon keeps a control pipe and a
log as the real one does (`MPS_CONTROL`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from vke_gpu_dra_core import facts

from tests.driver import fake_driver
from tests.driver.fake_driver import FakeRoot
from tests.integration.cluster import Cluster
from tests.integration.controlplane import wait_until

from . import images
from .chart import DRIVER_ROOT_IN_PLUGIN, container_id, driver_image, nvml_settings, release
from .kube import (
    NodePlane,
    get_or_none,
    is_running,
    join,
    kubelet_of,
)
from .node import FIGURES, KUBELET_ROOT, Node, missing
from .test_chart_daemonset import plugin_log, plugin_pod
from .test_containerd_cdi import PRODUCT, UUIDS
from .test_dra import gpu_node, output_of, start_plugin

QUICKSTART = Path(__file__).with_name("quickstart")
IMAGE = "vke-gpu-dra.local/node/quickstart:1"
GATES = "TimeSlicingSettings=true,MPSSupport=true"
#: How the plugin runs: a process of the test in the node's mount namespace, or the chart's DaemonSet pod.
PLUGINS = ("chart", "process")
#: The MPS pipe directory NVIDIA's spec gives a workload (CUDA_MPS_PIPE_DIRECTORY).
MPS_PIPE = "/tmp/nvidia-mps"
#: What each container prints ($0 is its name): its GPU device nodes, nvidia-smi's GPUs, the environment
#: the CDI spec sets; with MPS, the daemon's control pipe, its /dev/shm and a line sent to the daemon
#: through the pipe, as a CUDA client connects. Then it waits as NVIDIA's examples do.
PROBE = r"""
for dev in /dev/nvidia*; do [ -e "$dev" ] && echo "node $dev"; done
nvidia-smi -L 2>&1 | sed 's/^/smi /'
env | grep -E '^(NVIDIA_|DRA_|CUDA_)' | sort | sed 's/^/env /'
if [ -n "$CUDA_MPS_PIPE_DIRECTORY" ]; then
  [ -p "$CUDA_MPS_PIPE_DIRECTORY/control" ] && echo "mps pipe $CUDA_MPS_PIPE_DIRECTORY/control"
  ls /dev/shm | sed 's/^/shm /'
  echo "client $0" | timeout 10 sh -c 'cat > "$CUDA_MPS_PIPE_DIRECTORY/control"' && echo "mps sent $0"
fi
echo done
trap 'exit 0' TERM; sleep 9999 & wait
"""
#: The fake nvidia-cuda-mps-control of the driver root (the daemon runs it under chroot, with busybox).
#: `-d` starts the control daemon: it makes its control pipe in the pipe directory, a file in /dev/shm
#: (where the real daemon keeps the memory it shares with its clients) and logs to control.log in the log
#: directory; it logs every line a client writes to the pipe (holding the pipe open for writing as well: a
#: reader that reopened it after each client's EOF could close it just after the next client wrote a line,
#: and the kernel drops what a pipe holds when its last reader closes). Without `-d`, each line of stdin is a
#: command sent to the running daemon; no daemon is the real tool's error.
MPS_CONTROL = r"""#!/bin/sh
pipe="${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}"
logs="${CUDA_MPS_LOG_DIRECTORY:-/var/log/nvidia-mps}"
log() { echo "[$(date '+%Y-%m-%d %H:%M:%S') Control $$] $*" >> "$logs/control.log"; }
if [ "$1" = "-d" ]; then
  if [ -p "$pipe/control" ]; then echo "An instance of this daemon is already running" >&2; exit 1; fi
  mkfifo "$pipe/control"
  : > /dev/shm/cuda.shm.mps-control
  log "Starting control daemon using socket $pipe/control"
  serve() {
    exec 3<> "$pipe/control"  # open for writing too: never an EOF, so no line is dropped between two clients
    while read -r line <&3; do log "Cmd:$line"; done
  }
  serve &
  exit 0
fi
[ -p "$pipe/control" ] || { echo "Cannot find MPS control daemon process" >&2; exit 1; }
while read -r line; do echo "$line" > "$pipe/control"; done
"""
#: What the driver root offers the daemon's shell (busybox applets in its /bin, as a host's root has).
ROOT_APPLETS = ("sh", "rm", "tail", "mkfifo", "date", "cat", "echo", "sleep", "mkdir")
#: Applets of the probe image beyond the tier's (the MPS daemon's image runs chroot too).
IMAGE_APPLETS = ("chroot", "timeout", "sort", "tail")


@dataclass(frozen=True)
class Shape:
    """What a quickstart manifest makes and how its GPUs are set while its pods run."""

    pods: int
    containers: int
    claims: int
    gpus: int
    timeslice: str | None = "0"  # None: not set (MPS)
    compute_mode: str = "DEFAULT"
    mps: bool = False


SHAPES = {
    "one-pod-one-gpu": Shape(pods=1, containers=1, claims=1, gpus=1),
    "two-pods-one-gpu-each": Shape(pods=2, containers=2, claims=2, gpus=2),
    "two-containers-one-claim": Shape(pods=1, containers=2, claims=1, gpus=1),
    "two-pods-one-claim": Shape(pods=2, containers=2, claims=1, gpus=1),
    "time-slicing": Shape(pods=2, containers=2, claims=2, gpus=2, timeslice="3"),
    "mps": Shape(pods=1, containers=2, claims=1, gpus=1, timeslice=None, compute_mode="EXCLUSIVE_PROCESS",
                 mps=True),
}  # fmt: skip


@dataclass
class GpuNode:
    node: Node
    cluster: Cluster
    #: where the fake nvidia-smi records what it set (a path of this machine)
    smi_log: Path
    #: the plugin's log so far
    plugin_log: Callable[[], str]
    #: "process" or "chart"
    plugin: str

    def smi_calls(self) -> list[str]:
        return self.smi_log.read_text().splitlines() if self.smi_log.exists() else []

    def plugin_logged(self, message: str) -> int:
        return self.plugin_log().count(f'"msg": "{message}"')


def driver_root(node: Node, plugin_sees_it_at: str) -> FakeRoot:
    """The fake driver root, with a shell, /dev/null and the fake MPS control, as a host's root has; the
    fake NVML lists the GPUs whose node is in /dev (a container given its claim's nodes) or in the
    driver root's dev/ where the plugin sees it."""
    path = node.base / "driver" / "root"
    settings = nvml_settings() | {"require_device_nodes": f"/dev,{plugin_sees_it_at}/dev"}
    root = fake_driver.build(path, gpus=len(UUIDS), nvml_config=settings)
    fake_driver.mknod(root.local("/dev/null"), 1, 3)  # a shell's background jobs read it
    root.local("/bin").mkdir()
    shutil.copy2(images.BUSYBOX, root.local("/bin/busybox"))
    for applet in ROOT_APPLETS:
        os.symlink("busybox", root.local(f"/bin/{applet}"))
    control = root.local("/usr/bin/nvidia-cuda-mps-control")
    control.write_text(MPS_CONTROL)
    control.chmod(0o755)
    return root


def manifests(shape: str, node: str) -> list[dict[str, Any]]:
    """The shape's objects, every container running the probe in the tier's image, every pod on `node`
    (the tier's control plane keeps the Nodes of earlier tests, and slices their plugins left)."""
    objects = [o for o in yaml.safe_load_all((QUICKSTART / f"{shape}.yaml").read_text()) if o]
    for obj in objects:
        spec = obj.get("spec", {})
        pod_spec = spec.get("template", {}).get("spec") if obj["kind"] == "Deployment" else spec
        if obj["kind"] not in ("Pod", "Deployment"):
            continue
        pod_spec["nodeSelector"] = {"kubernetes.io/hostname": node}
        for container in pod_spec["containers"]:
            container |= {"image": IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c"]}
            container["args"] = [PROBE, container["name"]]
    return objects


@pytest.fixture(scope="module", params=PLUGINS)
def plugin(request: pytest.FixtureRequest) -> str:
    """How the plugin runs: a process of the test, or the chart's DaemonSet pod."""
    return str(request.param)


@pytest.fixture(scope="module")
def node(plane: NodePlane, plugin: str) -> Iterator[Node]:
    """A node of its own per release and plugin; nothing of it may be left afterwards."""
    reason = missing()
    if reason:
        pytest.skip(reason)
    kubelet_of(plane.kubelet)
    running = Node().start()
    try:
        yield running
    finally:
        running.stop()
    assert running.leftovers() == [], "the node left things behind"


@pytest.fixture(scope="module")
def gpus(node: Node, plane: NodePlane, plugin: str) -> Iterator[GpuNode]:
    """The kubelet, the plugin on NVML with the sharing gates, the probe image imported."""
    root = driver_root(
        node, str(node.base / "driver" / "root") if plugin == "process" else DRIVER_ROOT_IN_PLUGIN
    )
    entries = [*images.busybox_entries(), *(images.Entry(f"/bin/{a}", link="busybox") for a in IMAGE_APPLETS)]
    smi = root.local("/usr/bin/nvidia-smi")
    node.import_image(images.build(node.base / "images" / "quickstart.tar", IMAGE, [
        *entries, *images.host_libraries(smi)]))  # fmt: skip
    if plugin == "chart":
        yield from chart_plugin(node, plane, root)
        return
    smi_log = node.base / "driver" / "nvidia-smi.log"
    source = ["--device-source", "nvml", "--nvidia-driver-root", str(root.path)]
    env = {"FEATURE_GATES": GATES, "IMAGE_NAME": IMAGE, "FAKE_NVIDIA_SMI_LOG": str(smi_log)}

    def process(on: Node, cluster: Cluster) -> Any:
        return start_plugin(on, cluster, source, {**env, "NAMESPACE": cluster.namespace}, in_node=True)

    with gpu_node(node, plane, source, plugin=process) as cluster:
        log = node.logs_dir / "plugin.log"
        yield GpuNode(node, cluster, smi_log, lambda: log.read_text(errors="replace"), plugin)


def chart_plugin(node: Node, plane: NodePlane, root: FakeRoot) -> Iterator[GpuNode]:
    """The chart's DaemonSet runs the plugin (the driver image, built without Docker), as in
    test_chart_daemonset.py, with the gates TimeSlicingSettings and MPSSupport; the fake nvidia-smi records
    into the plugin's data folder (the plugin container's environment names it)."""
    image = driver_image()
    node.import_image(image)
    join(node, plane)
    data = f"plugins/{facts.DRIVER_NAME}/nvidia-smi.log"
    with Cluster.for_test(plane, "quickstart-chart") as cluster:
        values = {
            "image": {"repository": image.name.rsplit(":", 1)[0], "digest": image.digest},
            "deviceSource": {"type": "nvml"},
            "nvidiaDriverRoot": str(root.path),
            "featureGates": {gate.split("=")[0]: True for gate in GATES.split(",")},
            "kubeletPlugin": {
                "extraEnv": [{"name": "FAKE_NVIDIA_SMI_LOG", "value": f"{KUBELET_ROOT}/{data}"}]
            },
        }
        with release(plane, node, cluster.namespace, values):
            pod = plugin_pod(cluster, node)
            assert wait_until(lambda: cluster.slices_of(node.name), timeout=60), plugin_log(node, pod)
            yield GpuNode(node, cluster, node.base / "kubelet" / data, lambda: plugin_log(node, pod), "chart")


def pods_running(cluster: Cluster, namespace: str, count: int) -> list[dict[str, Any]]:
    def running() -> list[dict[str, Any]]:
        pods = cluster.api.items(f"/api/v1/namespaces/{namespace}/pods")
        return pods if len(pods) == count and all(is_running(p) for p in pods) else []

    found: list[dict[str, Any]] = wait_until(running, timeout=120)
    if not found:
        pods = cluster.api.items(f"/api/v1/namespaces/{namespace}/pods")
        why = {p["metadata"]["name"]: cluster.why_pending(namespace, p["metadata"]["name"]) for p in pods}
        raise AssertionError(f"{namespace}: {count} pods not Running: {why}")
    return found


def claims_of(cluster: Cluster, pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The pod's claims by their name in the pod: a claim of the namespace, or the one made from a
    template (the pod's status names it)."""
    made = {s["name"]: s.get("resourceClaimName") for s in pod["status"].get("resourceClaimStatuses") or []}
    namespace = pod["metadata"]["namespace"]
    claims = {}
    for ref in pod["spec"]["resourceClaims"]:
        name = ref.get("resourceClaimName") or made[ref["name"]]
        path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
        claims[ref["name"]] = cluster.api.get(path)
    return claims


def unreported(cluster: Cluster, namespace: str) -> dict[str, list[str]]:
    """The namespace's claims whose allocated devices lack a `Ready=True` entry of ours in `status.devices`:
    claim name -> those devices."""
    missing: dict[str, list[str]] = {}
    for claim in cluster.api.items(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"):
        status = claim.get("status") or {}
        ready = {
            (e["pool"], e["device"])
            for e in status.get("devices") or []
            if e["driver"] == facts.DRIVER_NAME
            and any(c["type"] == "Ready" and c["status"] == "True" for c in e.get("conditions") or [])
        }
        results = (status.get("allocation") or {}).get("devices", {}).get("results") or []
        lacking = [r["device"] for r in results if (r["pool"], r["device"]) not in ready]
        if lacking:
            missing[claim["metadata"]["name"]] = lacking
    return missing


def minors_of(container: dict[str, Any], claims: dict[str, dict[str, Any]]) -> list[int]:
    """The GPU minors allocated to the container's claims (their requests it names, or all)."""
    minors = []
    for ref in container["resources"]["claims"]:
        for result in claims[ref["name"]]["status"]["allocation"]["devices"]["results"]:
            assert result["driver"] == facts.DRIVER_NAME
            if ref.get("request") in (None, result["request"]):
                minors.append(int(result["device"].removeprefix("gpu-")))
    return sorted(minors)


def sees_exactly(lines: list[str], minors: list[int], claim_uid: str, name: str) -> None:
    """The container's probe output names exactly the GPUs `minors`, and the spec's environment."""
    nodes = sorted(line for line in lines if line.startswith("node /dev/nvidia") and line[16:].isdigit())
    assert nodes == sorted(f"node /dev/nvidia{m}" for m in minors), f"{name}: {lines}"
    assert "node /dev/nvidiactl" in lines, f"{name}: {lines}"
    smi = [line for line in lines if line.startswith("smi ")]
    assert smi == [f"smi GPU {i}: {PRODUCT} (UUID: {UUIDS[m]})" for i, m in enumerate(minors)], (
        f"{name}: {lines}"
    )
    assert "env NVIDIA_VISIBLE_DEVICES=void" in lines, f"{name}: {lines}"
    # a claim answered from the node's base spec carries no claim UID; one with a spec of its own, its own
    claim_env = [line for line in lines if line.startswith("env DRA_RESOURCE_CLAIM_UID=")]
    assert claim_env in ([], [f"env DRA_RESOURCE_CLAIM_UID={claim_uid}"]), f"{name}: {lines}"


def settings(calls: list[str], uuids: set[str]) -> dict[str, dict[str, str]]:
    """The last compute mode and time-slice nvidia-smi was told for each GPU of `uuids`."""
    state: dict[str, dict[str, str]] = {uuid: {} for uuid in uuids}
    for call in calls:
        uuid, what, value = call.split()
        if uuid in state:
            state[uuid][what] = value
    return state


def node_mounts(node: Node) -> dict[str, str]:
    """The node's mount points (in its mount namespace) and their filesystem types."""
    mounts = {}
    for line in Path(f"/proc/{node.pid1}/mountinfo").read_text().splitlines():
        fields, _, rest = line.partition(" - ")
        mounts[fields.split()[4]] = rest.split()[0]
    return mounts


def mps_daemon(gpu: GpuNode, claim_uid: str, uuid: str, names: list[str]) -> None:
    """The claim's control daemon runs on the node: its Deployment Ready, its pod on this node, and its log
    has the claim's settings and a line from each container through the pipe."""
    cluster, node = gpu.cluster, gpu.node
    deployments = cluster.api.items(f"/apis/apps/v1/namespaces/{cluster.namespace}/deployments")
    [daemon] = [
        d for d in deployments if d["metadata"]["name"].startswith(f"mps-control-daemon-{claim_uid}-")
    ]
    assert daemon["status"].get("readyReplicas") == 1, daemon["status"]
    [pod] = cluster.pods(f"app={daemon['metadata']['name']}")
    assert pod["spec"]["nodeName"] == node.name and is_running(pod)
    ident = daemon["metadata"]["name"].removeprefix("mps-control-daemon-")
    mps_root = node.base / "kubelet" / "plugins" / facts.DRIVER_NAME / "mps" / ident
    # the shm tmpfs the plugin mounted is the node's (through the chart: Bidirectional from its container),
    # under the kubelet's root as the node sees it, or the folder of this machine bound there
    shm = [str(mps_root / "shm"), f"{KUBELET_ROOT}/plugins/{facts.DRIVER_NAME}/mps/{ident}/shm"]
    mounts = node_mounts(node)
    assert "tmpfs" in (mounts.get(shm[0]), mounts.get(shm[1])), {p: mounts[p] for p in mounts if "/mps/" in p}
    log = mps_root / "log" / "control.log"
    expected = [
        f"Starting control daemon using socket {MPS_PIPE}/control",
        "Cmd:set_default_active_thread_percentage 50",
        f"Cmd:set_default_device_pinned_mem_limit {uuid} 10240M",
        *(f"Cmd:client {name}" for name in names),
    ]

    def logged() -> list[str]:
        text = log.read_text() if log.exists() else ""
        return [line for line in expected if line not in text]

    assert wait_until(lambda: not logged(), timeout=30), f"{log}: lacks {logged()}"
    daemon_out = node.crictl(
        "logs", container_id(node, cluster.namespace, pod["metadata"]["name"], "mps-control-daemon")
    )
    assert "Cmd:set_default_active_thread_percentage 50" in daemon_out.stdout + daemon_out.stderr


def teardown(gpu: GpuNode, namespace: str, claim_uids: set[str], unprepared: int, shape: Shape) -> None:
    """Delete the namespace: the kubelet finishes its pods and has every claim unprepared."""
    cluster, node = gpu.cluster, gpu.node
    cluster.api.request("DELETE", f"/api/v1/namespaces/{namespace}")
    gone = wait_until(lambda: get_or_none(cluster.plane, f"/api/v1/namespaces/{namespace}") is None, 180)
    assert gone, f"namespace {namespace} was not deleted:\n{node.logs()}"
    assert gpu.plugin_logged("unprepared claim") == unprepared + shape.claims
    specs = [p.name for p in node.cdi_dir.iterdir() if any(uid in p.name for uid in claim_uids)]
    assert specs == [], "the claims' CDI specs stay"
    if shape.mps:
        deployments = f"/apis/apps/v1/namespaces/{cluster.namespace}/deployments"
        daemons = [
            d for d in cluster.api.items(deployments) if d["metadata"]["name"].startswith("mps-control")
        ]
        assert daemons == [], "the MPS control daemon stays"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_quickstart_shape_runs_and_each_container_sees_exactly_its_gpus(
    gpus: GpuNode, shape: str, plane: NodePlane
) -> None:
    expected = SHAPES[shape]
    cluster, node = gpus.cluster, gpus.node
    objects = manifests(shape, node.name)
    [namespace] = [o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"]
    calls_before = len(gpus.smi_calls())
    unprepared = gpus.plugin_logged("unprepared claim")
    cluster.apply(objects[0])
    account = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
    assert wait_until(lambda: get_or_none(cluster.plane, account), timeout=30), "no default service account"
    for obj in objects[1:]:
        cluster.apply(obj)
    pods = pods_running(cluster, namespace, expected.pods)
    seen: dict[str, list[int]] = {}
    claim_uids: set[str] = set()
    for pod in pods:
        claims = claims_of(cluster, pod)
        claim_uids |= {c["metadata"]["uid"] for c in claims.values()}
        for container in pod["spec"]["containers"]:
            name = f"{pod['metadata']['name']}/{container['name']}"
            minors = minors_of(container, claims)
            [claim] = [claims[ref["name"]] for ref in container["resources"]["claims"]]
            lines = output_of(node, container_id(node, namespace, pod["metadata"]["name"], container["name"]))
            sees_exactly(lines, minors, claim["metadata"]["uid"], name)
            if expected.mps:
                assert f"env CUDA_MPS_PIPE_DIRECTORY={MPS_PIPE}" in lines, lines
                assert f"mps pipe {MPS_PIPE}/control" in lines and "shm cuda.shm.mps-control" in lines, lines
                assert f"mps sent {container['name']}" in lines, lines
            else:
                assert not any(line.startswith("env CUDA_MPS_") for line in lines), lines
            seen[name] = minors
    assert len(seen) == expected.containers and len(claim_uids) == expected.claims
    # each claim reports its prepared devices, whatever client created it (the API server keeps these
    # claims' device config as a Python client sent it, whitespace and all)
    lacking = wait_until(lambda: not unreported(cluster, namespace) or None, timeout=30)
    assert lacking, (
        f"claims without their status.devices: {unreported(cluster, namespace)}\n{gpus.plugin_log()}"
    )
    used = {m for minors in seen.values() for m in minors}
    assert all(len(m) == 1 for m in seen.values()) and len(used) == expected.gpus, seen
    uuids = {UUIDS[m] for m in used}
    state = settings(gpus.smi_calls()[calls_before:], uuids)
    for uuid in uuids:
        assert state[uuid].get("compute-mode") == expected.compute_mode, state
        assert state[uuid].get("timeslice") == expected.timeslice, state
    if expected.mps:
        [uid], [uuid] = claim_uids, uuids
        mps_daemon(gpus, uid, uuid, sorted(c["name"] for c in pods[0]["spec"]["containers"]))
    teardown(gpus, namespace, claim_uids, unprepared, expected)
    after = settings(gpus.smi_calls()[calls_before:], uuids)
    for uuid in uuids:  # the GPUs are given back as they were
        assert after[uuid].get("compute-mode") == "DEFAULT", after
        assert after[uuid].get("timeslice") in (None, "0"), after
    FIGURES.append(
        f"{plane.label}, plugin {gpus.plugin}: quickstart {shape}: "
        f"{expected.pods} pod(s), {expected.containers} container(s), {expected.gpus} GPU(s): Running"
    )


def test_every_manifest_has_its_expectations() -> None:
    assert sorted(p.stem for p in QUICKSTART.glob("*.yaml")) == sorted(SHAPES)
