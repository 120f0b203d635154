"""Core's DRA gate table on the two lines VKE offers: what a 1.34 and a 1.37 control plane do by default
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


def test_the_table_covers_the_newest_offered_line() -> None:
    assert vke_releases.NEWEST == V137
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
