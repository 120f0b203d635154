"""The capacity policy: every claim template a workload uses fits the stack's GPU pools for its replicas.

`check_stack(resources)` takes what a Pulumi stack policy sees (objects with `resource_type` or `type`,
`props`, `urn`, `name`) and returns one `Violation` per problem. Each workload is checked alone, then
all workloads together in stack order (they share the pools): a workload that fits alone but not beside
the ones before it is reported as such.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from .allocator import AllocationError, NodeAllocator
from .claims import ClaimSpec
from .inventory import GpuPool
from .planner import Planner
from .stack import StackModel, Workload, model_from_resources

POLICY_NAME: Final = "gpu-claims-fit-node-pools"
POLICY_DESCRIPTION: Final = (
    "Every ResourceClaimTemplate used by a workload fits the stack's DRA GPU node pools for the workload's "
    "replicas (resource.k8s.io/v1 allocation against the devices the pools' instance types publish)."
)


@dataclass(frozen=True)
class Violation:
    message: str
    urn: str = ""

    def __str__(self) -> str:
        return self.message


def workload_claims(model: StackModel, workload: Workload) -> tuple[list[tuple[str, ClaimSpec]], list[str]]:
    claims: list[tuple[str, ClaimSpec]] = []
    missing: list[str] = []
    for ref in workload.claims:
        template = model.template_for(workload, ref)
        target = ref.template or ref.claim
        if template is None:
            kind = "ResourceClaimTemplate" if ref.template else "ResourceClaim"
            missing.append(
                f"{kind} {workload.namespace}/{target} (pod claim {ref.name}) is not part of the stack"
            )
            continue
        claims.append((f"{ref.name} ({template.name})", template.spec))
    return claims, missing


def missing_classes(model: StackModel, claims: list[tuple[str, ClaimSpec]]) -> list[str]:
    return sorted(
        {
            sub.device_class
            for _, spec in claims
            for request in spec.requests
            for sub in request.alternatives
            if sub.device_class not in model.classes
        }
    )


def check_model(model: StackModel, *, report_references: bool = True) -> list[Violation]:
    """Violations for `model`.

    With `report_references` False (the policy pack, where the claim-references policy owns them),
    workloads naming templates or DeviceClasses that do not exist are skipped instead of reported.
    Nothing is decided while relevant values are unknown (preview), or for stacks without a DRA pool
    (e.g. target=existing-cluster: the cluster's capacity is not part of the stack).
    """
    if model.undecided:
        return []
    violations = [Violation(message, urn) for urn, message in model.problems]
    if not model.workloads or not model.pools:
        return violations
    planner = Planner(model.classes)
    fitting_alone: list[tuple[Workload, list[tuple[str, ClaimSpec]]]] = []
    for workload in model.workloads:
        claims, missing = workload_claims(model, workload)
        classes = missing_classes(model, claims)
        if (missing or classes) and not report_references:
            continue
        if missing:
            violations.extend(Violation(f"{workload.label}: {m}", workload.urn) for m in missing)
            continue
        result = planner.fit(workload.label, claims, model.pools, workload.replicas)
        if not result.fits:
            wanted = (
                "one pod per GPU node" if workload.replicas is None else f"{workload.replicas} replica(s)"
            )
            detail = "; ".join(result.reasons()) or "does not fit"
            violations.append(
                Violation(
                    f"{workload.label} ({wanted}) does not fit the GPU node pools: {detail}", workload.urn
                )
            )
        else:
            fitting_alone.append((workload, claims))
    violations.extend(_together(model, planner, fitting_alone))
    return violations


def _together(
    model: StackModel, planner: Planner, workloads: list[tuple[Workload, list[tuple[str, ClaimSpec]]]]
) -> list[Violation]:
    """Place every workload's pods in stack order on each pool variant's maximum nodes, sharing devices."""
    if len(workloads) < 2:
        return []
    violations: list[Violation] = []
    # pools listing several instance types: try the i-th type of every pool in turn (not every combination)
    for index in range(max(len(v) for v in model.pools)):
        pools = [v[min(index, len(v) - 1)] for v in model.pools]
        placed = _place_all(planner, pools, workloads)
        for workload, got in placed:
            wanted = workload.replicas if workload.replicas is not None else sum(p.max_nodes for p in pools)
            if got < wanted:
                names = ", ".join(p.label for p in pools)
                violations.append(
                    Violation(
                        f"{workload.label}: fits alone, but beside the workloads before it only {got} of "
                        f"{wanted} "
                        f"replica(s) find devices on {names} at maximum size",
                        workload.urn,
                    )
                )
        if violations:
            break
    return violations


def _place_all(
    planner: Planner, pools: list[GpuPool], workloads: list[tuple[Workload, list[tuple[str, ClaimSpec]]]]
) -> list[tuple[Workload, int]]:
    allocators = [
        NodeAllocator(pool.node(i), planner.classes, planner.cache)
        for pool in pools
        for i in range(pool.max_nodes)
    ]
    placed: list[tuple[Workload, int]] = []
    for workload, claims in workloads:
        specs = [spec for _, spec in claims]
        got = 0
        if workload.replicas is None:
            for allocator in allocators:
                got += _try(allocator, specs)
        else:
            start = 0
            while got < workload.replicas and start < len(allocators):
                if _try(allocators[start], specs):
                    got += 1
                else:
                    start += 1  # a node that no longer fits this pod never fits it again
        placed.append((workload, got))
    return placed


def _try(allocator: NodeAllocator, specs: list[ClaimSpec]) -> int:
    try:
        return int(allocator.allocate(specs) is not None)
    except AllocationError:
        return 0


def check_stack(
    resources: Iterable[Any], catalog_config: Any = None, *, report_references: bool = False
) -> list[Violation]:
    """Violations of the capacity policy for a stack's resources (see the module docstring).

    `resources`: objects with `resource_type` (or `type`), `props` (inputs, camelCase), `urn` and `name`.
    `catalog_config`: the value of `vke-gpu-dra:gpuInstanceTypes`, if the stack sets it.
    """
    return check_model(model_from_resources(resources, catalog_config), report_references=report_references)
