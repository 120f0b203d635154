"""The chart's DaemonSet runs the driver image as a container on the real kubelet, and the program's sample
gets exactly its GPU.

`helm install` of driver/chart (the toolchain's helm) with the driver image by digest (built from
driver/Dockerfile's recipe without Docker, imported into the node's `k8s.io` namespace), NVML as the device
source and the node's fake driver root as `nvidiaDriverRoot`; every other value is the chart's default:
the kubelet's standard folders, /var/run/cdi, the plugin's service account and its projected token. The
control plane's DaemonSet controller makes the plugin's pod; the real kubelet runs it through containerd
2.1; the plugin registers through the kubelet's plugin watcher and publishes the node's GPUs from the fake
libnvidia-ml it loads from the driver root. The sample's ResourceClaimTemplate and Deployment (the
program's own manifests, with a probe for image and command) reach Running; inside the container,
`nvidia-smi -L` (from the driver root through the claim's CDI spec) lists exactly the GPU of its claim.
Deleting the Deployment gives the GPU back: two pods then get one GPU each.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.config import SampleConfig

from components import manifests
from tests.driver import fake_driver
from tests.integration.cluster import Cluster
from tests.integration.controlplane import wait_until

from .chart import GPUS, container_id, driver_image, driver_root, kubelet_claims, output_until, release
from .kube import (
    SERVICE_ADDRESS,
    NodePlane,
    get_or_none,
    join,
    kubelet_of,
)
from .node import CDI_ROOT, FIGURES, KUBELET_ROOT, Node
from .test_containerd_cdi import IMAGE, PRODUCT, probe_image

#: What the sample's container prints: nvidia-smi's GPUs (as the program's own sample prints them), the
#: environment the CDI spec sets, its GPU nodes.
PROBE = r"""
nvidia-smi -L 2>&1
env | grep -E '^(NVIDIA_|DRA_)' | sort | sed 's/^/env /'
for dev in /dev/nvidia*; do [ -e "$dev" ] && echo "node $dev"; done
echo done
sleep 3600
"""
PLUGIN_LABEL = "app.kubernetes.io/component=kubelet-plugin"
DEVICE_CLASSES = (facts.DEVICE_CLASS_GPU.name, "mig.nvidia.com")


def sample(namespace: str, replicas: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The program's ResourceClaimTemplate and Deployment, the probe as image and command."""
    config = SampleConfig(True, namespace, IMAGE, ("sh", "-c"), (PROBE,))
    deployment = manifests.deployment(config)
    deployment["spec"]["replicas"] = replicas
    return manifests.resource_claim_template(namespace), deployment


def plugin_pod(cluster: Cluster, node: Node) -> dict[str, Any]:
    """The DaemonSet's pod on the node once Running and Ready (its gRPC health probes answer)."""

    def running() -> dict[str, Any] | None:
        for pod in cluster.pods(PLUGIN_LABEL):
            conditions = pod["status"].get("conditions") or []
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                return pod
        return None

    found: dict[str, Any] | None = wait_until(running, timeout=180)
    statuses = [p["status"] for p in cluster.pods(PLUGIN_LABEL)]
    plugin = node.crictl("ps", "-a", "--name", "^plugin$", "-q", check=False).stdout.split()
    logs = node.crictl("logs", "--tail", "30", plugin[0], check=False).stderr if plugin else "no container"
    assert found, f"the plugin's pod is not Ready: {statuses}\n--- plugin\n{logs}\n{node.logs()}"
    assert found["spec"]["nodeName"] == node.name
    return found


def plugin_log(node: Node, pod: dict[str, Any]) -> str:
    cid = container_id(node, pod["metadata"]["namespace"], pod["metadata"]["name"], "plugin")
    logs = node.crictl("logs", cid)
    return logs.stdout + logs.stderr


def sample_pods(cluster: Cluster, node: Node, replicas: int) -> list[dict[str, Any]]:
    """The sample's pods once all are Running."""
    selector = f"app={manifests.SAMPLE_DEPLOYMENT}"

    def running() -> list[dict[str, Any]]:
        pods = [p for p in cluster.pods(selector) if "deletionTimestamp" not in p["metadata"]]
        return (
            pods if len(pods) == replicas and all(p["status"].get("phase") == "Running" for p in pods) else []
        )

    pods: list[dict[str, Any]] = wait_until(running, timeout=120)
    pending = [(p["metadata"]["name"], p["status"]) for p in cluster.pods(selector)]
    assert pods, f"the sample did not run: {pending}\n{node.logs()}"
    return pods


def sees_exactly(cluster: Cluster, node: Node, pod: dict[str, Any], slices: dict[str, str]) -> str:
    """The container of `pod` lists exactly its claim's GPU (nvidia-smi, device nodes) and carries the
    CDI spec's environment; that GPU's device name."""
    claim = cluster.claim_of(pod)
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert result["driver"] == facts.DRIVER_NAME and result["pool"] == node.name
    device = result["device"]
    uuid = slices[device]
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    lines = output_until(node, container_id(node, namespace, name, manifests.SAMPLE_CONTAINER), "done")
    smi = f"GPU 0: {PRODUCT} (UUID: {uuid})"
    assert [line for line in lines if not line.startswith(("env ", "node ", "done"))] == [smi], lines
    # the same log through the API server (its egress proxy into the node, its client certificate)
    log = cluster.api.text(
        f"/api/v1/namespaces/{namespace}/pods/{name}/log?container={manifests.SAMPLE_CONTAINER}"
    )
    assert smi in log.splitlines()
    minor = int(device.removeprefix("gpu-"))
    gpu_nodes = sorted(line for line in lines if line.startswith("node /dev/nvidia") and line[-1].isdigit())
    assert gpu_nodes == [f"node /dev/nvidia{minor}"], lines
    assert "node /dev/nvidiactl" in lines
    # what NVIDIA's spec sets: no runtime hook injects GPUs again; where libcuda is (the fake root's)
    assert [line for line in lines if line.startswith("env ")] == [
        f"env NVIDIA_CTK_LIBCUDA_DIR={fake_driver.LAYOUTS['debian']}",
        "env NVIDIA_VISIBLE_DEVICES=void",
    ], lines
    return str(device)


