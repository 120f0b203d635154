"""Our kubelet plugin on the real kubelet: it registers through the kubelet's plugin watcher, the real
scheduler allocates a pod's claim from its ResourceSlice, the kubelet has the plugin prepare it, passes the
CDI device the plugin names to containerd, and the container sees exactly its GPU.

The plugin runs as a process of the test (simulated GPUs, as the control-plane tier runs it), with the
kubelet's own folders: its registration socket in the kubelet's plugins_registry, its data in the
kubelet's plugins folder, its CDI specs in the node's CDI folder (the CRI's `cdi_spec_dirs`). The chart's
objects come from `helm template` (no DaemonSet controller runs: the plugin process stands for its pod) and
the plugin authenticates with the test cluster's admin token.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from vke_gpu_dra_core import facts

from tests.driver import fake_driver
from tests.integration.cluster import Cluster
from tests.integration.controlplane import ADMIN_TOKEN, wait_until

from . import images
from .kube import BUSYBOX, NodePlane, get_or_none, is_running, kubelet_of, ready, when
from .node import FIGURES, Node
from .test_containerd_cdi import IMAGE, PROBE, PRODUCT, UUIDS, probe_image

GPUS = 2


def plugin_paths(node: Node, cluster: Cluster) -> dict[str, str]:
    """Where a plugin process standing for its DaemonSet pod finds the node: its name, a kubeconfig with
    the test cluster's admin token, and the kubelet's folders (the plugin's own data folder, the plugin
    watcher's registry, the pod-resources socket) and the node's CDI folder."""
    kubelet_root = node.base / "kubelet"
    kubeconfig = cluster.plane.write_kubeconfig(cluster.tmp / "plugin.kubeconfig", ADMIN_TOKEN)
    return {
        "node_name": node.name, "kubeconfig": str(kubeconfig), "kubelet_root": str(kubelet_root),
        "plugin_data_dir": str(kubelet_root / "plugins" / facts.DRIVER_NAME),
        "registrar_dir": str(kubelet_root / "plugins_registry"), "cdi_root": str(node.cdi_dir),
        "pod_resources_socket": str(kubelet_root / "pod-resources" / "kubelet.sock"),
    }  # fmt: skip


def spawn_plugin(
    node: Node, cluster: Cluster, argv: list[str], env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A plugin process (`argv`), its output in the node's plugin.log, stopped with the test's cluster."""
    with (node.logs_dir / "plugin.log").open("wb") as log:
        process = subprocess.Popen(
            argv, env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    cluster.processes.append(process)  # stopped by PID with the test's cluster
    return process


def start_plugin(
    node: Node,
    cluster: Cluster,
    source: list[str],
    env: dict[str, str] | None = None,
    *,
    in_node: bool = False,
) -> subprocess.Popen[bytes]:
    """Our plugin process with the kubelet's folders and the device `source` arguments. `in_node`: in the
    node's mount namespace (`nsenter -m`), so the mounts it makes (MPS's shm tmpfs) are the node's, as
    a plugin container's with Bidirectional propagation, and go with the node."""
    paths = plugin_paths(node, cluster)
    args = [
        "--node-name", paths["node_name"], "--kubeconfig", paths["kubeconfig"],
        "--plugin-data-dir", paths["plugin_data_dir"], "--registrar-dir", paths["registrar_dir"],
        "--cdi-root", paths["cdi_root"], "--pod-resources-socket", paths["pod_resources_socket"],
        *source, "--healthcheck-port", "0", "--metrics-port", "0", "--log-format", "json",
    ]  # fmt: skip
    command = [sys.executable, "-m", "vke_gpu_dra", *args]
    if in_node:
        command = ["nsenter", "-t", str(node.pid1), "-m", "--", *command]
    return spawn_plugin(node, cluster, command, env)


def claim_pod(
    template: str, node: str, image: str, probe: str, *, config: Path | None = None, name: str = "gpu-pod"
) -> dict[str, Any]:
    """A pod on `node` whose one container runs `probe` (then sleeps) with a claim from `template`;
    `config`, the fake NVML's configuration, is mounted where FAKE_NVML_CONFIG says."""
    container: dict[str, Any] = {
        "name": "ctr",
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", probe + "\nsleep 3600"],
        "resources": {"claims": [{"name": "gpu"}]},
    }
    spec: dict[str, Any] = {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 1,
        "containers": [container],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
    }
    if config is not None:
        container["env"] = [{"name": "FAKE_NVML_CONFIG", "value": "/etc/fake-nvml.conf"}]
        container["volumeMounts"] = [{"name": "nvml", "mountPath": "/etc/fake-nvml.conf", "readOnly": True}]
        spec["volumes"] = [{"name": "nvml", "hostPath": {"path": str(config), "type": "File"}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@contextmanager
def gpu_node(
    node: Node,
    plane: NodePlane,
    source: list[str],
    env: dict[str, str] | None = None,
    *,
    plugin: Callable[[Node, Cluster], subprocess.Popen[bytes]] | None = None,
) -> Iterator[Cluster]:
    """The kubelet on the node, then in a test namespace the chart's objects, the plugin (`source`,
    `env`) registered with the kubelet and its slice published, and a one-GPU claim template `one-gpu`.
    `plugin` starts another plugin binary instead of ours (its registration is seen in the kubelet's log
    only)."""
    node.start_kubelet(kubelet_of(plane.kubelet), plane.server, plane.ca_file, plane.node_token(node.name))
    node_path = f"/api/v1/nodes/{node.name}"
    assert wait_until(lambda: (n := get_or_none(plane, node_path)) and ready(n), timeout=90), node.logs()
    with Cluster.for_test(plane, "node-dra") as cluster:
        cluster.install_chart()
        process = start_plugin(node, cluster, source, env) if plugin is None else plugin(node, cluster)
        slices = wait_until(lambda: cluster.slices_of(node.name) or process.poll() is not None, timeout=60)
        assert slices and process.poll() is None, f"no slice published:\n{node.logs()}"
        registered = wait_until(
            lambda: (
                (
                    plugin is not None
                    or '"registered with kubelet"'
                    in (node.logs_dir / "plugin.log").read_text(errors="replace")
                )
                and 'driverName="gpu.nvidia.com"'
                in (node.logs_dir / "kubelet.log").read_text(errors="replace")
            ),
            timeout=60,
        )
        assert registered, f"the kubelet's plugin watcher did not register the plugin:\n{node.logs()}"
        request = {"name": "gpu", "exactly": {"deviceClassName": facts.DEVICE_CLASS_GPU.name, "count": 1}}
        template: dict[str, Any] = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate"}
        template |= {"metadata": {"name": "one-gpu"}, "spec": {"spec": {"devices": {"requests": [request]}}}}
        cluster.apply(template)
        yield cluster


def wait_running(cluster: Cluster, node: Node, name: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The pod once Running, its claim's one allocation result, and its container's id."""
    path = f"/api/v1/namespaces/{cluster.namespace}/pods/{name}"
    running = wait_until(lambda: when(is_running, cluster.api.get(path)), timeout=120)
    assert running, (
        f"pod {name} did not run: {cluster.why_pending(cluster.namespace, name)}\n"
        f"{cluster.api.get(path)['status']}\n{node.logs()}"
    )
    [result] = cluster.claim_of(running)["status"]["allocation"]["devices"]["results"]
    assert result["driver"] == facts.DRIVER_NAME and result["pool"] == node.name
    [cid] = node.crictl(
        "ps", "--name", "ctr", "--label", f"io.kubernetes.pod.name={name}", "-q"
    ).stdout.split()
    return running, result, cid


def output_of(node: Node, cid: str) -> list[str]:
    """The container's output once its probe printed `done`."""

    def output() -> list[str]:
        logs = node.crictl("logs", cid).stdout.splitlines()
        return logs if logs and logs[-1].startswith("done") else []

    return list(wait_until(output, timeout=30))


def delete_pod(cluster: Cluster, node: Node, name: str) -> None:
    path = f"/api/v1/namespaces/{cluster.namespace}/pods/{name}"
    cluster.api.request("DELETE", path)
    gone = wait_until(lambda: get_or_none(cluster.plane, path) is None, timeout=60)
    assert gone, f"the kubelet did not finish pod {name}:\n{node.logs()}"


def run_claim_pod(
    node: Node,
    plane: NodePlane,
    source: list[str],
    pod: dict[str, Any],
    *,
    env: dict[str, str] | None = None,
    during: Callable[[Cluster, str], None] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """`pod` on a gpu_node: the allocated device (the claim's allocation result) and the container's
    output once the pod runs. `during(cluster, container id)` runs then. The pod is deleted afterwards,
    and the kubelet must finish it."""
    with gpu_node(node, plane, source, env) as cluster:
        cluster.apply(pod)
        _, result, cid = wait_running(cluster, node, pod["metadata"]["name"])
        seen = output_of(node, cid)
        if during is not None:
            during(cluster, cid)
        delete_pod(cluster, node, pod["metadata"]["name"])
    return result, seen


SIMULATED_PROBE = (
    "env | grep -E '^(GPU_DEVICE_|NVIDIA_VISIBLE_DEVICES|DRA_RESOURCE_CLAIM_UID)' | sort; echo done"
)


def test_the_real_kubelet_prepares_a_claim_with_our_plugin(node: Node, plane: NodePlane) -> None:
    """Simulated GPUs: each device's CDI edits are its environment."""
    kubelet_of(plane.kubelet)
    node.import_image(images.build(node.base / "images" / "busybox.tar", BUSYBOX, images.busybox_entries()))
    pod = claim_pod("one-gpu", node.name, BUSYBOX, SIMULATED_PROBE)
    result, seen = run_claim_pod(
        node, plane, ["--device-source", "simulated", "--simulated-gpus", str(GPUS)], pod
    )
    index = result["device"].removeprefix("gpu-")
    assert [line for line in seen if line.startswith("GPU_DEVICE_") and "_UUID=" not in line] == [
        f"GPU_DEVICE_{index}={result['device']}"
    ], f"exactly the allocated GPU: {seen}"
    assert "NVIDIA_VISIBLE_DEVICES=void" in seen
    FIGURES.append(f"{plane.label}: a DRA pod of our plugin (simulated GPUs) Running and torn down")


def test_with_nvml_the_container_gets_its_gpus_device_nodes(node: Node, plane: NodePlane) -> None:
    """The fake NVIDIA driver (the fake libnvidia-ml the plugin loads from the driver root, its device
    nodes made with mknod): the claim's CDI edits give the container the allocated GPU's device node, the
    control nodes and the driver's files, nothing of the other GPU."""
    kubelet_of(plane.kubelet)
    fake = fake_driver.build(node.base / "driver" / "root", gpus=GPUS)
    config = node.base / "driver" / "fake-nvml.conf"
    lines = [f"device_count={GPUS}"]
    lines += [f"gpu.{i}.name={PRODUCT}\ngpu.{i}.uuid={UUIDS[i]}\ngpu.{i}.minor={i}" for i in range(GPUS)]
    config.write_text("\n".join(lines) + "\n")
    smi = fake.local("/usr/bin/nvidia-smi")
    node.import_image(probe_image(node.base / "images" / "probe.tar", smi))
    pod = claim_pod("one-gpu", node.name, IMAGE, PROBE + "echo done", config=config)
    source = ["--device-source", "nvml", "--nvidia-driver-root", str(fake.path)]
    result, seen = run_claim_pod(node, plane, source, pod, env={"FAKE_NVML_CONFIG": str(config)})
    own = int(result["device"].removeprefix("gpu-"))
    other = 1 - own
    assert f"node /dev/nvidia{own} character special file c3 {own:x}" in seen, seen
    assert not any(line.startswith(f"node /dev/nvidia{other} ") for line in seen)
    assert "node /dev/nvidiactl character special file c3 ff" in seen
    assert f"open /dev/nvidia{own} No such device or address" in seen
    assert "env NVIDIA_VISIBLE_DEVICES=void" in seen
    # nvidia-smi and libnvidia-ml from the driver root, through the claim's mounts
    assert any(line.startswith(f"smi GPU 0: {PRODUCT} (UUID: ") for line in seen), seen
    FIGURES.append(f"{plane.label}: a DRA pod of our plugin (NVML, device nodes) Running")


def plugin_log_count(node: Node, message: str) -> int:
    return (node.logs_dir / "plugin.log").read_text(errors="replace").count(f'"msg": "{message}"')


def test_a_kubelet_restart_keeps_the_pod_and_its_prepared_claim(node: Node, plane: NodePlane) -> None:
    """The kubelet stops and starts again while the GPU pod runs: the container goes on (same id, no
    restart), and the claim stays prepared: the kubelet's checkpoint knows it, so the plugin is not
    asked to prepare it a second time. Deleting the pod then unprepares it once."""
    kubelet_of(plane.kubelet)
    node.import_image(images.build(node.base / "images" / "busybox.tar", BUSYBOX, images.busybox_entries()))

    def restart(cluster: Cluster, cid: str) -> None:
        assert plugin_log_count(node, "prepared claim") == 1
        node.restart_kubelet()
        path = f"/api/v1/namespaces/{cluster.namespace}/pods/gpu-pod"
        since = time.time()

        def settled() -> bool:
            status = cluster.api.get(path)["status"]
            node_object = cluster.api.get(f"/api/v1/nodes/{node.name}")
            beats = [
                c["lastHeartbeatTime"] for c in node_object["status"]["conditions"] if c["type"] == "Ready"
            ]
            fresh = (
                bool(beats) and datetime.fromisoformat(beats[0].replace("Z", "+00:00")).timestamp() > since
            )
            return fresh and ready(node_object) and is_running({"status": status})

        assert wait_until(settled, timeout=90), f"the node did not come back Ready:\n{node.logs()}"
        time.sleep(3)  # the restarted kubelet's first pod syncs
        [state] = cluster.api.get(path)["status"]["containerStatuses"]
        assert state["restartCount"] == 0 and state["containerID"] == f"containerd://{cid}"
        assert node.crictl("ps", "--name", "ctr", "-q").stdout.split() == [cid]
        assert plugin_log_count(node, "prepared claim") == 1, "the kubelet asked for a second prepare"

    source = ["--device-source", "simulated", "--simulated-gpus", str(GPUS)]
    run_claim_pod(
        node, plane, source, claim_pod("one-gpu", node.name, BUSYBOX, SIMULATED_PROBE), during=restart
    )
    assert plugin_log_count(node, "unprepared claim") == 1


def test_a_containerd_restart_keeps_the_pod_and_its_prepared_claim(node: Node, plane: NodePlane) -> None:
    """containerd stops and starts again while the GPU pod runs: the container goes on under its shim,
    the kubelet reconnects, and nothing is prepared again."""
    kubelet_of(plane.kubelet)
    node.import_image(images.build(node.base / "images" / "busybox.tar", BUSYBOX, images.busybox_entries()))

    def restart(cluster: Cluster, cid: str) -> None:
        pid = json.loads(node.crictl("inspect", cid).stdout)["info"]["pid"]
        node.restart_containerd()
        path = f"/api/v1/namespaces/{cluster.namespace}/pods/gpu-pod"

        def listed() -> list[str]:
            return node.crictl("ps", "--name", "ctr", "-q", check=False).stdout.split()

        assert wait_until(listed, timeout=30) == [cid]
        assert json.loads(node.crictl("inspect", cid).stdout)["info"]["pid"] == pid, "the same process"
        time.sleep(3)  # the kubelet's next pod sync, against the restarted runtime
        status = cluster.api.get(path)["status"]
        [state] = status["containerStatuses"]
        assert is_running({"status": status}) and state["restartCount"] == 0
        assert state["containerID"] == f"containerd://{cid}"
        assert plugin_log_count(node, "prepared claim") == 1

    source = ["--device-source", "simulated", "--simulated-gpus", str(GPUS)]
    pod = claim_pod("one-gpu", node.name, BUSYBOX, SIMULATED_PROBE)
    run_claim_pod(node, plane, source, pod, during=restart)
    assert plugin_log_count(node, "unprepared claim") == 1


def test_a_deleted_pods_gpu_serves_the_next_pod(node: Node, plane: NodePlane) -> None:
    """Two GPUs, three one-GPU pods: the third waits until the first is deleted; the kubelet has the plugin
    unprepare the first pod's claim, the scheduler gives its GPU to the third pod, and the kubelet has
    it prepared for that pod."""
    kubelet_of(plane.kubelet)
    node.import_image(images.build(node.base / "images" / "busybox.tar", BUSYBOX, images.busybox_entries()))
    source = ["--device-source", "simulated", "--simulated-gpus", str(GPUS)]
    with gpu_node(node, plane, source) as cluster:
        first, second, third = (
            claim_pod("one-gpu", node.name, BUSYBOX, SIMULATED_PROBE, name=f"pod-{n}") for n in (1, 2, 3)
        )
        cluster.apply(first)
        cluster.apply(second)
        _, one, _ = wait_running(cluster, node, "pod-1")
        _, two, _ = wait_running(cluster, node, "pod-2")
        assert one["device"] != two["device"]
        cluster.apply(third)
        pending = wait_until(lambda: "cannot allocate" in cluster.why_pending(cluster.namespace, "pod-3"), 60)
        assert pending, cluster.why_pending(cluster.namespace, "pod-3")
        delete_pod(cluster, node, "pod-1")
        assert plugin_log_count(node, "unprepared claim") == 1
        _, three, cid = wait_running(cluster, node, "pod-3")
        assert three["device"] == one["device"]
        index = three["device"].removeprefix("gpu-")
        assert f"GPU_DEVICE_{index}={three['device']}" in output_of(node, cid)
        assert plugin_log_count(node, "prepared claim") == 3
