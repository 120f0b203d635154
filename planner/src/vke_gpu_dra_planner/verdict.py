"""The stack plan, and the capacity policy's violations of it.

`plan_model(model)` plans a `StackModel` (`stack`): every claim template a workload uses must fit
the stack's GPU pools for its replicas. The `plan` command renders the `StackPlan`; the capacity policy
(`policy_names.CAPACITY`) reports its `plan_violations`. `check_stack(resources)` takes a stack's
registered resources (the policy pack's `Res` view, or anything `vke_gpu_dra_core.resources.read`
reads) and returns one `Violation` per problem. Claim templates go through the API server's admission
rules of the cluster's Kubernetes version (`admission`); every workload is checked alone (for the
reasons), then all workloads' pods are placed the way the default kube-scheduler places them
(`scheduler`), in stack order: a workload is fine only when all its pods are placed there.

Pods that ask an extended resource (`nvidia.com/gpu: 1` in a container's limits) get, from Kubernetes 1.36
(DRAExtendedResource), the claim kube-scheduler's DynamicResources plugin makes for them: one request
per container and resource, `container-<i>-request-<j>`, exactly that many devices of the DeviceClass
that maps the name (`extendedResourceName`, else the implicit `deviceclass.resource.kubernetes.io/<class>`);
the GPU nodes run no device plugin, so DRA is the only way there. Before 1.36, or where no class maps
the name, the nodes advertise none of it and the pods stay Pending (`Insufficient <name>`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from vke_gpu_dra_core import facts

from .admission import REFUSED, UNKNOWN, Admission, admit, as_published
from .claims import ClaimSpec, ClaimTemplate, DeviceClass, Request, SubRequest
from .fit import FitResult, Planner, template_subject
from .gates import FeatureGates, feature_gates, nearest_gates
from .inventory import GpuPool
from .mig import exhausted
from .placement import excluded
from .scheduler import DEFAULT, EMPTIEST, PACKING, Memo, Outcome, PodGroup, simulate
from .stack import StackModel, Workload, model_from_resources


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


#: the pod claim name the plan reports for the claim the scheduler makes
EXTENDED_CLAIM: Final = "extended resources (the scheduler's claim)"


def mapping_class(model: StackModel, resource: str) -> DeviceClass | None:
    """The DeviceClass that serves pods asking `resource`: an explicit extendedResourceName first (by
    name when several set it), else the class whose implicit name it is."""
    explicit = sorted(
        (c for c in model.classes.values() if c.extended_resource_name == resource), key=lambda c: c.name
    )
    if explicit:
        return explicit[0]
    return next((c for c in model.classes.values() if c.maps(resource)), None)


def extended_claim(
    model: StackModel, workload: Workload, gates: FeatureGates
) -> tuple[ClaimSpec | None, list[str]]:
    """The claim the scheduler makes for the workload's extended resources, or why the pods stay Pending.

    Only the resources a DeviceClass maps (or `nvidia.com/gpu`) are the GPU pools' business; others
    are left to whatever nodes advertise them. (None, []) when none is.
    """
    ours = [
        (c, name, n)
        for c, name, n in workload.extended
        if name == facts.GPU_EXTENDED_RESOURCE or mapping_class(model, name) is not None
    ]
    if not ours:
        return None, []
    if not gates.extended_resource:
        names = ", ".join(sorted({name for _, name, _ in ours}))
        return None, [
            f"its pods ask {names} in resources.limits; the DRA GPU nodes run no device plugin, so no node "
            f"advertises it, and {gates.state('DRAExtendedResource')} (a DeviceClass's "
            "extendedResourceName is dropped): the pods stay Pending (Insufficient "
            f"{names}); ask for the GPUs with a ResourceClaimTemplate, or run Kubernetes 1.36 or later"
        ]
    requests: list[Request] = []
    unmapped: list[str] = []
    per_container: dict[int, int] = {}
    for container, name, count in ours:
        class_ = mapping_class(model, name)
        if class_ is None:
            unmapped.append(name)
            continue
        index = per_container.get(container, 0)
        per_container[container] = index + 1
        request = f"container-{container}-request-{index}"
        requests.append(Request(request, (SubRequest(request, class_.name, count=count),)))
    if unmapped:
        names = ", ".join(sorted(set(unmapped)))
        return None, [
            f"its pods ask {names} in resources.limits, which no DeviceClass maps "
            "(spec.extendedResourceName) and no device plugin advertises on the DRA GPU nodes: "
            f"the pods stay Pending (Insufficient {names})"
        ]
    return ClaimSpec(tuple(requests)), []


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


@dataclass
class WorkloadPlan:
    """What happens to one workload's pods: the default scheduler's answer and the bounds around it."""

    workload: Workload
    #: fits | pending | refused | unknown | missing
    status: str
    wanted: int
    placed: int
    guaranteed: int
    best: int
    reasons: list[str]
    #: pods per pool (worst instance-type variant), and placed per variant when a pool mixes types
    per_pool: dict[str, int]
    mix: dict[str, int]
    hints: list[str]
    alone: FitResult | None = None

    @property
    def pending(self) -> int:
        return max(self.wanted - self.placed, 0)


@dataclass(frozen=True)
class TemplatePlan:
    """One claim template (or shared claim) alone on an empty pool, for the replicas the workloads want."""

    template: ClaimTemplate
    #: replicas (a shared claim: allocations) the stack's workloads want of it; None when none uses it
    wanted: int | None
    alone: FitResult
    admission: Admission


@dataclass
class StackPlan:
    """Everything planned for a stack: per workload, per template alone, and the admissions."""

    gates: FeatureGates
    workloads: list[WorkloadPlan]
    admissions: dict[str, Admission]
    violations: list[Violation]
    planner: Planner
    #: keys of the templates and claims some workload uses
    used: set[str]
    model: StackModel
    #: each template alone on an empty pool (only when asked for: the `plan` command's report)
    templates: list[TemplatePlan]
    #: per partitioned pool (label), per MIG profile: one-device claims that still fit after the
    #: workloads (each profile alone; "gpu" the whole GPU)
    mig_left: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        """The verdict: no violation, and every workload's pods placed."""
        return not plan_violations(self) and all(w.status == "fits" for w in self.workloads)

    @property
    def undecided(self) -> bool:
        """Nothing refused or pending, but some workload's admission depends on what the plan cannot see."""
        statuses = [w.status for w in self.workloads]
        return (
            UNKNOWN in statuses
            and not plan_violations(self)
            and all(status in ("fits", UNKNOWN) for status in statuses)
        )


