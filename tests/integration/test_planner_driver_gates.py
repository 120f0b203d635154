"""Where the driver's gates combine, the planner models what the real plugin publishes and agrees with the
real scheduler: ConsumableShares and DynamicMIG both on (the stack config accepts the pair).

The plugin process (one simulated H100 80GB, both gates) publishes on 1.37 and 1.38 every device, the
whole GPU and each MIG placement, with `allowMultipleAllocations` and the memory `requestPolicy`, each still
consuming its counters; on 1.34, whose server drops the three fields, the GPU whole and unshared. The
planner's devices for the same pool (`inventory.slice_entries`, after `admission.as_published`) are the
same entries, and its verdict on two pods asking 10Gi of the GPU's memory each is the scheduler's: both on
gpu-0 on 1.37 and 1.38 (the shared GPU charges its counters once), one Pending on 1.34.
"""

from __future__ import annotations

from typing import Any

import pytest
from vke_gpu_dra_core import facts
from vke_gpu_dra_planner.admission import as_published
from vke_gpu_dra_planner.gates import GATES
from vke_gpu_dra_planner.inventory import GpuPool, slice_entries

from .cluster import Cluster
from .controlplane import wait_until
from .test_planner_agreement import (
    INSTANCE_TYPE,
    MEMORY_GIB,
    NEWER,
    VCPUS,
    deployment,
    plan,
    schedule,
    template,
)

H100 = "NVIDIA H100 80GB HBM3"
BOTH = "ConsumableShares=true,DynamicMIG=true"
#: Attributes that name the node's own GPU (its UUID): the planner's pool names its nodes otherwise.
NODE_OWN = frozenset({facts.ATTR_UUID, facts.ATTR_PARENT_UUID})


def comparable(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Entries by device name, without the attributes that name the node's own GPU."""
    out = {}
    for entry in entries:
        attributes = {k: v for k, v in entry.get("attributes", {}).items() if k not in NODE_OWN}
        out[entry["name"]] = {**entry, "attributes": attributes}
    return out


def modelled(version: str) -> dict[str, dict[str, Any]]:
    """The planner's devices for one H100 with both driver gates, on a cluster of `version`."""
    gates = GATES[version]
    pool = GpuPool("pool", INSTANCE_TYPE, H100, 1, 1, 1, consumable_shares=True, dynamic_mig=True)
    node = as_published(pool, gates).node(0)
    return comparable(
        slice_entries(node, shares_kept=gates.consumable_capacity, counters_kept=gates.partitionable_devices)
    )


def test_shared_mig_gpu_is_modelled_as_published_and_planned_as_scheduled(
    each_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = each_cluster
    version = cluster.plane.version
    monkeypatch.setenv("FEATURE_GATES", BOTH)
    objects = cluster.install_chart()
    name = cluster.add_node("both", cpu=str(VCPUS), memory=f"{MEMORY_GIB}Gi")["metadata"]["name"]
    pod = cluster.plugin_pod(objects, name)
    [service_account] = [o for o in objects if o["kind"] == "ServiceAccount"]
    plugin = cluster.start_plugin(
        name, cluster.token(service_account["metadata"]["name"], pod), gpus=1, product=H100
    )
    slices = 2 if version in NEWER else 1  # the counter set in a slice of its own from 1.35
    published = wait_until(
        lambda: len(cluster.slices_of(name)) == slices or plugin.process.poll() is not None, timeout=60
    )
    assert published and plugin.process.poll() is None, f"no slices published:\n{plugin.log}"
    devices = [d for s in cluster.slices_of(name) for d in s["spec"].get("devices") or []]
    assert comparable(devices) == modelled(version)
    if version in NEWER:
        assert len(devices) > 1 and all(d.get("allowMultipleAllocations") for d in devices)
        assert all(d.get("consumesCounters") for d in devices)
        assert any(k.startswith(facts.CAPACITY_MEMORY_SLICE_PREFIX) for k in devices[1]["capacity"])
    else:
        assert [d["name"] for d in devices] == ["gpu-0"] and "allowMultipleAllocations" not in devices[0]

    claim = template("ten", 1)
    claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {
        "requests": {facts.CAPACITY_MEMORY: "10Gi"}
    }
    config = {
        "vke-gpu-dra:nodePool.minReplicas": 1,
        "vke-gpu-dra:nodePool.desiredReplicas": 1,
        "vke-gpu-dra:nodePool.maxReplicas": 1,
        "vke-gpu-dra:driver.deviceSource": "simulated",
        "vke-gpu-dra:driver.simulatedGpus": 1,
        "vke-gpu-dra:driver.simulatedProduct": H100,
        "vke-gpu-dra:driver.featureGates": BOTH,
    }
    report = plan(cluster, [claim, deployment("pair", 2, "ten", cluster.namespace)], version, config)
    planned = {w["name"]: (w["status"], w["placed"]) for w in report["workloads"]}
    assert planned == ({"pair": ("fits", 2)} if version in NEWER else {"pair": ("pending", 1)})
    cluster.apply(claim)
    assert schedule(cluster, [("pair", 2, "ten")]) == planned
    if version in NEWER:  # both shares of the one GPU, each with its own shareID
        results = [
            cluster.claim_of(p)["status"]["allocation"]["devices"]["results"][0]
            for p in cluster.pods("app=pair")
        ]
        assert [r["device"] for r in results] == ["gpu-0", "gpu-0"]
        assert len({r["shareID"] for r in results}) == 2
        assert all(r["consumedCapacity"] == {facts.CAPACITY_MEMORY: "10Gi"} for r in results)
    code, log = plugin.stop()
    assert code == 0, log
