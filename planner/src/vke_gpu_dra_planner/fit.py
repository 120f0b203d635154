"""Does it fit? Replicas of claim templates against the GPU pools, with reasons when they do not.

Per pool variant the pool's nodes are filled pod by pod (first fit: the scheduler's allocator on each
node in turn). Nodes that publish the same selector-visible devices fill the same way, so the count for
one node stands for all its equals (1,000 identical nodes cost one node's search).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Version
from vke_gpu_dra_core.quantity import QuantityError, format_bytes, parse_quantity

from .allocator import AllocationError, ClaimResult, NodeAllocator, describe_constraint, lookup_attribute
from .cel.environment import SelectorError, SelectorRuntimeError
from .claims import ClaimSpec, ClaimTemplate, DeviceClass, SubRequest
from .gates import AllocatorRules
from .inventory import GpuPool, Node
from .mig import exhausted
from .placement import Placement, excluded
from .selection import DeviceView, SelectorCache, observed_ids
from .semver import SemverError, parse_semver

#: Attributes that only identify a device (a selector naming them sees every device differently).
_IDENTITY_IDS: Final = frozenset({facts.ATTR_UUID, facts.ATTR_PARENT_UUID})
#: Pods per node when claims need no device at all (the kubelet's default maxPods).
MAX_PODS_PER_NODE: Final = 110


@dataclass(frozen=True)
class PoolFit:
    pool: GpuPool
    per_node: int
    at_min: int
    at_max: int
    #: devices of the first pod on the first node, per claim: (claim name, request, device)
    chosen: tuple[tuple[str, str, str], ...] = ()
    reasons: tuple[str, ...] = ()
    error: str | None = None
    #: the pods' nodeSelector, affinity or tolerations rule the pool out
    ruled_out: bool = False


@dataclass(frozen=True)
class FitResult:
    """One pod shape (a template, or a workload's claims) against the stack's pools."""

    subject: str
    replicas: int | None
    pools: tuple[PoolFit, ...]
    problems: tuple[str, ...] = ()
    #: True when the pods share a claim: they all run on one node, so pools do not add up
    pinned: bool = False

    @property
    def at_min(self) -> int:
        return _sum_worst(self.pools, "at_min", self.pinned)

    @property
    def at_max(self) -> int:
        return _sum_worst(self.pools, "at_max", self.pinned)

    @property
    def error(self) -> str | None:
        return next((p.error for p in self.pools if p.error), None) or (
            self.problems[0] if self.problems else None
        )

    @property
    def fits(self) -> bool:
        if self.problems or any(p.error for p in self.pools) or not self.pools:
            return False
        if self.replicas is None:  # one pod per node it may run on; pools ruled out get none
            allowed = self._daemonset_pools()
            return bool(allowed) and all(p.per_node >= 1 for p in allowed)
        return self.at_max >= self.replicas

    def _daemonset_pools(self) -> list[PoolFit]:
        return [p for p in self.pools if not p.ruled_out]

    def reasons(self) -> list[str]:
        if self.problems:
            return list(self.problems)
        if not self.pools:
            return [
                "the stack has no GPU node pool that runs the DRA driver (labels "
                "vke.node.gpu.schedule=nvidia-dra and nvidia.com/gpu.present=true)"
            ]
        out: list[str] = []
        allowed = self._daemonset_pools() if self.replicas is None else []
        for p in self.pools:
            if allowed and p.ruled_out:  # a DaemonSet's pods simply do not go there
                continue
            if p.error:
                out.append(f"{p.pool.label}: allocation error: {p.error}")
            elif p.per_node == 0:
                out.extend(f"{p.pool.label}: {r}" for r in p.reasons)
            elif self.replicas is not None and self.at_max < self.replicas:
                out.append(
                    f"{p.pool.label}: {self.replicas} replicas wanted, {p.per_node} fit per node, "
                    f"{p.at_max} on the pool's maximum of {p.pool.max_nodes} nodes"
                )
        return out


def _sum_worst(pools: Sequence[PoolFit], attribute: str, pinned: bool = False) -> int:
    """Pools are groups of variants (one per instance type); count the worst variant of each pool."""
    by_pool: dict[str, int] = {}
    for p in pools:
        value = getattr(p, attribute)
        by_pool[p.pool.name] = min(by_pool.get(p.pool.name, value), value)
    if pinned:
        return max(by_pool.values(), default=0)
    return sum(by_pool.values())


@dataclass
class Planner:
    classes: Mapping[str, DeviceClass]
    cache: SelectorCache = field(default_factory=SelectorCache)
    #: the DRAConsumableCapacity feature gate (off in 1.34 and 1.35): shared devices, requests' capacity
    consumable_capacity: bool = False
    #: the DRAPartitionableDevices feature gate (off in 1.34): devices' shared counters are kept
    partitionable_devices: bool = False
    #: what becomes of `distinctAttribute` (`FeatureGates.distinct_attribute`; None: as the gate says)
    distinct_attribute: str | None = None
    #: the release's allocator behaviour (`FeatureGates.allocator`; None: the newest release's)
    rules: AllocatorRules | None = None
    _pool_class_ids: dict[tuple[str, str, int, int, bool, bool], tuple[int, ...]] = field(
        default_factory=dict, repr=False
    )

    def fit(
        self,
        subject: str,
        claims: Sequence[tuple[str, ClaimSpec]],
        pools: Sequence[Sequence[GpuPool]],
        replicas: int | None,
        *,
        shared: Sequence[tuple[str, ClaimSpec]] = (),
        placement: Placement | None = None,
    ) -> FitResult:
        """Replicas of a pod with `claims` (one each per pod) and `shared` claims (allocated once).

        `placement` (node selector, affinity, tolerations) rules out pools the pods cannot run on.
        """
        fits = []
        for variants in pools:
            for pool in variants:
                reason = excluded(pool, placement) if placement is not None else None
                if reason is not None:
                    fits.append(PoolFit(pool, 0, 0, 0, reasons=(reason,), ruled_out=True))
                elif shared:
                    fits.append(self._shared_fit(pool, claims, shared))
                else:
                    fits.append(self._pool_fit(pool, claims))
        return FitResult(subject, replicas, tuple(fits), pinned=bool(shared))

    def _allocator(self, node: Node) -> NodeAllocator:
        return NodeAllocator(
            node,
            self.classes,
            self.cache,
            consumable_capacity=self.consumable_capacity,
            partitionable_devices=self.partitionable_devices,
            distinct_attribute=self.distinct_attribute,
            rules=self.rules,
        )

    def _shared_fit(
        self, pool: GpuPool, claims: Sequence[tuple[str, ClaimSpec]], shared: Sequence[tuple[str, ClaimSpec]]
    ) -> PoolFit:
        """Shared claims are allocated with the first pod; every later pod must run on that node."""
        if pool.max_nodes < 1:
            return PoolFit(pool, 0, 0, 0, reasons=("the pool has no nodes at its maximum size",))
        node = pool.node(0)
        everything = [*shared, *claims]
        specs = [spec for _, spec in claims]
        allocator = self._allocator(node)
        try:
            first = allocator.allocate([spec for _, spec in everything])
            if first is None:
                # the allocator that just failed holds the node's devices and selections: ask it why
                return PoolFit(
                    pool, 0, 0, 0, reasons=tuple(self.explain(allocator, [s for _, s in everything]))
                )
            count = 1
            # pods until allocation fails: adminAccess requests do not use devices up (maxPods bounds them)
            while count < MAX_PODS_PER_NODE and allocator.allocate(specs) is not None:
                count += 1
        except AllocationError as exc:
            return PoolFit(pool, 0, 0, 0, error=str(exc))
        chosen = tuple(
            (name, d.request, f"{node.name}/{d.device}")
            for (name, _), result in zip(everything, first, strict=True)
            for d in result.devices
        )
        return PoolFit(pool, count, count if pool.min_nodes >= 1 else 0, count, chosen)

    def _pool_fit(self, pool: GpuPool, claims: Sequence[tuple[str, ClaimSpec]]) -> PoolFit:
        specs = [spec for _, spec in claims]
        per_node_counts: dict[object, int] = {}
        counts: list[int] = []
        chosen: tuple[tuple[str, str, str], ...] = ()
        #: the first node's allocator: where a pod that fits no node is explained
        first_node = self._allocator(pool.node(0))
        by_class = self._uuid_blind(specs)
        classes = self._pool_classes(pool) if by_class else None
        try:
            for index in range(max(pool.max_nodes, 1)):
                signature = (
                    classes[index] if classes is not None else self._signature(pool.node(index), specs)
                )
                if signature not in per_node_counts:
                    node = pool.node(index)
                    count, first = self._fill(first_node if index == 0 else self._allocator(node), specs)
                    per_node_counts[signature] = count
                    if index == 0 and first is not None:
                        chosen = tuple(
                            (name, d.request, f"{node.name}/{d.device}")
                            for (name, _), result in zip(claims, first, strict=True)
                            for d in result.devices
                        )
                counts.append(per_node_counts[signature])
        except AllocationError as exc:
            return PoolFit(pool, 0, 0, 0, error=str(exc))
        per_node = counts[0] if counts else 0
        # nothing was placed on the first node, so its allocator holds nothing in use
        reasons = tuple(self.explain(first_node, specs)) if per_node == 0 else ()
        return PoolFit(
            pool, per_node, sum(counts[: pool.min_nodes]), sum(counts[: pool.max_nodes]), chosen, reasons
        )

    def uuid_blind(self, specs: Sequence[ClaimSpec]) -> bool:
        return self._uuid_blind(specs)

    def _uuid_blind(self, specs: Sequence[ClaimSpec]) -> bool:
        """True when no selector or constraint of `specs` can tell devices apart by UUID alone."""
        expressions, attributes = self._inputs(specs)
        for expression in expressions:
            observed = observed_ids(expression)
            if observed is None or any(ident in _IDENTITY_IDS for _, _, ident in observed):
                return False
        return not any(a.rpartition("/")[2] in _IDENTITY_IDS for a in attributes)

    def _pool_classes(self, pool: GpuPool) -> tuple[int, ...]:
        """Each node's class (`_node_class`) as a small number, per node index of the pool at maximum size.

        Computed once per pool variant (its nodes follow from name, product, GPUs and index), so the
        templates planned against it compare numbers, not devices.
        """
        key = (
            pool.name,
            pool.product,
            pool.gpus_per_node,
            max(pool.max_nodes, 1),
            pool.consumable_shares,
            pool.dynamic_mig,
        )
        stored = self._pool_class_ids.get(key)
        if stored is None:
            numbers: dict[object, int] = {}
            stored = tuple(
                numbers.setdefault(self._node_class(pool.node(i)), len(numbers)) for i in range(key[3])
            )
            self._pool_class_ids[key] = stored
        return stored

    @staticmethod
    def _node_class(node: Node) -> object:
        """Nodes whose devices agree on everything but their UUIDs (and names) allocate alike."""
        devices = tuple(
            (
                d.name,
                tuple(sorted((k, repr(v)) for k, v in d.attributes.items() if k not in _IDENTITY_IDS)),
                tuple(sorted(d.capacity.items())),
                node.sharing_of(i),
            )
            for i, d in enumerate(node.devices)
        )
        return (devices, node.counters)

    def _signature(self, node: Node, specs: Sequence[ClaimSpec]) -> tuple[object, ...]:
        expressions, attributes = self._inputs(specs)
        allocator = self._allocator(node)
        parts: list[object] = []
        for view in allocator.views:
            keys = tuple(self.cache.cache_key(e, view)[1:] for e in expressions)
            values = tuple(repr(lookup_attribute(view.device, node.driver, a)) for a in attributes)
            parts.append((view.device.name, keys, values))
        return tuple(parts)

    def _inputs(self, specs: Sequence[ClaimSpec]) -> tuple[list[str], list[str]]:
        expressions: list[str] = []
        attributes: list[str] = []
        for spec in specs:
            for request in spec.requests:
                for sub in request.alternatives:
                    class_ = self.classes.get(sub.device_class)
                    expressions.extend((*(class_.selectors if class_ else ()), *sub.selectors))
            attributes.extend(c.attribute for c in spec.constraints)
        return sorted(set(expressions)), sorted(set(attributes))

    @staticmethod
    def _fill(allocator: NodeAllocator, specs: Sequence[ClaimSpec]) -> tuple[int, list[ClaimResult] | None]:
        # pods until allocation fails: adminAccess requests do not use devices up (maxPods bounds them)
        count, first = 0, None
        while count < MAX_PODS_PER_NODE:
            result = allocator.allocate(specs)
            if result is None:
                break
            first = first or result
            count += 1
        return count, first

    # --- explanations -----------------------------------------------------------------------

    def explain(self, allocator: NodeAllocator, specs: Sequence[ClaimSpec]) -> list[str]:
        """Why one pod does not fit on the empty node of `allocator`: the first thing that rules it out.

        `allocator` is the one whose allocation just failed (nothing in use): its device views are
        reused, and the selector answers come from the cache the allocation filled.
        """
        node = allocator.node
        reasons: list[str] = []
        for spec in specs:
            needed = 0
            for request in spec.requests:
                problems = []
                satisfiable = False
                for ai, sub in enumerate(request.alternatives):
                    name = request.result_name(ai)
                    problem = self._explain_sub(allocator, name, sub)
                    if problem is None:
                        satisfiable = True
                        needed += sub.count if not sub.wants_all else 1
                        break
                    problems.append(problem)
                if not satisfiable:
                    reasons.append(
                        "; ".join(problems)
                        if len(problems) > 1 or not request.first_available
                        else problems[0]
                    )
            if not reasons and allocator.exhausted:
                reasons.append(
                    "the MIG placements that match need counters that are exhausted: "
                    + exhausted(allocator.exhausted)
                )
            elif not reasons and spec.constraints:
                constraints = ", ".join(describe_constraint(c) for c in spec.constraints)
                reasons.append(
                    f"each request fits alone, but not together under the constraint(s) {constraints}"
                )
            elif not reasons and needed > len(node.devices):
                reasons.append(f"the requests need {needed} devices together, a node has {len(node.devices)}")
        return reasons or ["the claims do not fit together on one node"]

    def _explain_sub(self, allocator: NodeAllocator, name: str, sub: SubRequest) -> str | None:
        class_ = self.classes.get(sub.device_class)
        if class_ is None:
            return f"request {name}: device class {sub.device_class} does not exist"
        views = allocator.views
        candidates = list(views)
        for expression in class_.selectors:
            candidates = [v for v in candidates if self._safe_match(expression, v)]
            if not candidates:
                return (
                    f"request {name}: no device matches device class {class_.name} (selector {expression!r})"
                    f"{_hint(expression, views)}"
                )
        for expression in sub.selectors:
            remaining = [v for v in candidates if self._safe_match(expression, v)]
            if not remaining:
                hint = _hint(expression, candidates)
                return f"request {name}: no device matches selector {expression!r}{hint}"
            candidates = remaining
        if not sub.wants_all and sub.count > len(candidates):
            return (
                f"request {name}: needs {sub.count}, pool has {len(candidates)} per node "
                f"({len(views)} devices per node)"
            )
        return None

    def _safe_match(self, expression: str, view: DeviceView) -> bool:
        try:
            return self.cache.matches(expression, view)
        except (SelectorRuntimeError, SelectorError):
            return False


_QUANTITY_CMP_RE: Final = re.compile(
    r"""capacity\s*\[\s*['"]([^'"]+)['"]\s*\]\s*(?:\.\s*(\w+)|\[\s*['"](\w+)['"]\s*\])\s*\.\s*"""
    r"""(compareTo|isGreaterThan|isLessThan)\s*\(\s*quantity\s*\(\s*['"]([^'"]+)['"]\s*\)\s*\)"""
)
_SEMVER_CMP_RE: Final = re.compile(
    r"""attributes\s*\[\s*['"]([^'"]+)['"]\s*\]\s*(?:\.\s*(\w+)|\[\s*['"](\w+)['"]\s*\])\s*\.\s*"""
    r"""(compareTo|isGreaterThan|isLessThan)\s*\(\s*semver\s*\(\s*['"]([^'"]+)['"]\s*\)\s*\)"""
)


def _values(views: Sequence[DeviceView], domain: str, ident: str, capacity: bool) -> list[object]:
    found = []
    for view in views:
        device, driver = view.device, view.driver
        if capacity:
            name = ident if domain == driver and ident in device.capacity else f"{domain}/{ident}"
            value: object = device.capacity.get(name)
        else:
            value = lookup_attribute(device, driver, f"{domain}/{ident}")
        if value is not None:
            found.append(value)
    return found


def _hint(expression: str, views: Sequence[DeviceView]) -> str:
    """`: memory 80Gi > 24Gi` style detail for quantity and semver comparisons with literals."""
    hints: list[str] = []
    for domain, attr, attr2, _, literal in _QUANTITY_CMP_RE.findall(expression):
        ident = attr or attr2
        amounts = [Fraction(v) for v in _values(views, domain, ident, capacity=True) if isinstance(v, int)]
        try:
            wanted = parse_quantity(literal)
        except QuantityError:
            continue
        if amounts:
            have = max(amounts)
            relation = ">" if wanted > have else "<=" if wanted == have else "vs"
            hints.append(f"{ident} {format_bytes(wanted)} {relation} {format_bytes(have)}")
    for domain, attr, attr2, _, literal in _SEMVER_CMP_RE.findall(expression):
        ident = attr or attr2
        versions = {v.value for v in _values(views, domain, ident, capacity=False) if isinstance(v, Version)}
        try:
            parse_semver(literal)
        except SemverError:
            continue
        if versions:
            hints.append(f"{ident} {', '.join(sorted(versions))} on the devices vs {literal}")
    return (": " + "; ".join(hints)) if hints else ""


def template_subject(template: ClaimTemplate) -> str:
    kind = "ResourceClaim" if template.shared else "ResourceClaimTemplate"
    return f"{kind} {template.key}"
