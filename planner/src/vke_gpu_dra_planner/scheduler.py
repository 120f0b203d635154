"""Where kube-scheduler puts the pods of a whole stack: its default profile, and the bounds around it.

The default profile (kubernetes `pkg/scheduler/apis/config/v1/default_plugins.go`) scores feasible
nodes with TaintToleration (weight 3), NodeAffinity (2), NodeResourcesFit (1, LeastAllocated on CPU and
memory, weight 1 each), PodTopologySpread (2), InterPodAffinity (2), NodeResourcesBalancedAllocation (1)
and ImageLocality (1). DynamicResources filters (a node is feasible when the pod's claims can be
allocated there) and has no score in 1.34. Modelled here:

* NodeResourcesFit LeastAllocated on the pods' non-zero requests: a container without a CPU or memory
  request counts as 100m CPU / 200Mi memory (`pkg/scheduler/util` DefaultMilliCPURequest,
  DefaultMemoryRequest); allocatable = the instance type's vCPUs and memory (catalog), 0 when unknown;
* NodeResourcesBalancedAllocation on the actual requests;
* PodTopologySpread's system default constraints for pods owned by a ReplicaSet (Deployment) or
  StatefulSet: hostname maxSkew 3 and zone maxSkew 5, both ScheduleAnyway (`podtopologyspread` plugin,
  `systemDefaultConstraints`), scored `count * log(domains + 2) + maxSkew - 1` and normalised;
* TaintToleration on PreferNoSchedule taints the pods do not tolerate.

The scheduler picks one of the best-scored nodes at random; the planner runs the default profile twice,
ties to the lowest node and ties to the node with the fewest devices in use, and a workload fits only
when it fits in both. Pods are scheduled one at a
time, workload by workload in stack order. `PACKING` (the best case) puts each pod on the feasible node
with the most devices in use (a profile with NodeResourcesFit MostAllocated and no default spreading);
`EMPTIEST` on the one with the fewest; both bound what other orders and profiles do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from .allocator import AllocationError, NodeAllocator
from .claims import ClaimSpec
from .fit import MAX_PODS_PER_NODE, Planner
from .inventory import GpuPool
from .mig import claims_per_profile
from .placement import Placement, excluded, tolerated

DEFAULT: Final = "default"
PACKING: Final = "packing"
EMPTIEST: Final = "emptiest"
#: how ties between best-scored nodes are broken (the scheduler picks one at random)
LOWEST: Final = "lowest"
#: pkg/scheduler/util: requests the scheduler assumes for a container that sets none
DEFAULT_MILLI_CPU: Final = 100
DEFAULT_MEMORY: Final = 200 * 1024 * 1024
MAX_NODE_SCORE: Final = 100
ZONE_LABEL: Final = "topology.kubernetes.io/zone"
#: owners whose pods get the system default spreading (Services are not read)
SPREAD_KINDS: Final = frozenset({"Deployment", "ReplicaSet", "StatefulSet"})
#: default plugin weights
_W_TAINT, _W_FIT, _W_SPREAD, _W_BALANCED = 3, 1, 2, 1


@dataclass(frozen=True)
class PodGroup:
    """The pods of one workload: per-pod claims, shared claims (key, spec) and how many are wanted."""

    label: str
    kind: str
    claims: tuple[ClaimSpec, ...]
    shared: tuple[tuple[str, ClaimSpec], ...]
    #: None: a DaemonSet (one pod on every node it may run on)
    wanted: int | None
    placement: Placement = field(default_factory=Placement)
    #: (milli-CPU, memory bytes) as requested, and as the scheduler counts them (non-zero defaults)
    requests: tuple[int, int] = (0, 0)
    nonzero: tuple[int, int] = (DEFAULT_MILLI_CPU, DEFAULT_MEMORY)


@dataclass
class _Node:
    pool: int
    index: int
    allocator: NodeAllocator
    pods: int = 0
    requested: tuple[int, int] = (0, 0)
    nonzero: tuple[int, int] = (0, 0)
    counts: dict[int, int] = field(default_factory=dict)
    #: pod shape -> what was allocated when it last did not fit
    failed: dict[object, frozenset[object]] = field(default_factory=dict)
    #: what the allocator holds (devices in use, capacity consumed of shared ones), after each placement
    in_use: frozenset[object] = frozenset()

    @property
    def used(self) -> int:
        return self.allocator.used


@dataclass
class Memo:
    """Allocation answers shared by runs over the same pools: (pod shape, pool, devices in use) -> fits."""

    feasible: dict[tuple[object, ...], bool] = field(default_factory=dict)
    never: set[tuple[object, int]] = field(default_factory=set)
    shapes: dict[tuple[ClaimSpec, ...], int] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """Placed pods per group (same order), and per group the pods per pool."""

    placed: tuple[int, ...]
    per_pool: tuple[tuple[int, ...], ...]
    wanted: tuple[int, ...]
    #: per group, for pods left pending on partitioned GPUs: (node, counter set, counter) exhausted
    exhausted: tuple[tuple[tuple[str, str, str], ...], ...] = ()
    #: per pool, per MIG profile: one-device claims of it that still fit after every group (each alone)
    mig_left: tuple[tuple[tuple[str, int], ...], ...] = ()


def _allocatable(pool: GpuPool) -> tuple[int, int]:
    return (pool.vcpus or 0) * 1000, (pool.memory_gib or 0) * 2**30


def _least_allocated(allocatable: tuple[int, int], requested: tuple[int, int]) -> int:
    total = 0
    for capacity, amount in zip(allocatable, requested, strict=True):
        total += 0 if capacity == 0 or amount > capacity else (capacity - amount) * MAX_NODE_SCORE // capacity
    return total // 2


def _most_allocated(allocatable: tuple[int, int], requested: tuple[int, int]) -> int:
    total = 0
    for capacity, amount in zip(allocatable, requested, strict=True):
        total += 0 if capacity == 0 else min(amount, capacity) * MAX_NODE_SCORE // capacity
    return total // 2


def _balanced(allocatable: tuple[int, int], requested: tuple[int, int]) -> int:
    if not any(requested) or not all(allocatable):
        return 0
    cpu, memory = (min(r / a, 1.0) for r, a in zip(requested, allocatable, strict=True))
    return int((1 - abs(cpu - memory) / 2) * MAX_NODE_SCORE)


class Simulation:
    """One run of the scheduler over every pool's nodes at maximum size."""

    def __init__(
        self,
        planner: Planner,
        pools: Sequence[GpuPool],
        strategy: str = DEFAULT,
        ties: str = LOWEST,
        memo: Memo | None = None,
    ) -> None:
        self.planner = planner
        self.pools = list(pools)
        #: each pool's zone label ("" when it sets none), read once
        self._zones = [dict(p.labels).get(ZONE_LABEL, "") for p in self.pools]
        self.strategy = strategy
        self.ties = ties
        self.nodes: list[_Node] = []
        #: (pool, node index) -> position in self.nodes
        self._at: dict[tuple[int, int], int] = {}
        self._pristine = [0 for _ in self.pools]
        #: nodes per pool that run a pod
        self._touched = [0 for _ in self.pools]
        memo = memo if memo is not None else Memo()
        self._feasible = memo.feasible
        self.blind = True
        self._never = memo.never
        #: pod shape (its claims) -> a small number, hashed cheaply
        self._shapes = memo.shapes

    # --- nodes ------------------------------------------------------------------------------

    def _node(self, pool: int, index: int) -> _Node:
        position = self._at.get((pool, index))
        if position is None:
            node = self.pools[pool].node(index)
            allocator = NodeAllocator(
                node,
                self.planner.classes,
                self.planner.cache,
                consumable_capacity=self.planner.consumable_capacity,
                partitionable_devices=self.planner.partitionable_devices,
                distinct_attribute=self.planner.distinct_attribute,
                rules=self.planner.rules,
            )
            position = len(self.nodes)
            self.nodes.append(_Node(pool, index, allocator))
            self._at[(pool, index)] = position
        return self.nodes[position]

    def _candidates(self, blind: bool) -> list[_Node]:
        """One representative per group of equal nodes (the lowest), used nodes one by one."""
        out: list[_Node] = []
        for node in self.nodes:
            if node.pods == 0:
                continue  # an untouched node: stands for the pristine ones below
            out.append(node)
        for pool, first in enumerate(self._pristine):
            limit = self.pools[pool].max_nodes
            if blind:
                index = first
                while (
                    index < limit and (pool, index) in self._at and self.nodes[self._at[(pool, index)]].pods
                ):
                    index += 1
                self._pristine[pool] = index
                if index < limit:
                    out.append(self._node(pool, index))
            else:
                out.extend(self._node(pool, i) for i in range(limit) if not self._node(pool, i).pods)
        return out

    def _equal_pristine(self, pool: int) -> int:
        """How many untouched nodes the representative of `pool` stands for."""
        return self.pools[pool].max_nodes - self._touched[pool]

    # --- filtering and scoring --------------------------------------------------------------

    def _fits(self, node: _Node, specs: list[ClaimSpec], key: object) -> bool:
        in_use = node.in_use
        # a pod that does not fit an empty node of a pool variant fits none of its nodes (UUID-blind
        # selectors), and one that does not fit beside some devices never fits beside more of them
        if self.blind and (key, node.pool) in self._never:
            return False
        failed = node.failed.get(key)
        if failed is not None and failed <= in_use:
            return False
        cache_key = (key, node.pool, in_use, -1 if self.blind else node.index)
        found = self._feasible.get(cache_key)
        if found is None:
            try:
                found = node.allocator.allocate(specs, commit=False) is not None
            except AllocationError:
                found = False
            self._feasible[cache_key] = found
        if not found:
            node.failed[key] = in_use
            if not in_use:
                self._never.add((key, node.pool))
        return found

    def _scores(self, group: int, pod: PodGroup, feasible: list[_Node]) -> list[int]:
        if self.strategy == PACKING:
            return [
                node.used * 1000 + _most_allocated(_allocatable(self.pools[node.pool]), node.nonzero)
                for node in feasible
            ]
        if self.strategy == EMPTIEST:
            return [-node.used for node in feasible]
        totals = []
        for node in feasible:
            pool = self.pools[node.pool]
            allocatable = _allocatable(pool)
            after = (node.nonzero[0] + pod.nonzero[0], node.nonzero[1] + pod.nonzero[1])
            asked = (node.requested[0] + pod.requests[0], node.requested[1] + pod.requests[1])
            balanced = _balanced(allocatable, asked) if any(pod.requests) else 0
            totals.append(_W_FIT * _least_allocated(allocatable, after) + _W_BALANCED * balanced)
        taints = [
            sum(
                1
                for taint in self.pools[node.pool].taints
                if taint[2] == "PreferNoSchedule" and not tolerated(taint, pod.placement.tolerations)
            )
            for node in feasible
        ]
        most = max(taints, default=0)
        if most:
            totals = [
                t + _W_TAINT * (MAX_NODE_SCORE - c * MAX_NODE_SCORE // most)
                for t, c in zip(totals, taints, strict=True)
            ]
        else:
            totals = [t + _W_TAINT * MAX_NODE_SCORE for t in totals]
        if pod.kind in SPREAD_KINDS:
            spread = self._spread(group, feasible)
            totals = [t + _W_SPREAD * s for t, s in zip(totals, spread, strict=True)]
        return totals

    def _zone(self, node: _Node) -> str:
        return self._zones[node.pool]

    def _spread(self, group: int, feasible: list[_Node]) -> list[int]:
        hosts = sum(self._equal_pristine(n.pool) if n.pods == 0 else 1 for n in feasible)
        zones = {self._zone(n) for n in feasible}
        per_zone: dict[str, int] = {}
        for node in self.nodes:
            zone = self._zones[node.pool]
            per_zone[zone] = per_zone.get(zone, 0) + node.counts.get(group, 0)
        host_weight, zone_weight = math.log(hosts + 2), math.log(len(zones) + 2)
        raw = [
            round(
                node.counts.get(group, 0) * host_weight
                + 2
                + per_zone.get(self._zone(node), 0) * zone_weight
                + 4
            )
            for node in feasible
        ]
        high, low = max(raw), min(raw)
        if high == 0:
            return [MAX_NODE_SCORE for _ in raw]
        return [MAX_NODE_SCORE * (high + low - s) // high for s in raw]

    # --- placing ----------------------------------------------------------------------------

    def run(self, groups: Sequence[PodGroup], blind: bool = True, *, mig_left: bool = False) -> Outcome:
        """Place `groups` in order; with `mig_left`, also count the MIG claims left per pool."""
        self.blind = blind
        placed: list[int] = []
        per_pool: list[tuple[int, ...]] = []
        wanted: list[int] = []
        shared_at: dict[str, _Node] = {}
        exhausted: list[tuple[tuple[str, str, str], ...]] = []
        for number, pod in enumerate(groups):
            allowed = [excluded(p, pod.placement) is None for p in self.pools]
            counts = [0 for _ in self.pools]
            if pod.wanted is None:
                want = sum(p.max_nodes for p, ok in zip(self.pools, allowed, strict=True) if ok)
                for pi, pool in enumerate(self.pools):
                    for index in range(pool.max_nodes if allowed[pi] else 0):
                        node = self._node(pi, index)
                        if self._place(node, number, pod, shared_at):
                            counts[pi] += 1
            else:
                want = pod.wanted
                for _ in range(want):
                    chosen = self._choose(number, pod, allowed, shared_at, blind)
                    if chosen is None or not self._place(chosen, number, pod, shared_at):
                        break
                    counts[chosen.pool] += 1
            placed.append(sum(counts))
            per_pool.append(tuple(counts))
            wanted.append(want)
            short = self._exhausted(pod, allowed, shared_at, blind) if sum(counts) < want else ()
            exhausted.append(short)
        left = self._mig_left() if mig_left else ()
        return Outcome(tuple(placed), tuple(per_pool), tuple(wanted), tuple(exhausted), left)

    def _exhausted(
        self, pod: PodGroup, allowed: list[bool], shared_at: Mapping[str, _Node], blind: bool
    ) -> tuple[tuple[str, str, str], ...]:
        """The counters that kept the pod's claims off the partitioned GPUs of the nodes it could use."""
        if not any(p.partitionable for p, ok in zip(self.pools, allowed, strict=True) if ok):
            return ()
        specs = self._specs(pod, shared_at)
        found: set[tuple[str, str, str]] = set()
        for node in self._candidates(blind):
            if not allowed[node.pool] or not self.pools[node.pool].partitionable:
                continue
            try:
                if node.allocator.allocate(specs, commit=False) is not None:
                    continue
            except AllocationError:
                continue
            found.update((node.allocator.node.name, s, c) for s, c in node.allocator.exhausted)
        return tuple(sorted(found))

    def _mig_left(self) -> tuple[tuple[tuple[str, int], ...], ...]:
        """Per pool, per MIG profile: one-device claims that still fit on its nodes at maximum size."""
        out: list[tuple[tuple[str, int], ...]] = []
        for pi, pool in enumerate(self.pools):
            if not pool.partitionable:
                out.append(())
                continue
            keep = self.planner.partitionable_devices
            touched = [n for n in self.nodes if n.pool == pi and n.pods]
            totals = {
                name: count * (pool.max_nodes - len(touched))
                for name, count in claims_per_profile(pool.node(0), keep).items()
            }
            for node in touched:
                left = claims_per_profile(
                    node.allocator.node, keep, node.allocator.in_use, node.allocator.counters_used
                )
                for name, count in left.items():
                    totals[name] = totals.get(name, 0) + count
            out.append(tuple(totals.items()))
        return tuple(out)

    def _specs(self, pod: PodGroup, shared_at: Mapping[str, _Node]) -> list[ClaimSpec]:
        return [*pod.claims, *(spec for key, spec in pod.shared if key not in shared_at)]

    def _choose(
        self, number: int, pod: PodGroup, allowed: list[bool], shared_at: Mapping[str, _Node], blind: bool
    ) -> _Node | None:
        pinned = {id(shared_at[key]): shared_at[key] for key, _ in pod.shared if key in shared_at}
        if len(pinned) > 1:
            return None  # its shared claims sit on different nodes
        candidates = list(pinned.values()) if pinned else self._candidates(blind)
        specs = self._specs(pod, shared_at)
        key = self._shapes.setdefault(tuple(specs), len(self._shapes))
        feasible = [
            n
            for n in candidates
            if allowed[n.pool] and n.pods < MAX_PODS_PER_NODE and self._fits(n, specs, key)
        ]
        if not feasible:
            return None
        scores = self._scores(number, pod, feasible)
        best = max(scores)
        tied = (n for n, s in zip(feasible, scores, strict=True) if s == best)
        if self.ties == EMPTIEST:
            return min(tied, key=lambda n: (n.used, n.pool, n.index))
        return min(tied, key=lambda n: (n.pool, n.index))

    def _place(self, node: _Node, number: int, pod: PodGroup, shared_at: dict[str, _Node]) -> bool:
        specs = self._specs(pod, shared_at)
        try:
            if node.pods >= MAX_PODS_PER_NODE or node.allocator.allocate(specs) is None:
                return False
        except AllocationError:
            return False
        for key, _ in pod.shared:
            shared_at.setdefault(key, node)
        if node.pods == 0:
            self._touched[node.pool] += 1
        node.in_use = node.allocator.state()
        node.pods += 1
        node.requested = (node.requested[0] + pod.requests[0], node.requested[1] + pod.requests[1])
        node.nonzero = (node.nonzero[0] + pod.nonzero[0], node.nonzero[1] + pod.nonzero[1])
        node.counts[number] = node.counts.get(number, 0) + 1
        return True


def simulate(
    planner: Planner,
    pools: Sequence[GpuPool],
    groups: Sequence[PodGroup],
    strategy: str = DEFAULT,
    *,
    ties: str = LOWEST,
    memo: Memo | None = None,
    mig_left: bool = False,
) -> Outcome:
    """`memo`: share allocation answers between runs over the same `pools` (and planner); `mig_left`:
    count the MIG claims left per pool after the run (`Outcome.mig_left`)."""
    blind = planner.uuid_blind([spec for g in groups for spec in (*g.claims, *(s for _, s in g.shared))])
    return Simulation(planner, pools, strategy, ties, memo).run(groups, blind, mig_left=mig_left)
