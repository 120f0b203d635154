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

import subprocess
import sys
from typing import Any

from vke_gpu_dra_core import facts

from tests.integration.cluster import Cluster
from tests.integration.controlplane import ADMIN_TOKEN, wait_until

from . import images
from .kube import BUSYBOX, RELEASES, NodePlane, get_or_none, is_running, kubelet_of, ready, when
from .node import FIGURES, Node

GPUS = 2


def start_plugin(node: Node, cluster: Cluster) -> subprocess.Popen[bytes]:
    kubelet_root = node.base / "kubelet"
    kubeconfig = cluster.plane.write_kubeconfig(cluster.tmp / "plugin.kubeconfig", ADMIN_TOKEN)
    args = [
        "--node-name", node.name, "--kubeconfig", str(kubeconfig),
        "--plugin-data-dir", str(kubelet_root / "plugins" / facts.DRIVER_NAME),
        "--registrar-dir", str(kubelet_root / "plugins_registry"), "--cdi-root", str(node.cdi_dir),
        "--pod-resources-socket", str(kubelet_root / "pod-resources" / "kubelet.sock"),
        "--device-source", "simulated", "--simulated-gpus", str(GPUS),
        "--healthcheck-port", "0", "--metrics-port", "0", "--log-format", "json",
    ]  # fmt: skip
    with (node.logs_dir / "plugin.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "vke_gpu_dra", *args],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    cluster.processes.append(process)  # stopped by PID with the test's cluster
    return process


def claim_pod(template: str, node: str) -> dict[str, Any]:
    probe = "env | grep -E '^(GPU_DEVICE_|NVIDIA_VISIBLE_DEVICES|DRA_RESOURCE_CLAIM_UID)' | sort; sleep 3600"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gpu-pod"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "ctr",
                    "image": BUSYBOX,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", probe],
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        },
    }


def test_the_real_kubelet_prepares_a_claim_with_our_plugin(node: Node, plane: NodePlane) -> None:
    kubelet = kubelet_of(plane.version)
    node.import_image(images.build(node.base / "images" / "busybox.tar", BUSYBOX, images.busybox_entries()))
    node.start_kubelet(kubelet, plane.server, plane.ca_file, plane.node_token(node.name))
    admin = plane.admin()
    node_path = f"/api/v1/nodes/{node.name}"
    assert wait_until(lambda: (n := get_or_none(plane, node_path)) and ready(n), timeout=90), node.logs()
    with Cluster.for_test(plane, "node-dra") as cluster:
        cluster.install_chart()
        plugin = start_plugin(node, cluster)
        slices = wait_until(lambda: cluster.slices_of(node.name) or plugin.poll() is not None, timeout=60)
        assert slices and plugin.poll() is None, f"no slice published:\n{node.logs()}"
        registered = wait_until(
            lambda: (
                '"registered with kubelet"' in (node.logs_dir / "plugin.log").read_text(errors="replace")
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
        cluster.apply(claim_pod("one-gpu", node.name))
        pods = f"/api/v1/namespaces/{cluster.namespace}/pods"
        running = wait_until(lambda: when(is_running, admin.get(f"{pods}/gpu-pod")), timeout=120)
        assert running, (
            f"the pod did not run: {cluster.why_pending(cluster.namespace, 'gpu-pod')}\n"
            f"{admin.get(f'{pods}/gpu-pod')['status']}\n{node.logs()}"
        )
        claim = cluster.claim_of(running)
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert result["driver"] == facts.DRIVER_NAME and result["pool"] == node.name
        [cid] = node.crictl("ps", "--name", "ctr", "-q").stdout.split()

        def output() -> list[str]:
            return node.crictl("logs", cid).stdout.splitlines()

        seen = wait_until(output, timeout=30)
        index = result["device"].removeprefix("gpu-")
        assert f"GPU_DEVICE_{index}={result['device']}" in seen, seen
        assert [line for line in seen if line.startswith("GPU_DEVICE_") and "_UUID=" not in line] == [
            f"GPU_DEVICE_{index}={result['device']}"
        ], "exactly the allocated GPU"
        assert "NVIDIA_VISIBLE_DEVICES=void" in seen

        cluster.api.request("DELETE", f"{pods}/gpu-pod")
        gone = wait_until(lambda: get_or_none(plane, f"{pods}/gpu-pod") is None, timeout=60)
        assert gone, f"the kubelet did not finish the pod:\n{node.logs()}"
    FIGURES.append(f"kubelet {RELEASES[plane.version]}: a DRA pod of our plugin Running and torn down")
