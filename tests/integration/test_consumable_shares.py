"""Two claims share one GPU's memory through the real scheduler, the plugin process publishing the slice
(simulated GPU, driver gate ConsumableShares) and preparing each share through the kubelet-like client.

1.37 (DRAConsumableCapacity beta, on): the plugin finds that the API server keeps `allowMultipleAllocations`
and `requestPolicy`, publishes the GPU as NVIDIA's gate does, the scheduler puts both pods on the one GPU
with a `shareID` each, and each share is prepared and unprepared on its own. 1.34 (the gate alpha, off):
the dry-runs show the fields dropped, the GPU is published as before, the requests' capacity is dropped,
the second claim is not allocated.
"""

from __future__ import annotations

from typing import Any

import pytest
from vke_gpu_dra import cdi
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.consumable_shares import SHARE_STEP
from vke_gpu_dra_core.quantity import quantity_value
from vke_gpu_dra_testing.kubelet_client import Kubelet

from .cluster import Cluster, Plugin
from .controlplane import wait_until
from .test_driver import claim_template, gpu_pod

PODS = ("share-a", "share-b")


def start_with_shares(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> tuple[Plugin, str, dict[str, Any]]:
    """The chart, a Ready node, the plugin (one simulated GPU, ConsumableShares on) with its pod's token;
    returns once its slice is published: the plugin, the node's name and the published GPU."""
    monkeypatch.setenv("FEATURE_GATES", "ConsumableShares=true")
    objects = cluster.install_chart()
    name = cluster.add_node("shares")["metadata"]["name"]
    pod = cluster.plugin_pod(objects, name)
    [service_account] = [o for o in objects if o["kind"] == "ServiceAccount"]
    plugin = cluster.start_plugin(name, cluster.token(service_account["metadata"]["name"], pod), gpus=1)
    published = wait_until(lambda: cluster.slices_of(name) or plugin.process.poll() is not None, timeout=60)
    assert published and plugin.process.poll() is None, f"no slice published:\n{plugin.log}"
    [gpu] = cluster.slices_of(name)[0]["spec"]["devices"]
    return plugin, name, gpu


def claims_of(cluster: Cluster, pod: dict[str, Any]) -> dict[str, Any]:
    [status] = pod["status"]["resourceClaimStatuses"]
    path = f"/apis/resource.k8s.io/v1/namespaces/{cluster.namespace}/resourceclaims/"
    return dict(cluster.api.get(path + status["resourceClaimName"]))


def test_two_claims_share_one_gpu_each_prepared(
    each_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = each_cluster
    shared = cluster.plane.release >= (1, 37)  # DRAConsumableCapacity on (1.37 beta, 1.38 GA); 1.34 off
    plugin, node, gpu = start_with_shares(cluster, monkeypatch)
    memory = gpu["capacity"][facts.CAPACITY_MEMORY]
    detected = "ResourceSlice fields this API server keeps"
    assert detected in plugin.log
    if shared:
        assert gpu["allowMultipleAllocations"] is True
        assert memory["requestPolicy"]["validRange"]["step"] == "1Mi"
    else:
        assert "allowMultipleAllocations" not in gpu and "requestPolicy" not in memory
        assert "drops allowMultipleAllocations" in plugin.log

    half = f"{quantity_value(memory['value']) // 2 // SHARE_STEP}Mi"
    template = claim_template("half-gpu")
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {
        "requests": {facts.CAPACITY_MEMORY: half}
    }
    cluster.apply(template)
    # One pod after the other: on 1.34 only one claim gets the GPU, and with both pods made at once the
    # scheduler may take either first (their claims are made by the controller in any order).
    cluster.apply(gpu_pod(PODS[0], cluster.namespace, "half-gpu"))
    first = cluster.wait_scheduled(cluster.namespace, PODS[0])
    cluster.apply(gpu_pod(PODS[1], cluster.namespace, "half-gpu"))
    pods = [first]
    if shared:
        pods.append(cluster.wait_scheduled(cluster.namespace, PODS[1]))
    else:
        pending = wait_until(
            lambda: "Unschedulable" in cluster.why_pending(cluster.namespace, PODS[1]), timeout=60
        )
        assert pending, cluster.why_pending(cluster.namespace, PODS[1])
    claims = [claims_of(cluster, p) for p in pods]
    results = [c["status"]["allocation"]["devices"]["results"][0] for c in claims]
    assert {(r["pool"], r["device"]) for r in results} == {(node, gpu["name"])}
    if shared:
        assert len({r["shareID"] for r in results}) == 2
        consumed = [quantity_value(r["consumedCapacity"][facts.CAPACITY_MEMORY]) for r in results]
        assert consumed == [quantity_value(half)] * 2, results
    else:
        assert "shareID" not in results[0]

    kubelet = Kubelet(plugin.registration_socket)
    try:
        kubelet.register()
        refs = [(cluster.namespace, c["metadata"]["name"], c["metadata"]["uid"]) for c in claims]
        answers = kubelet.prepare(refs)
        for ref, result in zip(refs, results, strict=True):
            answer = answers[ref[2]]
            assert answer["error"] == "", plugin.log
            [device] = answer["devices"]
            assert device.get("share_id") == result.get("shareID")
            share = result.get("shareID")  # a share has a claim spec; a whole GPU names the base spec
            assert device["cdi_device_ids"] == [
                cdi.claim_device_id(ref[2], gpu["name"], share) if share else cdi.base_device_id(gpu["name"])
            ]
        assert kubelet.unprepare(refs[:1]) == {refs[0][2]: ""}
        for ref in refs[1:]:  # the other share stays prepared: the same answer again
            assert kubelet.prepare([ref]) == {ref[2]: answers[ref[2]]}
            assert kubelet.unprepare([ref]) == {ref[2]: ""}
    finally:
        kubelet.close()
    code, log = plugin.stop()
    assert code == 0, log
