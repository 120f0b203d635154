"""The planner's gates per `--kubernetes-version` are core's table (`vke_gpu_dra_core.dra_gates`), the one
the driver and the stack config read."""

from __future__ import annotations

import pytest
from vke_gpu_dra_core import dra_gates
from vke_gpu_dra_core.versions import parse_major_minor
from vke_gpu_dra_planner import gates as planner_gates
from vke_gpu_dra_planner.gates import DISTINCT_DROPPED, DISTINCT_ENFORCED, DISTINCT_PRESENT


def test_the_planners_versions_follow_cores_table() -> None:
    for version, gates in planner_gates.GATES.items():
        kept = dra_gates.slice_fields_kept(parse_major_minor(version) or (0, 0))
        assert gates.consumable_capacity == ("allowMultipleAllocations" in kept)
        assert gates.partitionable_devices == ("sharedCounters" in kept)
        assert gates.device_taints == ("taints" in kept)
        assert gates.extended_resource == (version in ("1.36", "1.37"))


def test_the_planner_knows_every_release_from_vkes_to_the_newest() -> None:
    """1.34 (VKE's, the default) to 1.37, the newest: a 1.37 stack is planned with 1.37's own table."""
    assert list(planner_gates.GATES) == ["1.34", "1.35", "1.36", "1.37"]
    assert planner_gates.DEFAULT_VERSION == "1.34"
    assert planner_gates.NEWEST_VERSION == "1.37"
    assert planner_gates.feature_gates("v1.37.2").version == "1.37"
    assert planner_gates.nearest_gates("v1.38.0").version == "1.37"


def test_137_has_the_dra_gates_of_136_on() -> None:
    """1.37: DRADeviceTaints and DRAExtendedResource GA, DRAConsumableCapacity, DRAPartitionableDevices
    and DRADeviceBindingConditions beta, all on: for the gates the planner models, 1.36's defaults."""
    newest, previous = planner_gates.GATES["1.37"], planner_gates.GATES["1.36"]
    assert newest.by_name() == previous.by_name()
    assert all(newest.by_name().values())
    assert dra_gates.on_by_default(dra_gates.BINDING_CONDITIONS, (1, 37))


@pytest.mark.parametrize(
    ("version", "overrides", "expected"),
    [
        # a 1.34 API server keeps the field whatever the gate says, its allocator compares no values
        ("1.34", "", DISTINCT_PRESENT),
        ("1.34", "DRAConsumableCapacity=true", DISTINCT_PRESENT),
        ("v1.34.4", "DRAConsumableCapacity=false", DISTINCT_PRESENT),
        # from 1.35 on the field follows the gate
        ("1.35", "", DISTINCT_DROPPED),
        ("1.35", "DRAConsumableCapacity=true", DISTINCT_ENFORCED),
        ("1.36", "", DISTINCT_ENFORCED),
        ("1.37", "", DISTINCT_ENFORCED),
        ("1.37", "DRAConsumableCapacity=false", DISTINCT_DROPPED),
    ],
)
def test_distinct_attribute_per_release(version: str, overrides: str, expected: str) -> None:
    gates = planner_gates.with_overrides(planner_gates.feature_gates(version), overrides)
    assert gates.distinct_attribute == expected
