"""What the program knows of the cluster's DRA fields from `cluster.kubernetesVersion` (core's table, the one
the driver's dry-runs and the planner's versions agree with: tests/capacity/test_dra_gates.py)."""

from __future__ import annotations

import pytest
from vke_gpu_dra_core import config as config_mod
from vke_gpu_dra_core import dra_gates, facts

from tests.program import harness

ALL = frozenset(dra_gates.SLICE_FIELDS)


@pytest.mark.parametrize(
    ("overrides", "fields", "shared"),
    [
        ({}, frozenset(), False),  # the example stack: 1.34
        (
            {"cluster.kubernetesVersion": "1.35", "driver.featureGates": "ConsumableShares=true"},
            frozenset(),
            False,
        ),
        ({"cluster.kubernetesVersion": "1.37"}, ALL, False),
        ({"cluster.kubernetesVersion": "1.36", "driver.featureGates": "ConsumableShares=true"}, ALL, True),
    ],
)
def test_slice_fields_and_shared_gpus_per_cluster_version(
    overrides: dict, fields: frozenset, shared: bool
) -> None:
    cfg = config_mod.load(harness.stack_raw_config("dev", overrides))
    assert cfg.slice_fields == fields
    assert cfg.gpus_shared_by_memory is shared


def test_one_table_for_the_gates_of_each_version() -> None:
    assert dra_gates.slice_fields_kept((1, 34)) == frozenset()
    assert dra_gates.slice_fields_kept((1, 34), frozenset({dra_gates.DEVICE_TAINTS})) == {"taints"}
    assert dra_gates.slice_fields_kept((1, 32), frozenset({dra_gates.CONSUMABLE_CAPACITY})) == frozenset()
    assert dra_gates.slice_fields_kept((1, 36)) == ALL
    assert facts.EXTENDED_RESOURCE_MIN_KUBERNETES_VERSION == (1, 36)
