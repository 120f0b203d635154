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
from .placement import excluded
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


@dataclass
class PodClaims:
    """A workload's pod claims: per-pod ones (from templates) and shared ResourceClaims (key, name, spec)."""

    claims: list[tuple[str, ClaimSpec]]
    shared: list[tuple[str, str, ClaimSpec]]

    def all(self) -> list[tuple[str, ClaimSpec]]:
        return [*self.claims, *((name, spec) for _, name, spec in self.shared)]


def workload_claims(model: StackModel, workload: Workload) -> tuple[PodClaims, list[str]]:
    pod = PodClaims([], [])
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
        name = f"{ref.name} ({template.name})"
        if template.shared:
            pod.shared.append((template.key, name, template.spec))
        else:
            pod.claims.append((name, template.spec))
    return pod, missing


def missing_classes(model: StackModel, pod: PodClaims) -> list[str]:
    return sorted(
        {
            sub.device_class
            for _, spec in pod.all()
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
    fitting_alone: list[tuple[Workload, PodClaims]] = []
    for workload in model.workloads:
        pod, missing = workload_claims(model, workload)
        classes = missing_classes(model, pod)
        if (missing or classes) and not report_references:
            continue
        if missing:
            violations.extend(Violation(f"{workload.label}: {m}", workload.urn) for m in missing)
            continue
        result = planner.fit(
            workload.label,
            pod.claims,
            model.pools,
            workload.replicas,
            shared=[(n, s) for _, n, s in pod.shared],
            placement=workload.placement,
        )
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
            fitting_alone.append((workload, pod))
    violations.extend(_together(model, planner, fitting_alone))
    return violations


def _together(
    model: StackModel, planner: Planner, workloads: list[tuple[Workload, PodClaims]]
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
            wanted = (
                workload.replicas
                if workload.replicas is not None
                # a DaemonSet wants one pod on each node of the pools it may run on
                else sum(p.max_nodes for p in pools if excluded(p, workload.placement) is None)
            )
            if got < wanted:
                names = ", ".join(p.label for p in pools)
                violations.append(
                    Violation(
                        f"{workload.label}: fits alone, but beside the workloads before it only {got} of "
                        f"{wanted} replica(s) find devices on {names} at maximum size",
                        workload.urn,
                    )
                )
        if violations:
            break
    return violations


def _place_all(
    planner: Planner, pools: list[GpuPool], workloads: list[tuple[Workload, PodClaims]]
) -> list[tuple[Workload, int]]:
    """First fit of every pod, in stack order; a shared ResourceClaim pins its pods to its node."""
    nodes = [(pool, i) for pool in pools for i in range(pool.max_nodes)]
    allocators = [NodeAllocator(pool.node(i), planner.classes, planner.cache) for pool, i in nodes]
    shared_at: dict[str, int] = {}
    placed: list[tuple[Workload, int]] = []
    for workload, pod in workloads:
        specs = [spec for _, spec in pod.claims]
        pending = [(key, spec) for key, _, spec in pod.shared if key not in shared_at]
        pinned = {shared_at[key] for key, _, _ in pod.shared if key in shared_at}
        if len(pinned) > 1:  # its shared claims sit on different nodes
            placed.append((workload, 0))
            continue
        allowed = [n for n, (pool, _) in enumerate(nodes) if excluded(pool, workload.placement) is None]
        candidates = sorted(pinned & set(allowed)) if pinned else allowed
        wanted = len(candidates) if workload.replicas is None else workload.replicas
        got, position = 0, 0
        while got < wanted and position < len(candidates):
            node = candidates[position]
            extra = [spec for _, spec in pending]
            if _try(allocators[node], specs + extra):
                got += 1
                shared_at.update({key: node for key, _ in pending})
                if pending:
                    candidates, position, pending = [node], 0, []
                if workload.replicas is None:
                    position += 1  # one pod per node
            else:
                position += 1  # a node that no longer fits this pod never fits it again
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
