"""Core's DRA gate table on VKE's line and our own: what a 1.34 and a 1.37 control plane do by default
(kubernetes `pkg/features/kube_features.go`, v1.37.2: the stack config, the planner and the pack read it)."""

from __future__ import annotations

import pytest
from vke_gpu_dra_core import dra_gates as g
from vke_gpu_dra_core import vke_releases

V134, V137 = (1, 34), (1, 37)


@pytest.mark.parametrize(
    ("gate", "on_134", "on_137"),
    [
        (g.DEVICE_TAINTS, False, True),  # alpha in 1.34; GA in 1.37, on
        (g.DEVICE_TAINT_RULES, False, True),  # none in 1.34; GA in 1.37, on
        (g.EXTENDED_RESOURCE, False, True),  # alpha in 1.34; GA in 1.37
        (g.RESOURCE_CLAIM_DEVICE_STATUS, True, True),  # beta and on since 1.33; GA in 1.37
        # new in 1.37, beta; on only with --min-compatibility-version 1.37, which a 1.37.2 binary does not
        # default to: off on a default control plane (the real 1.37.2 rounds a 250m request up to 1)
        (g.FRACTIONAL_CAPACITY_RANGE, False, False),
        (g.CONSUMABLE_CAPACITY, False, True),  # alpha in 1.34; beta, on from 1.36
        (g.PARTITIONABLE_DEVICES, False, True),
        (g.BINDING_CONDITIONS, False, True),
    ],
)
def test_defaults_on_each_offered_line(gate: str, on_134: bool, on_137: bool) -> None:
    assert (g.on_by_default(gate, V134), g.on_by_default(gate, V137)) == (on_134, on_137)


def test_the_table_covers_every_line_of_vke_and_of_our_own_clusters() -> None:
    assert vke_releases.NEWEST <= V137 and vke_releases.OWN_CLUSTERS[-1] == (1, 38)
    for line in (*vke_releases.OFFERED, *vke_releases.OWN_CLUSTERS):
        assert g.exists(g.CONSUMABLE_CAPACITY, line), line
    assert g.slice_fields_kept(V137) == frozenset(g.SLICE_FIELDS)
    assert g.slice_fields_kept(V134) == frozenset()


def test_gates_a_release_does_not_know_yet() -> None:
    assert not g.exists(g.FRACTIONAL_CAPACITY_RANGE, (1, 36))
    assert not g.exists(g.DEVICE_TAINT_RULES, V134)
    # DRADeviceTaintRules was beta but off in 1.36: on only from its GA
    assert g.exists(g.DEVICE_TAINT_RULES, (1, 36)) and not g.on_by_default(g.DEVICE_TAINT_RULES, (1, 36))


def test_what_1_37_locks_and_what_it_still_lets_an_operator_turn_off() -> None:
    assert g.locked(g.EXTENDED_RESOURCE, V137) and not g.locked(g.EXTENDED_RESOURCE, (1, 36))
    assert g.locked(g.RESOURCE_CLAIM_DEVICE_STATUS, V137)
    assert not g.locked(g.DEVICE_TAINTS, V137)  # GA in 1.37, locked from 1.38
    assert not g.locked(g.DEVICE_TAINT_RULES, V137)


# --- 1.38 (v1.38.0-beta.0's feature-gate table; the control-plane tier reads the built servers' own) ---

V138 = (1, 38)


def test_1_38_removes_dra_itself_and_locks_the_device_taint_gates() -> None:
    assert g.exists(g.DYNAMIC_RESOURCE_ALLOCATION, V137) and g.locked(g.DYNAMIC_RESOURCE_ALLOCATION, V137)
    assert g.removed(g.DYNAMIC_RESOURCE_ALLOCATION, V138) and not g.exists(
        g.DYNAMIC_RESOURCE_ALLOCATION, V138
    )
    for gate in (g.DEVICE_TAINTS, g.DEVICE_TAINT_RULES, g.PARTITIONABLE_DEVICES, g.BINDING_CONDITIONS):
        assert g.locked(gate, V138) and g.on_by_default(gate, V138) and g.stage(gate, V138) == "GA", gate
    # GA and on, still settable
    for gate in (g.CONSUMABLE_CAPACITY, g.FRACTIONAL_CAPACITY_RANGE):
        assert not g.locked(gate, V138) and g.on_by_default(gate, V138) and g.stage(gate, V138) == "GA", gate
    assert g.slice_fields_kept(V138) == frozenset(g.SLICE_FIELDS)


@pytest.mark.parametrize(
    ("version", "flag"),
    [
        (V134, "DRAAdminAccess=true,DRAConsumableCapacity=false,DRADeviceBindingConditions=false,"
               "DRADeviceTaints=false,DRAExtendedResource=false,DRAPartitionableDevices=false,"
               "DRAPrioritizedList=true,DRAResourceClaimDeviceStatus=true,DynamicResourceAllocation=true,"
               "KubeletPodResourcesDynamicResources=true"),
        (V137, "DRAConsumableCapacity=true,DRADeviceBindingConditions=true,DRADeviceTaintRules=true,"
               "DRADeviceTaints=true,DRAFractionalCapacityRange=false,DRAPartitionableDevices=true"),
        (V138, "DRAConsumableCapacity=true,DRAFractionalCapacityRange=true"),
    ],
)  # fmt: skip
def test_what_the_tier_renders_for_each_release(version: tuple[int, int], flag: str) -> None:
    """Every gate the release has and does not lock, at its default: no locked or removed gate named."""
    assert g.feature_gates_flag(version, g.settable_defaults(version)) == flag
    assert "DynamicResourceAllocation" not in g.feature_gates_flag(V138, g.settable_defaults(V138))


def test_a_locked_gate_at_its_lock_is_left_out_of_the_flag() -> None:
    assert g.feature_gates_flag(V138, {g.DEVICE_TAINTS: True, g.CONSUMABLE_CAPACITY: False}) == (
        "DRAConsumableCapacity=false"
    )
    assert g.feature_gates_flag(V137, {g.DEVICE_TAINTS: False}) == "DRADeviceTaints=false"  # not locked yet


@pytest.mark.parametrize(
    ("version", "gates", "message"),
    [
        (V138, {"DynamicResourceAllocation": True},
         "feature gate DynamicResourceAllocation: removed in Kubernetes 1.38, so a 1.38 component refuses to "
         "start with it; allowed: leave it out"),
        (V138, {"DRADeviceTaints": False},
         "feature gate DRADeviceTaints=false: DRADeviceTaints is GA and locked to true in Kubernetes 1.38; "
         "allowed: DRADeviceTaints=true or leave it out"),
        (V138, {"DRADeviceTaintRules": False},
         "feature gate DRADeviceTaintRules=false: DRADeviceTaintRules is GA and locked"),
        (V134, {"DRADeviceTaintRules": True},
         "feature gate DRADeviceTaintRules: Kubernetes 1.34 does not have it (from 1.35); "
         "allowed: leave it out"),
        (V137, {"NoSuchGate": True},
         "feature gate NoSuchGate: not a DRA gate this table knows; known: DRAAdminAccess,"),
    ],
)  # fmt: skip
def test_a_gate_the_release_refuses_is_one_clear_error(
    version: tuple[int, int], gates: dict[str, bool], message: str
) -> None:
    with pytest.raises(g.GateError) as caught:
        g.feature_gates_flag(version, gates)
    assert str(caught.value).startswith(message)
