"""Prepared claims' `status.devices` (KEP-4817) on the real API servers (1.37, where it is GA, and 1.34, where
it is beta and on): the plugin process reports the device kubelet had it prepare, with `Ready` and the GPU's
UUID, and removes it at unprepare. The plugin's token writes only its own entries of claims allocated on its
node: on 1.37 the API server refuses the rest itself (DRAResourceClaimGranularStatusAuthorization: 422, the
chart grants `associated-node:patch` on `resourceclaims/driver` for its driver only), on 1.34 the chart's
admission policy does (403)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from vke_gpu_dra.claim_status import DATA_GPU_UUID, FIELD_MANAGER, apply_body, status_entries
from vke_gpu_dra.kubeapi import KubeAPI, KubeError
from vke_gpu_dra.metrics import Metrics
from vke_gpu_dra.status_publisher import ClaimStatusPublisher, allocation_rewritten
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import ClaimRef, PreparedDevice
from vke_gpu_dra_core.featuregates import FeatureGates
from vke_gpu_dra_testing.k8s_protobuf import PB, open_envelope
from vke_gpu_dra_testing.kubelet_client import Kubelet

from .cluster import Cluster
from .controlplane import ApiError, Client, wait_until
from .test_driver import claim_template, gpu_pod, start_on_node

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"


def our_entries(claim: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for d in (claim.get("status") or {}).get("devices") or [] if d["driver"] == facts.DRIVER_NAME]


def test_a_prepared_claim_reports_its_gpu_until_unprepared(each_cluster: Cluster) -> None:
    cluster = each_cluster
    plugin, node = start_on_node(cluster)
    name = node["metadata"]["name"]
    cluster.apply(claim_template("single-gpu"))
    cluster.apply(gpu_pod("gpu-test", cluster.namespace, "single-gpu"))
    pod = cluster.wait_scheduled(cluster.namespace, "gpu-test")
    claim = cluster.claim_of(pod)
    [result] = claim["status"]["allocation"]["devices"]["results"]
    [published] = cluster.slices_of(name)
    [device] = [d for d in published["spec"]["devices"] if d["name"] == result["device"]]
    path = f"{CLAIMS.format(namespace=cluster.namespace)}/{claim['metadata']['name']}"

    kubelet = Kubelet(plugin.registration_socket)
    try:
        kubelet.register()
        uid = claim["metadata"]["uid"]
        ref = [(cluster.namespace, claim["metadata"]["name"], uid)]
        assert kubelet.prepare(ref)[uid]["error"] == "", plugin.log
        reported = wait_until(lambda: our_entries(cluster.api.get(path)), timeout=30)
        assert reported, f"no status.devices written:\n{plugin.log}"
        [entry] = reported
        assert (entry["pool"], entry["device"]) == (name, result["device"])
        [ready] = entry["conditions"]
        assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Prepared")
        assert entry["data"][DATA_GPU_UUID] == device["attributes"]["uuid"]["string"]
        stored = cluster.api.get(path)
        managers = {
            m["manager"] for m in stored["metadata"]["managedFields"] if m.get("subresource") == "status"
        }
        assert FIELD_MANAGER in managers
        # the rest of the status is the scheduler's and stays as it was
        assert stored["status"]["allocation"] == claim["status"]["allocation"]
        assert stored["status"]["reservedFor"] == claim["status"]["reservedFor"]

        assert kubelet.unprepare(ref) == {uid: ""}
        removed = wait_until(lambda: not our_entries(cluster.api.get(path)), timeout=30)
        assert removed, f"status.devices not removed at unprepare:\n{plugin.log}"
    finally:
        kubelet.close()
    code, log = plugin.stop()
    assert code == 0, log
    assert "cannot write claim status" not in log and "does not keep ResourceClaim status.devices" not in log


# --- the admission policy, with the plugin's own call and token ---


def allocated_claim(cluster: Cluster, node: str, *, nic: bool = False) -> dict[str, Any]:
    """A claim allocated (by the admin, as the scheduler would) gpu-0 in `node`'s pool, and with `nic` eth0 of
    another driver, with that driver's entry written by its own field manager."""
    name = f"c-{uuid.uuid4().hex[:6]}"
    requests = [{"name": "gpu", "exactly": {"deviceClassName": facts.DEVICE_CLASS_GPU.name}}]
    results = [{"request": "gpu", "driver": facts.DRIVER_NAME, "pool": node, "device": "gpu-0"}]
    if nic:
        requests.append({"name": "nic", "exactly": {"deviceClassName": facts.DEVICE_CLASS_GPU.name}})
        results.append({"request": "nic", "driver": "nic.example.com", "pool": node, "device": "eth0"})
    stored = cluster.allocated_claim(name, node, requests, results)
    path = f"{CLAIMS.format(namespace=cluster.namespace)}/{name}/status"
    if nic:
        ref = ClaimRef(namespace=cluster.namespace, name=name, uid=stored["metadata"]["uid"])
        theirs = {
            "driver": "nic.example.com",
            "pool": node,
            "device": "eth0",
            "data": {"mac": "02:00:00:00:00:01"},
        }
        body = apply_body(ref, [theirs])
        cluster.api.request(
            "PATCH", f"{path}?fieldManager=nic.example.com", body, content_type="application/apply-patch+yaml"
        )
    return stored