def delete_sample(cluster: Cluster, claims: list[str]) -> None:
    """Delete the Deployment; it, its pods and their claims go (the kubelet finishes the pods)."""
    namespace = cluster.namespace
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{manifests.SAMPLE_DEPLOYMENT}"
    options = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Foreground"}
    cluster.api.request("DELETE", path, options)
    claim_paths = [f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{c}" for c in claims]

    def gone() -> bool:
        if get_or_none(cluster.plane, path) is not None or cluster.pods(f"app={manifests.SAMPLE_DEPLOYMENT}"):
            return False
        return all(get_or_none(cluster.plane, claim) is None for claim in claim_paths)

    assert wait_until(gone, timeout=90), f"the sample's pods or claims stayed: {cluster.pods()}"


def test_the_charts_daemonset_runs_the_driver_and_the_sample_sees_exactly_its_gpu(
    node: Node, plane: NodePlane
) -> None:
    kubelet_of(plane.kubelet)  # skips (one line) before anything is built where it is not there
    image = driver_image()
    host_before = {path: Path(path).exists() for path in (KUBELET_ROOT, CDI_ROOT)}
    node.import_image(image)
    root = driver_root(node)
    node.import_image(probe_image(node.base / "images" / "probe.tar", root.local("/usr/bin/nvidia-smi")))
    join(node, plane)
    service = plane.admin().get("/api/v1/namespaces/default/services/kubernetes")
    assert service["spec"]["clusterIP"] == SERVICE_ADDRESS, (
        "pods reach the API server at the Service's address"
    )
    with Cluster.for_test(plane, "chart-daemonset") as cluster:
        repository = image.name.rsplit(":", 1)[0]
        values = {
            "image": {"repository": repository, "digest": image.digest},
            "deviceSource": {"type": "nvml"},
            "nvidiaDriverRoot": str(root.path),
        }
        installed = time.monotonic()
        with release(plane, node, cluster.namespace, values):
            pod = plugin_pod(cluster, node)
            up = time.monotonic() - installed
            [container] = pod["spec"]["containers"]
            assert container["image"] == f"{repository}@{image.digest}"
            assert any(
                "serviceAccountToken" in s
                for v in pod["spec"]["volumes"]
                for s in v.get("projected", {}).get("sources", [])
            )
            # the kubelet's plugin watcher registered it; it published the node's GPUs from NVML
            kubelet_log = (node.logs_dir / "kubelet.log").read_text(errors="replace")
            assert f'driverName="{facts.DRIVER_NAME}"' in kubelet_log, node.logs()
            assert '"registered with kubelet"' in plugin_log(node, pod)
            published = wait_until(lambda: cluster.slices_of(node.name), timeout=60)
            assert published, plugin_log(node, pod)
            devices = [d for s in published for d in s["spec"].get("devices", [])]
            slices = {d["name"]: d["attributes"][facts.ATTR_UUID]["string"] for d in devices}
            assert len(slices) == GPUS, devices
            for name in DEVICE_CLASSES:
                device_class = plane.admin().get(f"/apis/resource.k8s.io/v1/deviceclasses/{name}")
                assert device_class["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
            # the program's sample: Running, exactly its GPU
            template, deployment = sample(cluster.namespace, replicas=1)
            cluster.apply(template)
            created = time.monotonic()
            cluster.apply(deployment)
            [first] = sample_pods(cluster, node, 1)
            running = time.monotonic() - created
            given = sees_exactly(cluster, node, first, slices)
            assert kubelet_claims(node) == [cluster.claim_of(first)["metadata"]["uid"]]
            delete_sample(cluster, [cluster.claim_of(first)["metadata"]["name"]])
            assert plugin_log(node, pod).count('"msg": "unprepared claim"') == 1
            assert kubelet_claims(node) == [], "the kubelet's DRA checkpoint holds no claim"
            # its GPU is back: two pods, one GPU each, both GPUs in use
            cluster.apply(sample(cluster.namespace, replicas=2)[1])
            pods = sample_pods(cluster, node, 2)
            assert sorted(sees_exactly(cluster, node, p, slices) for p in pods) == sorted(slices)
            assert given in slices
            delete_sample(cluster, [cluster.claim_of(p)["metadata"]["name"] for p in pods])
        for name in DEVICE_CLASSES:
            assert get_or_none(plane, f"/apis/resource.k8s.io/v1/deviceclasses/{name}") is None
        assert wait_until(lambda: not cluster.pods(PLUGIN_LABEL), timeout=60), "the plugin's pod stayed"
    assert {path: Path(path).exists() for path in host_before} == host_before, "the host's folders untouched"
    FIGURES.append(
        f"{plane.label}: the chart's plugin pod Ready {up:.0f}s after helm install; "
        f"the sample Running {running:.0f}s after its Deployment"
    )
