"""The planner's gates per `--kubernetes-version` are core's table (`vke_gpu_dra_core.dra_gates`), the one
the driver and the stack config read."""

from __future__ import annotations

from dataclasses import replace

import pytest
from vke_gpu_dra_core import dra_gates
from vke_gpu_dra_core.versions import parse_major_minor
from vke_gpu_dra_planner import gates as planner_gates
from vke_gpu_dra_planner.gates import (
    DISTINCT_DROPPED,
    DISTINCT_ENFORCED,
    DISTINCT_PER_REQUEST,
    DISTINCT_PRESENT,
    DISTINCT_SAME_DEVICE,
)


def test_the_planners_versions_follow_cores_table() -> None:
    for version, gates in planner_gates.GATES.items():
        kept = dra_gates.slice_fields_kept(parse_major_minor(version) or (0, 0))
        assert gates.consumable_capacity == ("allowMultipleAllocations" in kept)
        assert gates.partitionable_devices == ("sharedCounters" in kept)
        assert gates.device_taints == ("taints" in kept)
        assert gates.extended_resource == (version in ("1.36", "1.37", "1.38"))


def test_the_planner_knows_every_release_from_vkes_to_the_newest() -> None:
    """1.34 (VKE's, the default) to 1.38, the next: a 1.37 stack is planned with 1.37's own table, a 1.38
    one with 1.38's, a newer one with the newest."""
    assert list(planner_gates.GATES) == ["1.34", "1.35", "1.36", "1.37", "1.38"]
    assert planner_gates.DEFAULT_VERSION == "1.34"
    assert planner_gates.NEWEST_VERSION == "1.38"
    assert planner_gates.feature_gates("v1.37.2").version == "1.37"
    assert planner_gates.feature_gates("v1.38.0-beta.0").version == "1.38"
    assert planner_gates.nearest_gates("v1.39.0").version == "1.38"


def test_138_turns_fractional_capacity_ranges_on_and_keeps_137s_allocator() -> None:
    """1.38 (v1.38.0-beta.0's kube_features.go and its servers' feature table): DRAFractionalCapacityRange
    is GA and on by default; every other gate the planner models is as in 1.37 (on), and the allocator
    rules are 1.37's with milli-unit request policies (the real 1.38 scheduler agrees on the control-plane
    tier's planner cases)."""
    newest, previous = planner_gates.GATES["1.38"], planner_gates.GATES["1.37"]
    changed = {g for g, on in newest.by_name().items() if previous.by_name()[g] != on}
    assert changed == {dra_gates.FRACTIONAL_CAPACITY_RANGE}
    assert newest.allocator == replace(previous.allocator, fractional=True)


def test_137_has_the_dra_gates_of_136_on_and_taint_rules() -> None:
    """1.37: DRADeviceTaints and DRAExtendedResource GA, DRAConsumableCapacity, DRAPartitionableDevices
    and DRADeviceBindingConditions beta, all on, as in 1.36; DRADeviceTaintRules turns on (GA).
    DRAFractionalCapacityRange is new and beta but off: on only with --min-compatibility-version 1.37,
    and a 1.37 binary defaults to 1.36 (kube_features.go and component-base of v1.37.2)."""
    newest, previous = planner_gates.GATES["1.37"], planner_gates.GATES["1.36"]
    changed = {g for g, on in newest.by_name().items() if previous.by_name()[g] != on}
    assert changed == {dra_gates.DEVICE_TAINT_RULES}
    assert {g for g, on in newest.by_name().items() if not on} == {dra_gates.FRACTIONAL_CAPACITY_RANGE}
    assert dra_gates.on_by_default(dra_gates.BINDING_CONDITIONS, (1, 37))


def test_fractional_capacity_range_exists_only_from_137() -> None:
    for version in ("1.34", "1.35", "1.36"):
        assert planner_gates.GATES[version].fractional_capacity_range is False
        with pytest.raises(planner_gates.VersionError, match="does not exist in Kubernetes"):
            planner_gates.with_overrides(planner_gates.GATES[version], "DRAFractionalCapacityRange=true")
    assert planner_gates.GATES["1.37"].allocator.fractional is False
    on = planner_gates.with_overrides(planner_gates.GATES["1.37"], "DRAFractionalCapacityRange=true")
    assert on.allocator.fractional is True