def _wanted(workload: Workload, pools: Sequence[GpuPool]) -> int:
    if workload.replicas is not None:
        return workload.replicas
    return sum(p.max_nodes for p in pools if excluded(p, workload.placement) is None)


def _group(workload: Workload, pod: PodClaims) -> PodGroup:
    return PodGroup(
        workload.label,
        workload.kind,
        tuple(spec for _, spec in pod.claims),
        tuple((key, spec) for key, _, spec in pod.shared),
        workload.replicas,
        workload.placement,
        workload.requests,
        workload.nonzero,
    )


DEFAULT_EMPTIEST_TIES: Final = "default-emptiest-ties"
_RUNS: Final = (
    (DEFAULT, False, "the default profile, stack order"),
    (DEFAULT_EMPTIEST_TIES, False, "the default profile, ties to the emptiest node"),
    (PACKING, False, "bin-packing (most devices in use first)"),
    (EMPTIEST, False, "emptiest node first"),
    (DEFAULT, True, "the default profile, workloads in reverse order"),
    (PACKING, True, "bin-packing, workloads in reverse order"),
    (EMPTIEST, True, "emptiest node first, workloads in reverse order"),
)
_PACKING_PROFILE: Final = (
    "a scheduler profile with NodeResourcesFit scoringStrategy MostAllocated and PodTopologySpread "
    "defaultingType List without default constraints"
)