def entries_for(
    claim: dict[str, Any], pool: str, device: str = "gpu-0"
) -> tuple[ClaimRef, list[dict[str, Any]]]:
    ref = ClaimRef(
        namespace=claim["metadata"]["namespace"], name=claim["metadata"]["name"], uid=claim["metadata"]["uid"]
    )
    prepared = [PreparedDevice(("gpu",), pool, device, ())]
    return ref, status_entries(facts.DRIVER_NAME, prepared, {}, at=datetime.now(UTC))


@pytest.fixture
def plugin_api(each_cluster: Cluster, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The chart installed, nodes a and b, the plugin's pod on a, and the plugin's API client with the token
    bound to that pod."""
    objects = each_cluster.install_chart()
    own, other = each_cluster.add_node("a"), each_cluster.add_node("b")
    pod = each_cluster.plugin_pod(objects, own["metadata"]["name"])
    [service_account] = [o for o in objects if o["kind"] == "ServiceAccount"]
    token = each_cluster.token(service_account["metadata"]["name"], pod)
    api = KubeAPI.from_kubeconfig(each_cluster.plane.write_kubeconfig(tmp_path / "kubeconfig", token))
    [policy] = [
        o["metadata"]["name"]
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicy"
        and o["metadata"]["name"].endswith("-resourceclaim-status")
    ]
    yield {
        "api": api,
        "client": each_cluster.plane.client(token),
        "own": own["metadata"]["name"],
        "other": other["metadata"]["name"],
        "policy": policy,
    }
    api.close()


def apply(api: KubeAPI, ref: ClaimRef, entries: list[dict[str, Any]]) -> dict[str, Any]:
    return api.apply_claim_status(
        ref.namespace, ref.name, apply_body(ref, entries), field_manager=FIELD_MANAGER, timeout=10
    )


def refused_dry_run(client: Client, ref: ClaimRef, entries: list[dict[str, Any]]) -> bool:
    """Whether the server refuses the apply, tried as a dry run (admission runs, nothing is stored): a new
    policy takes effect within a second or two, and a write let through before would stay."""
    path = f"{CLAIMS.format(namespace=ref.namespace)}/{ref.name}/status"
    query = f"?fieldManager={FIELD_MANAGER}&force=true&dryRun=All"
    try:
        client.request(
            "PATCH", path + query, apply_body(ref, entries), content_type="application/apply-patch+yaml"
        )
    except ApiError:
        return True
    return False


def refusal(setup: dict[str, Any], ref: ClaimRef, entries: list[dict[str, Any]]) -> KubeError:
    """The refusal of the plugin's own apply, once the server refuses it."""
    assert wait_until(lambda: refused_dry_run(setup["client"], ref, entries), timeout=30), "never refused"
    with pytest.raises(KubeError) as refused:
        apply(setup["api"], ref, entries)
    return refused.value


def assert_refused_for_entries(cluster: Cluster, setup: dict[str, Any], error: KubeError) -> None:
    """1.37: the API server's own check of the drivers whose entries change; 1.34: the chart's policy."""
    if cluster.plane.version == "1.34":
        assert error.status == 403 and setup["policy"] in error.message, error
        assert (
            f"the kubelet plugin on node '{setup['own']}' may only write the status.devices entries of "
            f"driver {facts.DRIVER_NAME} in pool '{setup['own']}'"
        ) in error.message
    else:
        assert error.status == 422, error
        assert 'changing status.devices requires resource="resourceclaims/driver"' in error.message, error


def test_the_plugin_writes_and_removes_its_entries_beside_another_drivers(
    each_cluster: Cluster, plugin_api: dict[str, Any]
) -> None:
    api: KubeAPI = plugin_api["api"]
    claim = allocated_claim(each_cluster, plugin_api["own"], nic=True)
    ref, ours = entries_for(claim, plugin_api["own"])
    stored = apply(api, ref, ours)
    assert {(e["driver"], e["device"]) for e in stored["status"]["devices"]} == {
        ("nic.example.com", "eth0"),
        (facts.DRIVER_NAME, "gpu-0"),
    }
    stored = apply(api, ref, [])
    assert [(e["driver"], e["device"]) for e in stored["status"]["devices"]] == [("nic.example.com", "eth0")]
    # a device the claim was not allocated is refused by the API server itself
    _, unallocated = entries_for(claim, plugin_api["own"], device="gpu-3")
    with pytest.raises(KubeError) as invalid:
        apply(api, ref, unallocated)
    assert invalid.value.status == 422 and "must be an allocated device in the claim" in invalid.value.message
    # a claim re-created under the name: the uid in the apply no longer matches
    replaced = ClaimRef(namespace=ref.namespace, name=ref.name, uid=str(uuid.uuid4()))
    with pytest.raises(KubeError) as immutable:
        apply(api, replaced, ours)
    assert immutable.value.status == 422 and "metadata.uid" in immutable.value.message, immutable.value


def test_a_claim_on_another_node_cannot_be_written(each_cluster: Cluster, plugin_api: dict[str, Any]) -> None:
    theirs = allocated_claim(each_cluster, plugin_api["other"])
    ref, entries = entries_for(theirs, plugin_api["other"])
    assert_refused_for_entries(each_cluster, plugin_api, refusal(plugin_api, ref, entries))
    path = f"{CLAIMS.format(namespace=each_cluster.namespace)}/{ref.name}"
    assert not our_entries(each_cluster.api.get(path))


def test_another_drivers_entry_cannot_be_changed(each_cluster: Cluster, plugin_api: dict[str, Any]) -> None:
    """The NIC driver's entry is its own field manager's; a forced apply by the plugin that changes it is
    refused."""
    claim = allocated_claim(each_cluster, plugin_api["own"], nic=True)
    ref, ours = entries_for(claim, plugin_api["own"])
    hijack = {"driver": "nic.example.com", "pool": plugin_api["own"], "device": "eth0", "data": {"mac": "x"}}
    assert_refused_for_entries(each_cluster, plugin_api, refusal(plugin_api, ref, [*ours, hijack]))
    path = f"{CLAIMS.format(namespace=each_cluster.namespace)}/{ref.name}"
    [kept] = each_cluster.api.get(path)["status"]["devices"]
    assert kept["data"] == {"mac": "02:00:00:00:00:01"}


#: A claim's device config as a Go client sends its struct (fields in declaration order, not sorted).
TIME_SLICING = {
    "kind": "GpuConfig",
    "apiVersion": "resource.nvidia.com/v1beta1",
    "sharing": {"strategy": "TimeSlicing"},
}


@pytest.mark.parametrize("compact", [True, False], ids=["go-struct-order", "python-json-whitespace"])
def test_a_claim_whose_device_config_apply_would_rewrite_gets_its_entries_by_a_protobuf_update(
    each_cluster: Cluster, plugin_api: dict[str, Any], compact: bool
) -> None:
    """Server-side apply serialises the stored opaque config again (compact, sorted keys): where the stored
    bytes differ (a Go client sends a struct's fields in declaration order; a Python client's `json.dumps`
    adds whitespace), the allocation reads as changed and the apply is refused, on every release. The
    publisher then writes the same entries by an update of the claim read in protobuf form, which keeps
    the stored bytes, and removes them the same way at unprepare, with the plugin's own pod-bound token."""
    api: KubeAPI = plugin_api["api"]
    own = plugin_api["own"]
    config = [{"source": "FromClaim", "opaque": {"driver": facts.DRIVER_NAME, "parameters": TIME_SLICING}}]
    requests = [{"name": "gpu", "exactly": {"deviceClassName": facts.DEVICE_CLASS_GPU.name}}]
    results = [{"request": "gpu", "driver": facts.DRIVER_NAME, "pool": own, "device": "gpu-0"}]
    name = f"c-{uuid.uuid4().hex[:6]}"
    claim = each_cluster.allocated_claim(name, own, requests, results, config=config, compact=compact)
    sent = json.dumps(TIME_SLICING, separators=(",", ":") if compact else None).encode()
    assert stored_config(api, claim) == sent
    ref, ours = entries_for(claim, own)
    with pytest.raises(KubeError) as refused:
        apply(api, ref, ours)
    assert allocation_rewritten(refused.value), refused.value

    metrics = Metrics()
    publisher = ClaimStatusPublisher(
        api, driver_name=facts.DRIVER_NAME, pool_name=own, devices=[], gates=FeatureGates(), metrics=metrics,
        settle=0.0,
    )  # fmt: skip
    path = f"{CLAIMS.format(namespace=ref.namespace)}/{ref.name}"
    publisher.start()
    try:
        publisher.prepared(ref, claim, [PreparedDevice(("gpu",), own, "gpu-0", ())])
        assert publisher.wait_idle(30)
        stored = each_cluster.api.get(path)
        assert stored["status"]["allocation"] == claim["status"]["allocation"]
        assert stored_config(api, stored) == sent
        [entry] = our_entries(stored)
        assert (entry["pool"], entry["device"], entry["conditions"][0]["status"]) == (own, "gpu-0", "True")
        assert written(metrics, "success") == 1, metrics_text(metrics)
        managers = {(m["manager"], m["operation"]) for m in stored["metadata"]["managedFields"]}
        assert (FIELD_MANAGER, "Update") in managers
        publisher.unprepared(ref)
        assert publisher.wait_idle(30)
        assert our_entries(each_cluster.api.get(path)) == []
        assert written(metrics, "success") == 2, metrics_text(metrics)
    finally:
        publisher.stop()


def stored_config(api: KubeAPI, claim: dict[str, Any]) -> bytes:
    """The bytes the API server keeps of the claim's (only) opaque device config, read in protobuf form."""
    body = api.get_resource_claim_wire(claim["metadata"]["namespace"], claim["metadata"]["name"], 10)
    assert body is not None
    _, _, raw = open_envelope(body)
    [config] = PB["ResourceClaim"].FromString(raw).status.allocation.devices.config
    return bytes(config.deviceConfiguration.opaque.parameters.raw)


def metrics_text(metrics: Metrics) -> str:
    return generate_latest(metrics.registry).decode()


def written(metrics: Metrics, result: str) -> float:
    value = metrics.registry.get_sample_value("vke_gpu_dra_claim_status_writes_total", {"result": result})
    return value or 0.0
