"""Claim templates fit the GPU node pools: the capacity check of `vke-gpu-dra plan`, as a stack policy.

The check lives in the capacity planner (`vke_gpu_dra_planner.check_stack`); this module hands it the
stack's resources and the stack config's GPU catalog rows (`<project>:gpuInstanceTypes`). It reports
nothing it cannot decide: unknown values in preview, stacks without a DRA node pool, and references to
missing templates or DeviceClasses (claim-references reports those), and claims whose admission depends
on a Namespace outside the stack. Claims the API server refuses for the cluster's Kubernetes version
(adminAccess without the namespace label, distinctAttribute on 1.35, whose DRAConsumableCapacity is off;
a 1.34 API server keeps the field) and pods the default scheduler leaves pending are violations. The
stack config's `driver.featureGates` says whether the driver shares GPUs (its gate ConsumableShares:
several claims on one GPU, on Kubernetes 1.36 and later) and whether it carves MIG devices on demand (its
gate DynamicMIG: MIG placements as partitionable devices).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from vke_gpu_dra_core import facts, featuregates
from vke_gpu_dra_core import resources as r
from vke_gpu_dra_planner import check_stack

from .. import context
from . import Violation

DESCRIPTION: Final = (
    "Every ResourceClaimTemplate a workload uses fits the DRA GPU node pools for the workload's replicas."
)


def claims_fit(
    resources: Sequence[r.Res], _config: Mapping[str, Any], stack: context.StackInfo | None = None
) -> list[Violation]:
    """The capacity check over `resources` with `stack`'s config (the environment's stack when none)."""
    info = stack if stack is not None else context.STACK
    rows = info.config_value("gpuInstanceTypes")
    # the cluster resource's kubernetesVersion wins; the stack config's key stands in when it is absent
    version = info.config_value("cluster.kubernetesVersion")
    gates = _driver_gates(info)
    return [
        Violation(_with_sample_hint(v.message), v.urn or None)
        for v in check_stack(
            resources,
            rows,
            kubernetes_version=version,
            consumable_shares=gates.get(featuregates.CONSUMABLE_SHARES, False),
            dynamic_mig=gates.get(featuregates.DYNAMIC_MIG, False),
        )
    ]


#: What to do when the program's classic sample takes GPUs another workload needs.
CLASSIC_SAMPLE_HINT: Final = (
    f"{facts.SAMPLE_CLASSIC_DEPLOYMENT} is the program's classic sample ({facts.GPU_EXTENDED_RESOURCE}: 1, "
    f"one more GPU beside {facts.SAMPLE_DEPLOYMENT}): set sample.classicDeployment=auto (deployed only "
    "where the pool has a GPU for each sample at its maximum size) or off, or give the pool more GPUs "
    "(nodePool.maxReplicas, an instance type with more GPUs)"
)


def _with_sample_hint(message: str) -> str:
    if f"/{facts.SAMPLE_CLASSIC_DEPLOYMENT}" not in message:
        return message
    return f"{message}; {CLASSIC_SAMPLE_HINT}"


def _driver_gates(info: context.StackInfo) -> dict[str, bool]:
    """The driver gates the stack config's driver.featureGates sets (a value the config policy reports
    when it does not parse counts as setting none here)."""
    text = info.config_value("driver.featureGates")
    try:
        return featuregates.parse_explicit(text) if isinstance(text, str) else {}
    except featuregates.FeatureGateError:
        return {}
