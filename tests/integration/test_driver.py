"""The kubelet plugin process (simulated GPUs) against the real API server, with the token kubelet would mount
into its pod: the slices it publishes are accepted, a deleted one comes back, and a claim the real
kube-scheduler allocated is prepared through the kubelet-like client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from vke_gpu_dra_core import facts
from vke_gpu_dra_testing.kubelet_client import Kubelet

from .cluster import TEST_LABEL, Cluster, Plugin
from .controlplane import wait_until

GPUS = 4


def claim_template(name: str, count: int = 1) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": facts.DEVICE_CLASS_GPU.name, "count": count}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def gpu_pod(name: str, namespace: str, template: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {TEST_LABEL: namespace},
            "containers": [{"name": "ctr", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        },
    }


def start_on_node(cluster: Cluster, suffix: str = "gpu") -> tuple[Plugin, dict[str, Any]]:
    """The chart, a Ready node, the plugin's pod Running there and the plugin process with its pod's token;
    returns once its slice is published."""
    objects = cluster.install_chart()
    node = cluster.add_node(suffix)
    name = node["metadata"]["name"]
    pod = cluster.plugin_pod(objects, name)
    [service_account] = [o for o in objects if o["kind"] == "ServiceAccount"]
    plugin = cluster.start_plugin(name, cluster.token(service_account["metadata"]["name"], pod), gpus=GPUS)
    published = wait_until(lambda: cluster.slices_of(name) or plugin.process.poll() is not None, timeout=60)
    assert published and plugin.process.poll() is None, f"no slice published:\n{plugin.log}"
    return plugin, node


def test_published_slice_is_accepted_and_restored_after_deletion(cluster: Cluster) -> None:
    plugin, node = start_on_node(cluster)
    name = node["metadata"]["name"]
    [published] = cluster.slices_of(name)
    spec = published["spec"]
    assert spec["driver"] == facts.DRIVER_NAME and spec["pool"]["name"] == name
    assert len(spec["devices"]) == GPUS
    assert published["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]

    cluster.api.delete(f"/apis/resource.k8s.io/v1/resourceslices/{published['metadata']['name']}")
    restored = wait_until(
        lambda: [s for s in cluster.slices_of(name) if s["metadata"]["uid"] != published["metadata"]["uid"]],
        timeout=60,
    )
    assert restored, f"the deleted slice was not published again:\n{plugin.log}"
    assert [d["name"] for d in restored[0]["spec"]["devices"]] == [d["name"] for d in spec["devices"]]
    code, log = plugin.stop()
    assert code == 0, log
    assert cluster.slices_of(name), "slices stay when the plugin stops"


def test_claim_allocated_by_the_scheduler_is_prepared(each_cluster: Cluster) -> None:
    """On 1.37 and on 1.34: the same slices, claims and allocation."""
    cluster = each_cluster
    plugin, node = start_on_node(cluster)
    name = node["metadata"]["name"]
    cluster.apply(claim_template("single-gpu"))
    cluster.apply(gpu_pod("gpu-test", cluster.namespace, "single-gpu"))
    pod = cluster.wait_scheduled(cluster.namespace, "gpu-test")
    assert pod["spec"]["nodeName"] == name
    [claim_status] = pod["status"]["resourceClaimStatuses"]
    claim_path = f"/apis/resource.k8s.io/v1/namespaces/{cluster.namespace}/resourceclaims/"
    claim = cluster.api.get(claim_path + claim_status["resourceClaimName"])
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"]) == (facts.DRIVER_NAME, name)
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "gpu-test", "uid": pod["metadata"]["uid"]}
    ]

    kubelet = Kubelet(plugin.registration_socket)
    try:
        kubelet.register()
        uid = claim["metadata"]["uid"]
        prepared = kubelet.prepare([(cluster.namespace, claim["metadata"]["name"], uid)])
        assert prepared[uid]["error"] == "", plugin.log
        [device] = prepared[uid]["devices"]
        assert (device["pool_name"], device["device_name"]) == (name, result["device"])
        assert device["cdi_device_ids"], device
        assert kubelet.unprepare([(cluster.namespace, claim["metadata"]["name"], uid)]) == {uid: ""}
    finally:
        kubelet.close()
    code, log = plugin.stop()
    assert code == 0, log


def test_a_claim_larger_than_the_node_stays_pending(cluster: Cluster) -> None:
    start_on_node(cluster)
    cluster.apply(claim_template("too-many", GPUS + 1))
    cluster.apply(gpu_pod("greedy", cluster.namespace, "too-many"))
    reason = wait_until(
        lambda: "Unschedulable" in cluster.why_pending(cluster.namespace, "greedy"), timeout=60
    )
    assert reason, cluster.why_pending(cluster.namespace, "greedy")
    assert (
        cluster.api.get(f"/api/v1/namespaces/{cluster.namespace}/pods/greedy")["spec"].get("nodeName") is None
    )


# --- resource.kubernetes.io/numaNode ---

SAME_NUMA_SAMPLE = Path(__file__).resolve().parents[2] / "driver/docs/samples/gpu-nic-same-numa.yaml"
#: The NIC driver of the sample: its slice is published by the test, as another driver would.
NIC_DRIVER = "nic.example.com"


def nic_objects(node: str, numa_node: int) -> list[dict[str, Any]]:
    """The sample's NIC: a DeviceClass and one NIC on `node` on NUMA node `numa_node`."""
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": NIC_DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{NIC_DRIVER}'"}}]},
    }
    nic_slice = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-nic"},
        "spec": {
            "driver": NIC_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "nic-0", "attributes": {facts.ATTR_NUMA_NODE: {"int": numa_node}}}],
        },
    }
    return [device_class, nic_slice]


