"""The stack's GPU pool from its config: GPUs per node per instance type, and in all at maximum size."""

from __future__ import annotations

from typing import Any

import pytest
from vke_gpu_dra_core import config as config_mod
from vke_gpu_dra_core import pool_gpus
from vke_gpu_dra_core.catalog import CatalogError
from vke_gpu_dra_planner.stack import pools_from_config

from tests.program import harness


def dev(overrides: dict[str, Any]) -> config_mod.StackConfig:
    return config_mod.load(harness.stack_raw_config("dev", overrides))


@pytest.mark.parametrize(
    ("overrides", "gpus"),
    [
        ({}, 1),  # one node of one A10
        ({"nodePool.maxReplicas": 3}, 3),
        ({"nodePool.instanceTypes": ["ecs.pni2.28xlarge"], "nodePool.maxReplicas": 2}, 16),
        # either type may come: the smaller decides
        ({"nodePool.instanceTypes": ["ecs.pni2.28xlarge", "ecs.gni2.3xlarge"], "nodePool.maxReplicas": 2}, 2),
        ({"driver.deviceSource": "simulated", "driver.simulatedGpus": 4, "nodePool.maxReplicas": 2}, 8),
    ],
)
def test_gpus_at_max_size(overrides: dict[str, Any], gpus: int) -> None:
    assert pool_gpus.gpus_at_max_size(dev(overrides)) == gpus


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"nodePool.instanceTypes": ["ecs.pni2.28xlarge", "ecs.gni2.3xlarge"]},
        {"driver.deviceSource": "simulated"},
    ],
)
def test_the_planner_pools_are_the_same_variants(overrides: dict[str, Any]) -> None:
    cfg = dev(overrides)
    variants = pool_gpus.pool_variants(cfg)
    pools = pools_from_config(cfg)
    assert [(p.instance_type, p.product, p.gpus_per_node) for p in pools] == [
        (v.instance_type, v.product, v.gpus_per_node) for v in variants
    ]
    assert {p.max_nodes for p in pools} == {cfg.node_pool.max_replicas}


def test_a_type_outside_the_catalog_names_the_catalog_key() -> None:
    with pytest.raises(CatalogError, match="gpuInstanceTypes"):
        pool_gpus.gpus_at_max_size(dev({"nodePool.instanceTypes": ["ecs.gni2.99xlarge"]}))
