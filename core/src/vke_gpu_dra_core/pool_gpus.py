"""The GPUs of the stack's GPU node pool, from its config: per node for each instance type it lists,
and in all at the pool's maximum size (`nodePool.maxReplicas`).

One definition for the capacity planner (its pool variants, `vke_gpu_dra_planner.stack.pools_from_config`)
and the program: whether the sample's classic Deployment fits beside `gpu-test` (`classic_sample`, which
the program and the planner's model of the program's sample both follow). A node publishes the
catalog row's GPUs (`gpuInstanceTypes` rows override the built-in catalog), or with
`driver.deviceSource=simulated` the simulated count whatever its type. A pool listing several instance
types may get any of them, so its size counts the smallest (the planner's worst variant).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from . import facts
from .catalog import CatalogError, InstanceType, load_catalog, lookup
from .config.keys import CLASSIC_SAMPLE_OFF, CLASSIC_SAMPLE_ON, IMPLEMENTATION_NVIDIA
from .config.stack_config import TARGET_VKE, StackConfig

#: GPUs the program's sample Deployments take: gpu-test's one pod with one claim of one GPU, and
#: gpu-test-classic's one pod asking nvidia.com/gpu: 1.
SAMPLE_GPUS: Final = 1
SAMPLE_CLASSIC_GPUS: Final = 1


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


@dataclass(frozen=True)
class ClassicSample:
    """Whether the program deploys gpu-test-classic, and why `auto` leaves it out ("" otherwise)."""

    deployed: bool
    skipped: str = ""


def classic_sample(cfg: StackConfig) -> ClassicSample:
    """gpu-test-classic runs where the program's gpu.nvidia.com maps nvidia.com/gpu (the python driver;
    NVIDIA's chart owns its DeviceClasses) and sample.classicDeployment allows it: 'on' always, 'auto'
    when the stack's GPU node pool has a GPU for each sample at its maximum size (`gpus_at_max_size`)."""
    mode, name = cfg.sample.classic_deployment, facts.SAMPLE_CLASSIC_DEPLOYMENT
    mapped = cfg.driver.implementation != IMPLEMENTATION_NVIDIA and cfg.gpu_extended_resource
    if not cfg.sample.enabled or not mapped or mode == CLASSIC_SAMPLE_OFF:
        return ClassicSample(False)
    if mode == CLASSIC_SAMPLE_ON:
        return ClassicSample(True)
    needed = SAMPLE_GPUS + SAMPLE_CLASSIC_GPUS
    if cfg.target != TARGET_VKE:
        return ClassicSample(
            False,
            f"{name} left out: target={cfg.target} has no node pool of this stack to size for {needed} "
            "GPUs; set sample.classicDeployment=on to deploy it",
        )
    try:
        gpus = gpus_at_max_size(cfg)
    except CatalogError as exc:
        return ClassicSample(False, f"{name} left out: the node pool's GPUs are unknown ({exc})")
    if gpus >= needed:
        return ClassicSample(True)
    pool = cfg.node_pool
    return ClassicSample(
        False,
        f"{name} left out: the samples need {needed} GPUs and node pool {pool.name} has {gpus} at "
        f"nodePool.maxReplicas={pool.max_replicas}; raise nodePool.maxReplicas, pick an instance type "
        "with more GPUs, or set sample.classicDeployment=on",
    )
