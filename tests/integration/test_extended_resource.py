"""A classic pod (`resources.limits: nvidia.com/gpu: 1`, no claim) against the real control plane.

The chart's DeviceClass gpu.nvidia.com maps `nvidia.com/gpu` (`spec.extendedResourceName`, the same object
as core's `DeviceClassSpec.manifest(extended_resource=True)`). On 1.37 (KEP-5004's DRAExtendedResource, GA)
the real kube-scheduler makes a ResourceClaim for the pod on a node that does not advertise
nvidia.com/gpu itself, allocates one of the plugin's simulated GPUs, binds the pod, and the claim prepares
through the kubelet-like client with the driver's CDI ids; the claim has the shape
tests/driver/allocation/test_extended_resource_claim.py models. 1.38 does the same. On 1.34 (the gate alpha,
off) the same manifests: the server drops the field and the pod stays Pending. On 1.37 and 1.38 alike a
NoExecute DeviceTaintRule on the GPU evicts such a pod (the real v1.37.2 and v1.38.0-beta.0 device-taint
eviction controllers both do).
"""

from __future__ import annotations

from typing import Any

from vke_gpu_dra.cdi import base_device_id
from vke_gpu_dra_core import facts
from vke_gpu_dra_testing.kubelet_client import Kubelet

from .cluster import JSON, Cluster
from .controlplane import wait_until
from .test_health import RULES, eviction_condition, taint_rule

GPU_CLASS = f"/apis/resource.k8s.io/v1/deviceclasses/{facts.DEVICE_CLASS_GPU.name}"


def classic_pod(name: str, node: str) -> dict[str, Any]:
    """The pod as a workload written for NVIDIA's device plugin asks for a GPU (pinned to the test's node)."""
    limits = {facts.GPU_EXTENDED_RESOURCE: "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "test", "image": "busybox", "resources": {"limits": limits}}],
        },
    }


def install(cluster: Cluster) -> list[JSON]:
    """The chart; its gpu.nvidia.com DeviceClass is the program's (core's) object with the mapping."""
    objects = cluster.install_chart()
    [rendered] = [
        o
        for o in objects
        if o["kind"] == "DeviceClass" and o["metadata"]["name"] == facts.DEVICE_CLASS_GPU.name
    ]
    assert {k: rendered[k] for k in ("apiVersion", "kind", "spec")} == {
        k: v for k, v in facts.DEVICE_CLASS_GPU.manifest(extended_resource=True).items() if k != "metadata"
    }
    assert rendered["spec"]["extendedResourceName"] == facts.GPU_EXTENDED_RESOURCE
    return objects


def test_classic_gpu_pod_gets_one_of_our_gpus_on_137_and_138(newest_clusters: Cluster) -> None:
    cluster = newest_clusters
    objects = install(cluster)
    assert cluster.api.get(GPU_CLASS)["spec"]["extendedResourceName"] == facts.GPU_EXTENDED_RESOURCE
    plugin, node = cluster.driver_on_new_node(gpus=2, objects=objects)
    name = node["metadata"]["name"]
    assert facts.GPU_EXTENDED_RESOURCE not in node["status"]["allocatable"]

    cluster.apply(classic_pod("classic", name))
    pod = cluster.wait_scheduled(cluster.namespace, "classic")
    assert pod["spec"]["nodeName"] == name
    pod = wait_until(
        lambda: (
            (p := cluster.api.get(f"/api/v1/namespaces/{cluster.namespace}/pods/classic"))["status"].get(
                "extendedResourceClaimStatus"
            )
            and p
        ),
        timeout=30,
    )
    assert pod, "the pod's status.extendedResourceClaimStatus was not recorded"
    status = pod["status"]["extendedResourceClaimStatus"]
    assert status["requestMappings"] == [
        {
            "containerName": "test",
            "resourceName": facts.GPU_EXTENDED_RESOURCE,
            "requestName": "container-0-request-0",
        }
    ]
    assert not pod["status"].get("resourceClaimStatuses")

    claim = cluster.claim_of(pod)
    meta = claim["metadata"]
    assert meta["name"].startswith("classic-extended-resources-")
    assert meta["annotations"][facts.EXTENDED_RESOURCE_CLAIM_ANNOTATION] == "true"
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Pod",
        "classic",
        pod["metadata"]["uid"],
        True,
    )
    [request] = claim["spec"]["devices"]["requests"]
    assert request["name"] == "container-0-request-0"
    assert (request["exactly"]["deviceClassName"], request["exactly"]["count"]) == (
        facts.DEVICE_CLASS_GPU.name,
        1,
    )
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["request"]) == (
        facts.DRIVER_NAME,
        name,
        "container-0-request-0",
    )
    assert result["device"] in {"gpu-0", "gpu-1"}
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "classic", "uid": pod["metadata"]["uid"]}
    ]

    kubelet = Kubelet(plugin.registration_socket)
    try:
        kubelet.register()
        ref = (cluster.namespace, meta["name"], meta["uid"])
        prepared = kubelet.prepare([ref])
        assert prepared[meta["uid"]]["error"] == "", plugin.log
        [device] = prepared[meta["uid"]]["devices"]
        assert (device["pool_name"], device["device_name"]) == (name, result["device"])
        assert device["request_names"] == ["container-0-request-0"]
        assert device["cdi_device_ids"] == [base_device_id(result["device"])]  # no edits of its own
        assert kubelet.unprepare([ref]) == {meta["uid"]: ""}
    finally:
        kubelet.close()
    code, log = plugin.stop()
    assert code == 0, log


