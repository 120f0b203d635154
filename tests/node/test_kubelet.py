"""The real kubelet on the node: it registers the Node with a real control plane of its release and runs a
pod through containerd 2.1, runc and the CNI bridge.

The control plane is the control-plane tier's (`tests/integration/controlplane.py`: etcd, kube-apiserver,
kube-scheduler, kube-controller-manager on 127.0.0.1 of the test's own namespace); the kubelet, inside the
node's namespaces, reaches it through the node's forwarder and registers with the node's own address
(192.0.2.10; the kubelet refuses a loopback one). It authenticates with the test cluster's admin token.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.controlplane import ApiError, wait_until

from . import images
from .kube import BUSYBOX, RELEASES, NodePlane, get_or_none, is_running, kubelet_of, ready, when
from .node import ADDRESS, FIGURES, GPU_POOL_LABELS, KERNEL_TUNABLES, Node


def test_the_kubelet_registers_the_node_and_runs_a_pod(node: Node, plane: NodePlane) -> None:
    kubelet = kubelet_of(plane.kubelet)
    image = images.build(node.base / "images" / "busybox.tar", BUSYBOX, images.busybox_entries())
    node.import_image(image)
    tunables = {name: (Path("/proc/sys") / name).read_text() for name in KERNEL_TUNABLES}
    begin = time.monotonic()
    node.start_kubelet(kubelet, plane.server, plane.ca_file, plane.node_token(node.name))
    admin = plane.admin()
    path = f"/api/v1/nodes/{node.name}"
    registered = wait_until(lambda: get_or_none(plane, path), timeout=90)
    assert registered, f"the kubelet did not register {node.name}:\n{node.logs()}"
    labels = registered["metadata"]["labels"]
    assert {k: labels.get(k) for k in GPU_POOL_LABELS} == GPU_POOL_LABELS
    info = registered["status"]["nodeInfo"]
    assert info["kubeletVersion"] == RELEASES[plane.kubelet]
    assert info["containerRuntimeVersion"] == "containerd://2.1.9"  # as a real node reports it
    assert {"type": "InternalIP", "address": ADDRESS} in registered["status"]["addresses"]
    # Ready once the CRI reports its network (the node's CNI bridge) ready
    node_object = wait_until(lambda: when(ready, admin.get(path)), timeout=90)
    assert node_object, f"{node.name} is not Ready:\n{admin.get(path)['status']['conditions']}\n{node.logs()}"
    registered_in = time.monotonic() - begin
    # the kubelet is its node, as the Node authorizer knows it, and nothing more
    as_node = plane.client(plane.node_token(node.name))
    assert as_node.get(path)["metadata"]["name"] == node.name
    with pytest.raises(ApiError) as refused:
        as_node.get("/api/v1/secrets")
    assert refused.value.status == 403 and f"system:node:{node.name}" in refused.value.message
    # the kernel flags the kubelet sets went to the node's own files, not to the machine
    assert {name: (Path("/proc/sys") / name).read_text() for name in KERNEL_TUNABLES} == tunables
    assert node.run(["cat", "/proc/sys/kernel/panic"]).stdout.strip() == "10", "the kubelet's value, inside"

    namespace = "default"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sleeper", "namespace": namespace},
        "spec": {
            "nodeName": node.name,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "sleeper",
                    "image": BUSYBOX,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                }
            ],
        },
    }
    pods = f"/api/v1/namespaces/{namespace}/pods"
    admin.create(pods, pod)
    try:
        running = wait_until(lambda: when(is_running, admin.get(f"{pods}/sleeper")), timeout=90)
        assert running, f"the pod did not run:\n{admin.get(f'{pods}/sleeper')['status']}\n{node.logs()}"
        assert running["status"]["podIP"].startswith("198.18.0.")
        assert running["status"]["hostIP"] == ADDRESS
        listed = node.crictl("ps", "--name", "sleeper", "-q").stdout.split()
        assert len(listed) == 1, "the container runs in the node's containerd"
    finally:
        admin.request("DELETE", f"{pods}/sleeper")
    gone = wait_until(lambda: get_or_none(plane, f"{pods}/sleeper") is None, timeout=60)
    assert gone, "the kubelet did not finish the pod's deletion"
    FIGURES.append(f"{plane.label}: Node Ready {registered_in:.1f}s after its start")