@pytest.mark.parametrize(
    ("version", "gate", "default"),
    [
        ("1.37", "DRAExtendedResource", True),
        ("1.37", "DRAResourceClaimDeviceStatus", True),
        ("1.37", "DRAPrioritizedList", True),
        ("1.36", "DRAAdminAccess", True),
    ],
)
def test_locked_gates_cannot_be_turned_off(version: str, gate: str, default: bool) -> None:
    gates = planner_gates.GATES[version]
    with pytest.raises(planner_gates.VersionError, match=f"{gate} is GA and locked to true"):
        planner_gates.with_overrides(gates, f"{gate}=false")
    assert planner_gates.with_overrides(gates, f"{gate}=true").by_name()[gate] is default


def test_taints_are_ga_in_137_but_not_locked_before_138() -> None:
    gates = planner_gates.with_overrides(planner_gates.GATES["1.37"], "DRADeviceTaints=false")
    assert gates.device_taints is False
    # 1.36: extended resources still beta, can be turned off
    assert (
        planner_gates.with_overrides(
            planner_gates.GATES["1.36"], "DRAExtendedResource=false"
        ).extended_resource
        is False
    )
    assert planner_gates.GATES["1.36"].device_taint_rules is False
    assert planner_gates.GATES["1.34"].resource_claim_device_status is True


@pytest.mark.parametrize(
    ("version", "combinations", "fixed"),
    [("1.34", False, False), ("1.35", False, False), ("1.36", True, False), ("1.37", True, True)],
)
def test_allocator_rules_per_release(version: str, combinations: bool, fixed: bool) -> None:
    rules = planner_gates.GATES[version].allocator
    assert rules.combinations is combinations
    assert (rules.counter_rollback, rules.all_static_capacity, rules.capacity_errors) == (fixed,) * 3
    assert rules.overflow_zero is False


def test_1_34_with_consumable_capacity_runs_its_experimental_allocator() -> None:
    """As the real v1.34.4 with DRAConsumableCapacity on does (the control-plane tier's gated 1.34):
    `All` against each device's own capacity, a request past int64 read as 0; nothing else of 1.37."""
    gated = planner_gates.with_overrides(planner_gates.GATES["1.34"], "DRAConsumableCapacity=true").allocator
    assert (gated.all_static_capacity, gated.overflow_zero) == (True, True)
    others = (gated.combinations, gated.counter_rollback, gated.capacity_errors, gated.fractional)
    assert others == (False,) * 4
    later = planner_gates.with_overrides(planner_gates.GATES["1.35"], "DRAConsumableCapacity=true").allocator
    assert (later.all_static_capacity, later.overflow_zero) == (False, False)


@pytest.mark.parametrize(
    ("version", "overrides", "expected"),
    [
        # a 1.34 API server keeps the field whatever the gate says, its allocator compares pointers: with
        # the gate a shareable device's second share collides with its first (the real v1.34.4)
        ("1.34", "", DISTINCT_PRESENT),
        ("1.34", "DRAConsumableCapacity=true", DISTINCT_SAME_DEVICE),
        ("v1.34.4", "DRAConsumableCapacity=false", DISTINCT_PRESENT),
        # from 1.35 on the field follows the gate
        ("1.35", "", DISTINCT_DROPPED),
        ("1.35", "DRAConsumableCapacity=true", DISTINCT_PER_REQUEST),
        ("1.36", "", DISTINCT_PER_REQUEST),
        ("1.37", "", DISTINCT_ENFORCED),
        ("1.37", "DRAConsumableCapacity=false", DISTINCT_DROPPED),
    ],
)
def test_distinct_attribute_per_release(version: str, overrides: str, expected: str) -> None:
    gates = planner_gates.with_overrides(planner_gates.feature_gates(version), overrides)
    assert gates.distinct_attribute == expected
