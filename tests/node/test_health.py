"""An XID on the fake GPU while a pod uses it, on the real kubelet: the plugin's NVML watcher (the fake
libnvidia-ml's event file stands for the driver's event queue) marks the device unhealthy. Where the API
server keeps device taints (DRADeviceTaints, on by default from 1.36) its ResourceSlice entry gets the
`gpu.nvidia.com/xid` taint, elsewhere it is left out of the slice (docs/health.md). From 1.36 on
(ResourceHealthStatus, beta and on by default) the kubelet shows the device's health in the pod's
`status.containerStatuses[].allocatedResourcesStatus`, from the plugin's health stream, with the reason;
a 1.34 kubelet has the gate off, and the field stays absent there. The pod runs on throughout.
"""

from __future__ import annotations

from typing import Any

import pynvml
from vke_gpu_dra_core import dra_gates

from tests.driver import fake_driver
from tests.integration.cluster import Cluster
from tests.integration.controlplane import wait_until

from . import images
from .kube import BUSYBOX, NodePlane, kubelet_of
from .node import FIGURES, Node
from .test_containerd_cdi import PRODUCT, UUIDS
from .test_dra import GPUS, claim_pod, run_claim_pod

XID = 79  # "GPU has fallen off the bus": fatal for the device
TAINT_KEY = "gpu.nvidia.com/xid"


def _device_entry(cluster: Cluster, node: str, device: str) -> dict[str, Any]:
    for item in cluster.slices_of(node):
        for entry in item["spec"].get("devices", []):
            if entry["name"] == device:
                return dict(entry)
    return {}


def _health_of(pod: dict[str, Any], device: str) -> list[dict[str, Any]]:
    """The kubelet's health entries for `device` in the pod's container statuses."""
    found = []
    for status in pod["status"].get("containerStatuses", []):
        for resource in status.get("allocatedResourcesStatus") or []:
            found += [r for r in resource.get("resources", []) if r["resourceID"].endswith(device)]
    return found


def test_an_xid_taints_the_gpu_and_the_kubelet_shows_its_health(node: Node, plane: NodePlane) -> None:
    kubelet_of(plane.kubelet)
    fake = fake_driver.build(node.base / "driver" / "root", gpus=GPUS)
    events = node.base / "driver" / "nvml-events"
    events.touch()
    config = node.base / "driver" / "fake-nvml.conf"
    lines = [f"device_count={GPUS}", f"event_file={events}"]
    lines += [f"gpu.{i}.name={PRODUCT}\ngpu.{i}.uuid={UUIDS[i]}\ngpu.{i}.minor={i}" for i in range(GPUS)]
    config.write_text("\n".join(lines) + "\n")
    node.import_image(images.build(node.base / "images" / "busybox.tar", BUSYBOX, images.busybox_entries()))
    seen: dict[str, Any] = {}

    def xid(cluster: Cluster, cid: str) -> None:
        path = f"/api/v1/namespaces/{cluster.namespace}/pods/gpu-pod"
        [result] = cluster.claim_of(cluster.api.get(path))["status"]["allocation"]["devices"]["results"]
        device = result["device"]
        other = f"gpu-{1 - int(device.removeprefix('gpu-'))}"
        before = _health_of(cluster.api.get(path), device)
        with events.open("a") as out:
            out.write(f"{device.removeprefix('gpu-')} {pynvml.nvmlEventTypeXidCriticalError} {XID}\n")
        version = tuple(int(part) for part in plane.version.split("."))
        if dra_gates.on_by_default(dra_gates.DEVICE_TAINTS, (version[0], version[1])):
            tainted = wait_until(
                lambda: [
                    t
                    for t in _device_entry(cluster, node.name, device).get("taints", [])
                    if t["key"] == TAINT_KEY
                ],
                timeout=60,
            )
            assert tainted, f"no {TAINT_KEY} taint on {device}:\n{node.logs()}"
            [taint] = tainted
            assert (taint["value"], taint["effect"]) == (str(XID), "NoSchedule") and taint.get("timeAdded")
        else:
            gone = wait_until(lambda: not _device_entry(cluster, node.name, device), timeout=60)
            assert gone, f"{device} is still published without taints support:\n{node.logs()}"
            assert _device_entry(cluster, node.name, other), "the healthy GPU stays published"
        assert "taints" not in _device_entry(cluster, node.name, other)
        if plane.kubelet >= "1.36":
            health = wait_until(
                lambda: [h for h in _health_of(cluster.api.get(path), device) if h["health"] == "Unhealthy"],
                timeout=60,
            )
            assert health, f"the kubelet shows no health for {device}: {cluster.api.get(path)['status']}"
            seen["before"], seen["after"] = before, health
        else:
            assert _health_of(cluster.api.get(path), device) == []
        # the pod goes on: NoSchedule keeps new claims off the GPU, it evicts nothing
        [state] = cluster.api.get(path)["status"]["containerStatuses"]
        assert state["restartCount"] == 0 and state["containerID"] == f"containerd://{cid}"

    source = ["--device-source", "nvml", "--nvidia-driver-root", str(fake.path)]
    pod = claim_pod("one-gpu", node.name, BUSYBOX, "echo done")
    run_claim_pod(node, plane, source, pod, env={"FAKE_NVML_CONFIG": str(config)}, during=xid)
    if plane.kubelet >= "1.36":
        assert [h["health"] for h in seen["before"]] in ([], ["Healthy"]), seen["before"]
        assert any(f"{XID}" in h.get("message", "") for h in seen["after"]), seen["after"]
    FIGURES.append(f"{plane.label}: an XID on the GPU a running pod holds was reported")
