"""The planner's devices are the driver's: for every combination of the driver gates ConsumableShares and
DynamicMIG that the stack config accepts, on every Kubernetes release the planner knows (and on 1.34 with
an alpha gate turned on), the ResourceSlice entries the planner models for a node
(`inventory.slice_entries` of the pool `admission.as_published` gives) are the ones the kubelet plugin
publishes on a server that keeps what that release keeps: the plugin's own decisions (`Plugin._slice_entry`,
`_add_mig_placements`, `_slice_layout`) on simulated GPUs, once its detection of the server
(`cluster_features`) answers as that release's server would. The control-plane tier compares the same
against the real plugin process and the real 1.34, 1.37 and 1.38 servers
(tests/integration/test_planner_driver_gates.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from vke_gpu_dra.cluster_features import ClusterFeatures, CounterShape
from vke_gpu_dra.config import parse_config
from vke_gpu_dra.partitions.setup import counter_layout
from vke_gpu_dra.plugin import Plugin
from vke_gpu_dra.slices import chunk_devices
from vke_gpu_dra_core import config, dra_gates, featuregates
from vke_gpu_dra_core.versions import parse_major_minor
from vke_gpu_dra_planner.admission import as_published
from vke_gpu_dra_planner.gates import GATES, FeatureGates, with_overrides
from vke_gpu_dra_planner.inventory import GpuPool, slice_entries
from vke_gpu_dra_testing.plugin_env import plugin_args

from tests.program import harness

#: The driver gates whose devices the planner models, each combination as `driver.featureGates` writes it.
DRIVER_GATES = [
    "",
    "ConsumableShares=true",
    "DynamicMIG=true",
    "ConsumableShares=true,DynamicMIG=true",
]
#: A product without MIG profiles and one with them.
PRODUCTS = ["NVIDIA L20", "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]
#: Every release the planner has a table for, and 1.34 with each alpha gate that keeps a slice field on.
CLUSTERS = [
    *((version, "") for version in GATES),
    ("1.34", "DRAConsumableCapacity=true"),
    ("1.34", "DRAPartitionableDevices=true"),
    ("1.34", "DRAConsumableCapacity=true,DRAPartitionableDevices=true"),
]


def accepted(driver_gates: str) -> bool:
    """Whether the stack config accepts `driver.featureGates` (the test below asserts every one is)."""
    raw = harness.stack_raw_config("local", {"driver.featureGates": driver_gates})
    return config.read(raw)[1] == ()


def server(version: str, turned: str) -> ClusterFeatures:
    """What the plugin's detection finds on a server of `version` with the gates `turned` on: the fields
    core's table says it keeps, shared counters beside the devices (1.34) or in their own slice (1.35+)."""
    release = parse_major_minor(version)
    assert release is not None
    extra = frozenset(g.split("=")[0] for g in turned.split(",") if g)
    kept = dra_gates.slice_fields_kept(release, extra)
    shape: CounterShape = "beside-devices" if release < (1, 35) else "own-slice"
    return ClusterFeatures(
        version=release,
        taints="taints" in kept,
        multiple_allocations="allowMultipleAllocations" in kept,
        binding_conditions="bindingConditions" in kept,
        shared_counters=shape if "sharedCounters" in kept else None,
        detail="as core's table says",
    )


def published(
    tmp_path: Path, product: str, gpus: int, driver_gates: str, features: ClusterFeatures
) -> list[Any]:
    """The device entries the plugin publishes, in slice order, through its own start-up steps."""
    args = [*plugin_args(tmp_path, gpus=gpus), "--simulated-product", product]
    plugin = Plugin(parse_config(args, environ={"FEATURE_GATES": driver_gates}))
    plugin.cluster = features  # what `_know_the_cluster` detects, and then the layout it picks
    if plugin.config.feature_gates.dynamic_mig:
        plugin.mig_layout = counter_layout(features)
    plugin._discover_devices()
    plugin._add_mig_placements()
    entries = [plugin._slice_entry()(d) for d in plugin.devices]
    layout = plugin._slice_layout(len(entries) or 1)
    contents = layout(entries) if layout else [{"devices": c} for c in chunk_devices(entries)]
    return [d for content in contents for d in content.get("devices", [])]


def modelled(product: str, gpus: int, driver_gates: str, gates: FeatureGates) -> list[Any]:
    values = featuregates.parse_explicit(driver_gates) if driver_gates else {}
    pool = GpuPool(
        "pool",
        "ecs.test.x",
        product,
        gpus,
        1,
        1,
        consumable_shares=values.get(featuregates.CONSUMABLE_SHARES, False),
        dynamic_mig=values.get(featuregates.DYNAMIC_MIG, False),
    )
    node = as_published(pool, gates).node(0)
    return slice_entries(
        node, shares_kept=gates.consumable_capacity, counters_kept=gates.partitionable_devices
    )


def by_name(entries: list[Any]) -> dict[str, Any]:
    """Entries by device name; the UUIDs the simulated GPUs take from their node's name left out."""
    out = {}
    for entry in entries:
        attributes = {
            k: v for k, v in entry["attributes"].items() if k.rpartition("/")[2] not in ("uuid", "parentUUID")
        }
        out[entry["name"]] = {**entry, "attributes": attributes}
    return out


def test_every_driver_gate_combination_is_accepted_by_the_stack_config() -> None:
    assert all(accepted(g) for g in DRIVER_GATES)


@pytest.mark.parametrize(("version", "turned"), CLUSTERS)
@pytest.mark.parametrize("driver_gates", DRIVER_GATES)
@pytest.mark.parametrize("product", PRODUCTS)
def test_the_planner_models_what_the_plugin_publishes(
    tmp_path: Path, version: str, turned: str, driver_gates: str, product: str
) -> None:
    gates = with_overrides(GATES[version], turned)
    driver = published(tmp_path, product, 2, driver_gates, server(version, turned))
    planner = modelled(product, 2, driver_gates, gates)
    assert [e["name"] for e in planner] == [e["name"] for e in driver]
    assert by_name(planner) == by_name(driver)


def test_both_gates_share_every_device_of_a_partitioned_gpu_that_still_consumes_counters(
    tmp_path: Path,
) -> None:
    """The combination the planner used to model as exclusive: on 1.37 every device, the whole GPU and each
    placement (with its memory slices), is shared by memory and consumes its counters."""
    both = "ConsumableShares=true,DynamicMIG=true"
    entries = modelled("NVIDIA H100 80GB HBM3", 1, both, GATES["1.37"])
    assert len(entries) > 1
    assert all(e.get("allowMultipleAllocations") and e.get("consumesCounters") for e in entries)
    assert all("requestPolicy" in e["capacity"]["memory"] for e in entries)
    placements = [e for e in entries if e["name"] != "gpu-0"]
    assert all(any(k.startswith("memorySlice") for k in e["capacity"]) for e in placements)
    assert by_name(entries) == by_name(
        published(tmp_path, "NVIDIA H100 80GB HBM3", 1, both, server("1.37", ""))
    )