def plan_model(
    model: StackModel,
    gates: FeatureGates | None = None,
    *,
    report_references: bool = True,
    templates_alone: bool = False,
) -> StackPlan:
    """Every workload of `model` through the API server's admission and the scheduler's placement.

    With `templates_alone`, also every claim template alone on an empty pool (`StackPlan.templates`).
    """
    gates = gates or feature_gates(model.kubernetes_version, "the cluster's kubernetesVersion")
    # the pools' devices as the driver publishes them on this cluster (DynamicMIG needs shared counters);
    # the plan keeps the stack's own model, its pools as configured
    stated, model = (
        model,
        replace(model, pools=[[as_published(p, gates) for p in variants] for variants in model.pools]),
    )
    planner = Planner(
        model.classes,
        consumable_capacity=gates.consumable_capacity,
        partitionable_devices=gates.partitionable_devices,
        distinct_attribute=gates.distinct_attribute,
        rules=gates.allocator,
    )
    violations = [Violation(message, urn) for urn, message in model.problems]
    admissions = {key: admit(t, model.namespaces, gates) for key, t in model.templates.items()}
    plans: list[WorkloadPlan] = []
    simulated: list[tuple[WorkloadPlan, PodGroup]] = []
    first_variant = [v[0] for v in model.pools]
    for workload in model.workloads:
        pod, missing = workload_claims(model, workload)
        classes = missing_classes(model, pod)
        wanted = _wanted(workload, first_variant)
        plan = WorkloadPlan(workload, "pending", wanted, 0, 0, 0, [], {}, {}, [])
        if workload.extended:
            spec, unschedulable = extended_claim(model, workload, gates)
            elsewhere = all(excluded(p, workload.placement) is not None for v in model.pools for p in v)
            if not workload.claims and ((spec is None and not unschedulable) or (model.pools and elsewhere)):
                continue  # extended resources of other nodes, or pods kept off the GPU pools
            if unschedulable:
                plan.reasons = unschedulable
                plans.append(plan)
                continue
            if spec is not None:
                pod.claims.append((EXTENDED_CLAIM, spec))
        if missing or classes:
            if not report_references:
                continue
            plan.status = "missing"
            plan.reasons = missing or [
                f"request names DeviceClass {c}: could not retrieve device class {c}: "
                f"deviceclass.resource.k8s.io {c!r} not found"
                for c in classes
            ]
            plans.append(plan)
            continue
        refused = [
            admissions[t.key] for t in _templates(model, workload) if admissions[t.key].status == REFUSED
        ]
        if refused:
            plan.status = REFUSED
            plan.reasons = [f"the API server refuses it: {a.message}" for a in refused]
            plans.append(plan)
            continue
        if model.pools:
            plan.alone = planner.fit(
                workload.label,
                pod.claims,
                model.pools,
                workload.replicas,
                shared=[(n, s) for _, n, s in pod.shared],
                placement=workload.placement,
            )
        unknown = [
            a.message for t in _templates(model, workload) if (a := admissions[t.key]).status == UNKNOWN
        ]
        plan.reasons.extend(unknown)
        plan.hints.extend(
            f"{t.key}: {note}"
            for t in _templates(model, workload)
            for note in (*admissions[t.key].dropped, *admissions[t.key].notes)
        )
        plans.append(plan)
        simulated.append((plan, _group(workload, pod)))
    mig_left: dict[str, dict[str, int]] = {}
    if model.pools and simulated:
        _simulate(model, planner, simulated, mig_left)
    used = {t.key for w in model.workloads for t in _templates(model, w)}
    templates = (
        [_template_alone(model, planner, t, admissions[t.key]) for t in model.templates.values()]
        if templates_alone
        else []
    )
    return StackPlan(gates, plans, admissions, violations, planner, used, stated, templates, mig_left)


def _template_alone(
    model: StackModel, planner: Planner, template: ClaimTemplate, admission: Admission
) -> TemplatePlan:
    wanted = _template_wanted(model, template)
    alone = planner.fit(
        template_subject(template),
        [(template.name, template.spec)],
        model.pools,
        wanted if wanted is not None else 1,
    )
    return TemplatePlan(template, wanted, alone, admission)


def _template_wanted(model: StackModel, template: ClaimTemplate) -> int | None:
    total, used = 0, False
    for workload in model.workloads:
        for ref in workload.claims:
            if model.template_for(workload, ref) is template:
                used = True
                if workload.replicas is None:
                    total += sum(max(p.max_nodes for p in variants) for variants in model.pools)
                else:
                    total += 1 if template.shared else workload.replicas
    return total if used else None


def _templates(model: StackModel, workload: Workload) -> list[ClaimTemplate]:
    found = (model.template_for(workload, ref) for ref in workload.claims)
    return [t for t in found if t is not None]


_Runs = tuple[list[Outcome], list[list[GpuPool]], list[list[tuple[int, str]]]]


