"""The GPUs of the stack's GPU node pool, from its config: per node for each instance type it lists,
and in all at the pool's maximum size (`nodePool.maxReplicas`).

One definition for the capacity planner (its pool variants, `vke_gpu_dra_planner.stack.pools_from_config`)
and the program (whether the sample's classic Deployment fits beside `gpu-test`). A node publishes the
catalog row's GPUs (`gpuInstanceTypes` rows override the built-in catalog), or with
`driver.deviceSource=simulated` the simulated count whatever its type. A pool listing several instance
types may get any of them, so its size counts the smallest (the planner's worst variant).
"""

from __future__ import annotations

from dataclasses import dataclass

from .catalog import InstanceType, load_catalog, lookup
from .config.stack_config import StackConfig


@dataclass(frozen=True)
class PoolVariant:
    """The nodes of one instance type of the pool: their GPU product and how many each publishes."""

    instance_type: str
    product: str
    gpus_per_node: int
    #: The catalog row (None with driver.deviceSource=simulated).
    row: InstanceType | None = None
    #: Why the count is not the catalog's ("" when it is).
    note: str = ""


def pool_variants(cfg: StackConfig) -> list[PoolVariant]:
    """One variant per `nodePool.instanceTypes` entry; raises CatalogError for a type the catalog lacks
    (or bad `gpuInstanceTypes` rows)."""
    driver = cfg.driver
    if driver.device_source == "simulated":
        product, gpus = driver.simulated_product, driver.simulated_gpus
        note = f"driver.deviceSource=simulated: every node publishes {gpus}x {product}, whatever its type"
        return [PoolVariant(t, product, gpus, None, note) for t in cfg.node_pool.instance_types]
    catalog = load_catalog(cfg.gpu_instance_types)
    variants = []
    for instance_type in cfg.node_pool.instance_types:
        row = lookup(instance_type, catalog)
        variants.append(PoolVariant(instance_type, row.product, row.gpus, row))
    return variants


def gpus_at_max_size(cfg: StackConfig) -> int:
    """The GPUs the pool has at `nodePool.maxReplicas` nodes of its smallest instance type (0 without
    instance types); raises CatalogError as `pool_variants` does."""
    variants = pool_variants(cfg)
    if not variants:
        return 0
    return min(v.gpus_per_node for v in variants) * cfg.node_pool.max_replicas
