"""A reboot of the node while a GPU pod runs, on the real kubelet: every process stops at once (kubelet,
containerd, the containers, the plugin), containerd's runtime state and the CDI folder are emptied, and the
boot id changes (`Node.reboot`). When everything starts again, the kubelet starts the pod's containers anew,
and the plugin, seeing the new boot id, writes the prepared claim's CDI spec back before serving, so the
new container gets the same GPU (the kubelet's checkpoint says the claim is prepared; nothing else would
write the spec again).
"""

from __future__ import annotations

import signal

from tests.integration.cluster import Cluster
from tests.integration.controlplane import wait_until

from . import images
from .kube import BUSYBOX, NodePlane, is_running, kubelet_of, when
from .node import FIGURES, Node
from .test_dra import GPUS, SIMULATED_PROBE, claim_pod, output_of, run_claim_pod, start_plugin


def test_after_a_reboot_the_pod_comes_back_with_its_gpu(node: Node, plane: NodePlane) -> None:
    kubelet_of(plane.kubelet)
    node.import_image(images.build(node.base / "images" / "busybox.tar", BUSYBOX, images.busybox_entries()))
    source = ["--device-source", "simulated", "--simulated-gpus", str(GPUS)]
    source += ["--boot-id-path", str(node.boot_id_file)]

    def reboot(cluster: Cluster, cid: str) -> None:
        path = f"/api/v1/namespaces/{cluster.namespace}/pods/gpu-pod"
        before = output_of(node, cid)
        [result] = cluster.claim_of(cluster.api.get(path))["status"]["allocation"]["devices"]["results"]
        claim_specs = sorted(p.name for p in node.cdi_dir.iterdir())
        assert claim_specs, "the claim's CDI spec is in the CDI folder"
        [plugin] = [p for p in cluster.processes if p.poll() is None]
        plugin.send_signal(signal.SIGKILL)  # the power goes: no clean stop for anyone
        plugin.wait(10)
        node.reboot()
        assert not any(node.cdi_dir.iterdir()), "the CDI folder is emptied by the reboot"
        start_plugin(node, cluster, source)

        def restarted() -> dict | None:
            pod = when(is_running, cluster.api.get(path))
            statuses = (pod or {}).get("status", {}).get("containerStatuses", [])
            fresh = [s for s in statuses if s.get("containerID", "") not in ("", f"containerd://{cid}")]
            return pod if fresh and fresh[0].get("ready") else None

        pod = wait_until(restarted, timeout=180)
        assert pod, f"the pod did not come back: {cluster.api.get(path)['status']}\n{node.logs()}"
        [state] = pod["status"]["containerStatuses"]
        new_cid = state["containerID"].removeprefix("containerd://")
        after = output_of(node, new_cid)
        gpu = [line for line in before if line.startswith("GPU_DEVICE_") and "_UUID=" not in line]
        assert gpu == [f"GPU_DEVICE_{result['device'].removeprefix('gpu-')}={result['device']}"], before
        assert [line for line in after if line.startswith("GPU_DEVICE_") and "_UUID=" not in line] == gpu, (
            after
        )
        assert sorted(p.name for p in node.cdi_dir.iterdir()) == claim_specs, "the plugin wrote them back"
        log = (node.logs_dir / "plugin.log").read_text(errors="replace")
        assert "reboot" in log.lower(), log[-2000:]

    pod = claim_pod("one-gpu", node.name, BUSYBOX, SIMULATED_PROBE)
    run_claim_pod(node, plane, source, pod, during=reboot)
    FIGURES.append(f"{plane.label}: a GPU pod came back with its GPU after a reboot")