def _runs(model: StackModel, planner: Planner, groups: list[PodGroup]) -> _Runs:
    """Per pool variant the default run (worse of both tie-breaks), and per group every run's count."""
    variants = max(len(v) for v in model.pools)
    default_runs: list[Outcome] = []
    per_variant_pools: list[list[GpuPool]] = []
    bounds: list[list[tuple[int, str]]] = [[] for _ in groups]
    for index in range(variants):
        pools = [v[min(index, len(v) - 1)] for v in model.pools]
        per_variant_pools.append(pools)
        memo = Memo()
        for strategy, reverse, name in _RUNS:
            order = groups[::-1] if reverse else groups
            if strategy == DEFAULT_EMPTIEST_TIES:
                outcome = simulate(planner, pools, order, DEFAULT, ties=EMPTIEST, memo=memo)
            else:
                first = strategy == DEFAULT and not reverse
                outcome = simulate(planner, pools, order, strategy, memo=memo, mig_left=first)
            placed = outcome.placed[::-1] if reverse else outcome.placed
            if strategy == DEFAULT and not reverse:
                default_runs.append(outcome)
            elif strategy == DEFAULT_EMPTIEST_TIES:
                # the scheduler breaks ties at random: fit only when both tie-breaks fit
                default_runs[-1] = _worse(default_runs[-1], outcome)
            for gi, count in enumerate(placed):
                bounds[gi].append((count, name))
    return default_runs, per_variant_pools, bounds


def _simulate(
    model: StackModel,
    planner: Planner,
    simulated: list[tuple[WorkloadPlan, PodGroup]],
    mig_left: dict[str, dict[str, int]],
) -> None:
    default_runs, per_variant_pools, bounds = _runs(model, planner, [g for _, g in simulated])
    variants = len(default_runs)
    for gi, (plan, _) in enumerate(simulated):
        # a pool of several instance types: the verdict takes the variant that places fewest
        worst = min(range(variants), key=lambda i: default_runs[i].placed[gi])
        outcome, pools = default_runs[worst], per_variant_pools[worst]
        plan.wanted, plan.placed = outcome.wanted[gi], outcome.placed[gi]
        plan.per_pool = {p.label: n for p, n in zip(pools, outcome.per_pool[gi], strict=True)}
        if variants > 1:
            plan.mix = {
                " + ".join(p.instance_type for p in per_variant_pools[i]): default_runs[i].placed[gi]
                for i in range(variants)
            }
        low = min(bounds[gi])
        high = max(bounds[gi], key=lambda b: (b[0], "bin-packing" in b[1]))
        plan.guaranteed, plan.best = min(low[0], plan.placed), max(high[0], plan.placed)
        if plan.guaranteed < plan.placed:
            plan.hints.append(
                f"only {plan.guaranteed} placed with {low[1]}: the count depends on the scheduler's "
                "choices (the order the pods are created in, ties between equal nodes, its profile)"
            )
        if plan.best > plan.placed:
            how = _PACKING_PROFILE if "bin-packing" in high[1] else "creating the workloads in another order"
            plan.hints.append(f"{plan.best} would be placed with {high[1]}: {how}")
        if plan.placed >= plan.wanted:
            plan.status = UNKNOWN if plan.reasons else "fits"
            continue
        plan.status = "pending"
        alone = plan.alone
        if alone is not None and not alone.fits:
            plan.reasons = [*(alone.reasons() or ["does not fit"]), *plan.reasons]
        else:
            names = ", ".join(p.label for p in pools)
            before = [
                f"{group.label} ({sum(outcome.per_pool[gj])})"
                for gj, (_, group) in enumerate(simulated[:gi])
                if sum(outcome.per_pool[gj])
            ]
            taking = f"; the pods placed before it: {', '.join(before)}" if before else ""
            plan.reasons.insert(
                0,
                f"fits alone, but beside the workloads before it only {plan.placed} of {plan.wanted} "
                f"replica(s) find devices on {names} at maximum size{taking}",
            )
        short = outcome.exhausted[gi] if outcome.exhausted else ()
        if short:
            nodes = sorted({node for node, _, _ in short})
            shown = "; ".join(
                f"{node}: {exhausted((s, c) for n, s, c in short if n == node)}" for node in nodes[:3]
            )
            more = f" (and {len(nodes) - 3} more nodes)" if len(nodes) > 3 else ""
            plan.reasons.insert(1, f"the MIG placements left need counters already consumed: {shown}{more}")
    if default_runs and default_runs[0].mig_left:
        for pool, left in zip(per_variant_pools[0], default_runs[0].mig_left, strict=True):
            if left:
                mig_left[pool.label] = dict(left)