def test_a_gpu_and_a_nic_on_one_numa_node_and_two_gpus_on_one(each_cluster: Cluster) -> None:
    """numaNode is only an attribute name to the server, so 1.34 and 1.37 alike: the plugin publishes it
    (`--simulated-numa-nodes`; -1 publishes none), and the real scheduler gives the docs' sample claim (a
    GPU and another driver's NIC, `matchAttribute: resource.kubernetes.io/numaNode`) the one GPU on the
    NIC's node, and a claim for two GPUs on one node the only such pair."""
    cluster = each_cluster
    numa = ["--simulated-numa-nodes", "0,0,1,-1"]
    plugin, node = cluster.driver_on_new_node("numa", gpus=4, extra_args=numa)
    name = node["metadata"]["name"]
    devices = {d["name"]: d for s in cluster.slices_of(name) for d in s["spec"]["devices"]}
    assert {n: d["attributes"].get(facts.ATTR_NUMA_NODE) for n, d in devices.items()} == {
        "gpu-0": {"int": 0}, "gpu-1": {"int": 0}, "gpu-2": {"int": 1}, "gpu-3": None,
    }  # fmt: skip

    for obj in nic_objects(name, numa_node=1):
        cluster.apply(obj)
    template, pod = yaml.safe_load_all(SAME_NUMA_SAMPLE.read_text())
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": name}
    cluster.apply(template)
    cluster.apply(pod)
    scheduled = cluster.wait_scheduled(cluster.namespace, pod["metadata"]["name"])
    results = cluster.claim_of(scheduled)["status"]["allocation"]["devices"]["results"]
    assert {r["request"]: (r["driver"], r["device"]) for r in results} == {
        "gpu": (facts.DRIVER_NAME, "gpu-2"), "nic": (NIC_DRIVER, "nic-0"),
    }  # fmt: skip

    pair = claim_template("gpu-pair", count=2)
    pair["spec"]["spec"]["devices"]["constraints"] = [{"matchAttribute": facts.ATTR_NUMA_NODE}]
    cluster.apply(pair)
    cluster.apply(gpu_pod("pair", cluster.namespace, "gpu-pair"))
    scheduled = cluster.wait_scheduled(cluster.namespace, "pair")
    results = cluster.claim_of(scheduled)["status"]["allocation"]["devices"]["results"]
    assert sorted(r["device"] for r in results) == ["gpu-0", "gpu-1"]
    code, log = plugin.stop()
    assert code == 0, log