def test_the_same_manifests_change_nothing_on_134(cluster_134: Cluster) -> None:
    cluster = cluster_134
    objects = install(cluster)
    assert "extendedResourceName" not in cluster.api.get(GPU_CLASS)["spec"], "1.34 drops the field"
    plugin, node = cluster.driver_on_new_node(gpus=2, objects=objects)
    name = node["metadata"]["name"]

    cluster.apply(classic_pod("classic", name))
    insufficient = f"Insufficient {facts.GPU_EXTENDED_RESOURCE}"
    pending = wait_until(
        lambda: insufficient in cluster.why_pending(cluster.namespace, "classic"), timeout=60
    )
    assert pending, cluster.why_pending(cluster.namespace, "classic")
    pod = cluster.api.get(f"/api/v1/namespaces/{cluster.namespace}/pods/classic")
    assert pod["spec"].get("nodeName") is None
    assert not pod["status"].get("extendedResourceClaimStatus")
    assert cluster.api.items(f"/apis/resource.k8s.io/v1/namespaces/{cluster.namespace}/resourceclaims") == []
    code, log = plugin.stop()
    assert code == 0, log


def test_a_no_execute_device_taint_rule_evicts_a_classic_gpu_pod(newest_clusters: Cluster) -> None:
    """A pod that got its GPU through the extended resource (no claim of its own: the scheduler's claim)
    is evicted by a NoExecute DeviceTaintRule on that GPU, as a pod with a claim is (docs/health.md)."""
    cluster = newest_clusters
    objects = install(cluster)
    plugin, node = cluster.driver_on_new_node(gpus=2, objects=objects)
    name = node["metadata"]["name"]
    cluster.apply(classic_pod("classic", name))
    cluster.wait_scheduled(cluster.namespace, "classic")
    path = f"/api/v1/namespaces/{cluster.namespace}/pods/classic"
    pod = wait_until(
        lambda: (p := cluster.api.get(path))["status"].get("extendedResourceClaimStatus") and p, timeout=30
    )
    assert pod, "the pod's status.extendedResourceClaimStatus was not recorded"
    [result] = cluster.claim_of(pod)["status"]["allocation"]["devices"]["results"]

    cluster.apply(taint_rule("drain", name, result["device"], "NoExecute"))
    evicted = wait_until(
        lambda: not cluster.api.exists(path) or cluster.api.get(path)["metadata"].get("deletionTimestamp"),
        60,
    )
    assert evicted, (cluster.api.get(f"{RULES}/drain"), cluster.api.get(path)["status"])
    condition = wait_until(lambda: eviction_condition(cluster, "drain", "Completed"), 60)
    assert condition, cluster.api.get(f"{RULES}/drain")
    code, log = plugin.stop()
    assert code == 0, log