def _worse(first: Outcome, second: Outcome) -> Outcome:
    """Per workload, the run that placed fewer of its pods."""
    pairs = list(zip(first.placed, second.placed, strict=True))
    pick = [a <= b for a, b in pairs]
    return Outcome(
        tuple(min(p) for p in pairs),
        tuple(a if k else b for a, b, k in zip(first.per_pool, second.per_pool, pick, strict=True)),
        first.wanted,
        tuple(a if k else b for a, b, k in zip(first.exhausted, second.exhausted, pick, strict=True)),
        first.mig_left,
    )


def check_model(
    model: StackModel, *, report_references: bool = True, gates: FeatureGates | None = None
) -> list[Violation]:
    """Violations for `model`.

    With `report_references` False (the policy pack, where the claim-references policy owns them),
    workloads naming templates or DeviceClasses that do not exist are skipped instead of reported.
    Nothing is decided while relevant values are unknown (preview), or for stacks without a DRA pool
    (e.g. target=existing-cluster: the cluster's capacity is not part of the stack). A workload whose
    admission cannot be decided (a Namespace outside the stack) is not a violation.
    """
    if model.undecided:
        return []
    if not model.workloads or not model.pools:
        return [Violation(message, urn) for urn, message in model.problems]
    gated = any(
        c.distinct_attribute is not None for t in model.templates.values() for c in t.spec.constraints
    )
    if model.version_unknown and gated:
        return [Violation(message, urn) for urn, message in model.problems]
    # versions before 1.34 are the kubernetes-version policy's to report
    gates = gates or nearest_gates(model.kubernetes_version)
    return plan_violations(plan_model(model, gates, report_references=report_references))


def plan_violations(plan: StackPlan) -> list[Violation]:
    """The policy's violations of a plan: refused templates and workloads, and pods left pending."""
    violations = list(plan.violations)
    for key, admission in plan.admissions.items():
        if admission.status == REFUSED and key not in plan.used:
            violations.append(
                Violation(f"claim template {key}: the API server refuses it: {admission.message}")
            )
    for wp in plan.workloads:
        workload = wp.workload
        if wp.status in ("missing", REFUSED):
            violations.extend(Violation(f"{workload.label}: {m}", workload.urn) for m in wp.reasons)
        elif wp.status == "pending":
            alone = wp.alone
            if alone is not None and not alone.fits:
                wanted = (
                    "one pod per GPU node" if workload.replicas is None else f"{workload.replicas} replica(s)"
                )
                detail = "; ".join(alone.reasons()) or "does not fit"
                violations.append(
                    Violation(
                        f"{workload.label} ({wanted}) does not fit the GPU node pools: {detail}", workload.urn
                    )
                )
            else:
                violations.append(Violation(f"{workload.label}: {wp.reasons[0]}", workload.urn))
    return violations


def check_stack(
    resources: Iterable[Any],
    catalog_config: Any = None,
    *,
    report_references: bool = False,
    kubernetes_version: Any = None,
    consumable_shares: bool = False,
    dynamic_mig: bool = False,
) -> list[Violation]:
    """Violations of the capacity policy for a stack's resources (see the module docstring).

    `resources`: `vke_gpu_dra_core.resources.Res` or anything `read` reads (`resource_type` or `type`,
    `props` (inputs, camelCase), `urn`, `name`, `dependencies`).
    `catalog_config`: the value of `vke-gpu-dra:gpuInstanceTypes`, if the stack sets it.
    `consumable_shares`: the driver runs with its gate ConsumableShares (`driver.featureGates`).
    `dynamic_mig`: the driver runs with its gate DynamicMIG (MIG placements as partitionable devices).
    """
    model = model_from_resources(resources, catalog_config)
    if consumable_shares:
        model.share_gpus(True)
    if dynamic_mig:
        model.partition_gpus(True)
    if model.kubernetes_version is None and kubernetes_version is not None:
        model.kubernetes_version = str(kubernetes_version)
    return check_model(model, report_references=report_references)
