"""The structured-parameters allocator of resource.k8s.io/v1, for one node at a time.

Follows `k8s.io/dynamic-resource-allocation/structured` (1.34): a pod's claims are allocated together on
one node by exhaustive search that stops at the first solution; requests in order, devices in slice order,
skipping devices in use; class selectors before request selectors, all of which must be true; `All`
takes every matching device on the node (and fails if one is in use, or none matches); `firstAvailable`
tries its subrequests in order; `matchAttribute` constraints are checked as devices are added.
`distinctAttribute` (the DRAConsumableCapacity feature gate) follows `distinct_attribute`
(`FeatureGates.distinct_attribute`): DISTINCT_ENFORCED (the gate on, 1.35 and later: every device of the
constraint's requests has the attribute, values pairwise distinct), DISTINCT_PRESENT (1.34, gate on or
off: the API server keeps the field and its allocator compares the values by pointer, so it only checks
that every such device has the attribute), DISTINCT_DROPPED (the gate off, 1.35 and later: the apiserver
drops the field and the scheduler fails the claim on the empty constraint left behind: an error). Left
unset it follows `consumable_capacity` (enforced with it, dropped without).

With `consumable_capacity` (DRAConsumableCapacity, beta and on from 1.36) the allocator also follows the
incubating allocator's `CmpRequestOverCapacity`: a device published with `allowMultipleAllocations`
(`Node.sharing`) is never "in use"; instead, for each of its capacities, the request consumes
`capacity.requests[name]` rounded up by the capacity's `requestPolicy` (validRange: to `min`, then to
the next `min + n*step`; validValues: to the first value not below it), or the policy's `default`, or
the whole capacity when the request names none and there is no default. A consumption the policy does
not allow (above `max`, off the step, not a valid value; the default always is) or one that takes the
sum over the claims already allocated and those being allocated past the capacity's value skips the
device, as does a request naming a capacity the device does not have. The same device may serve
several requests of one claim. Without the gate the API server drops both `allowMultipleAllocations`
and `capacity.requests`: every device is allocated whole.

With `partitionable_devices` (DRAPartitionableDevices, KEP-4815: beta and on from 1.36, alpha and off in
1.34 and 1.35) devices that consume shared counters (`Node.counters`, the driver gate DynamicMIG) follow
the allocator's `checkAvailableCounters`: a device can be allocated only if, for each counter set it
consumes from, what the devices already allocated on the node (earlier claims) and those being allocated
(this pod's claims, in flight) consume plus its own stays within each counter's value. Without the gate
the API server drops `sharedCounters` and `consumesCounters`: the devices are independent. A CEL runtime
error on a device, a selector that does not compile, a missing DeviceClass or more than 32 devices in a
claim fail the allocation with an error, as in the scheduler.

Where releases differ (`AllocatorRules`, from `FeatureGates.allocator`; see `gates`): the devices of one
request are tried as combinations (`startLocation`, 1.36 on) or from the first device each time (1.34);
`distinctAttribute` is compared per device (1.37) or per request name (1.35, 1.36); counters are released
when a candidate is rejected or backtracked (1.37) or leak for the rest of the attempt (before); `All` with
consumable capacity takes every device whose own capacity fits (1.37) or only those with the capacity still
free (before); a capacity request the arithmetic cannot represent is an error (1.37) or skips the device;
with DRAFractionalCapacityRange (1.37) request policies are computed in milli units. A shared device that
consumes counters charges them once, whatever number of shares it serves (kubernetes#139040).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final, Protocol

from vke_gpu_dra_core.device_model import AttributeValue, Device, Version
from vke_gpu_dra_core.quantity import format_quantity

from .cel.environment import SelectorCompileError, SelectorError, SelectorRuntimeError
from .claims import ALLOCATION_RESULTS_MAX_SIZE, ClaimSpec, Constraint, DeviceClass, Request, SubRequest
from .gates import (
    DISTINCT_DROPPED,
    DISTINCT_ENFORCED,
    DISTINCT_PER_REQUEST,
    DISTINCT_SAME_DEVICE,
    GATES,
    NEWEST_VERSION,
    AllocatorRules,
    FeatureGates,
)
from .inventory import Node
from .selection import DeviceView, SelectorCache

#: Upper bound on search steps per allocation attempt (the scheduler bounds its search by time).
MAX_SEARCH_STEPS: Final = 200_000
#: The rules of an allocator built without any: the newest release's.
NEWEST_RULES: Final = GATES[NEWEST_VERSION].allocator
INT64_MAX: Final = 2**63 - 1


class CapacityError(ValueError):
    """A capacity request the allocator's arithmetic cannot represent (1.37: the allocation fails)."""


class PolicyLike(Protocol):
    """A capacity's request policy (core's `RequestPolicy`): amounts whole or in milli units."""

    @property
    def default(self) -> Fraction | int | None: ...
    @property
    def minimum(self) -> Fraction | int | None: ...
    @property
    def maximum(self) -> Fraction | int | None: ...
    @property
    def step(self) -> Fraction | int | None: ...
    @property
    def valid_values(self) -> tuple[Fraction | int, ...]: ...


class AllocationError(Exception):
    """The scheduler would fail allocation with an error (not just "does not fit")."""


@dataclass(frozen=True)
class DeviceResult:
    request: str
    device: str
    #: the capacity consumed on a shared device (allowMultipleAllocations): (name, amount) by name
    consumed: tuple[tuple[str, Fraction], ...] = ()


@dataclass(frozen=True)
class ClaimResult:
    devices: tuple[DeviceResult, ...]


@dataclass
class _RequestData:
    request: Request
    request_index: int
    alternative: int
    sub: SubRequest
    class_: DeviceClass
    num_devices: int
    all_devices: list[int] = field(default_factory=list)

    @property
    def result_name(self) -> str:
        return self.request.result_name(self.alternative)


def lookup_attribute(device: Device, driver: str, qualified: str) -> AttributeValue | None:
    """`lookupAttribute`: fully-qualified name, or the id alone when the domain is the driver's."""
    if qualified in device.attributes:
        return device.attributes[qualified]
    domain, _, ident = qualified.partition("/")
    if domain != driver:
        return None
    return device.attributes.get(ident)


def _attribute_key(value: AttributeValue) -> tuple[str, object]:
    if isinstance(value, Version):
        return ("version", value.value)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    return ("string", value)


class _ConstraintState:
    def __init__(self, constraint: Constraint, distinct: str = DISTINCT_ENFORCED) -> None:
        self.constraint = constraint
        #: distinctAttribute: DISTINCT_ENFORCED (per device), DISTINCT_PER_REQUEST (one value per request
        #: name, 1.35 and 1.36), DISTINCT_SAME_DEVICE (1.34 with DRAConsumableCapacity: per request name,
        #: equal only for the same device) or DISTINCT_PRESENT (1.34: the attribute present, values not
        #: compared)
        self.distinct = distinct
        self.values: list[tuple[str, object]] = []
        self.skipped: list[bool] = []
        #: DISTINCT_PER_REQUEST: request name -> its last value, and how many devices were added
        self.by_request: dict[str, tuple[str, object]] = {}
        self.count = 0

    def add(self, request: str, subrequest: str | None, device: Device, driver: str) -> bool:
        if not self.constraint.applies_to(request, subrequest):
            self.skipped.append(True)
            return True
        value = lookup_attribute(device, driver, self.constraint.attribute)
        if value is None:
            return False
        key = _attribute_key(value)
        if self.distinct == DISTINCT_SAME_DEVICE and self.constraint.match_attribute is None:
            key = ("device", device.name)  # compared by pointer: equal only for the same device's value
        if self.constraint.match_attribute is not None:
            if self.values and self.values[0] != key:
                return False
        elif self.distinct in (DISTINCT_PER_REQUEST, DISTINCT_SAME_DEVICE):
            if self.count and key in self.by_request.values():
                return False
            self.by_request[request] = key
            self.count += 1
        elif self.distinct == DISTINCT_ENFORCED and key in self.values:
            return False
        self.values.append(key)
        self.skipped.append(False)
        return True

    def remove(self, request: str) -> None:
        if self.skipped.pop():
            return
        self.values.pop()
        if self.constraint.distinct_attribute is not None and self.distinct in (
            DISTINCT_PER_REQUEST,
            DISTINCT_SAME_DEVICE,
        ):
            # the request's value is forgotten, whatever other device of it is still allocated
            self.by_request.pop(request, None)
            self.count -= 1


class NodeAllocator:
    """Allocates pods' claims on one node; keeps the node's devices in use between calls."""

    def __init__(
        self,
        node: Node,
        classes: Mapping[str, DeviceClass],
        cache: SelectorCache,
        *,
        consumable_capacity: bool = False,
        partitionable_devices: bool = False,
        distinct_attribute: str | None = None,
        rules: AllocatorRules | None = None,
    ) -> None:
        self.node = node
        #: how this release's allocator behaves where releases differ (None: the newest release's)
        self.rules = rules or NEWEST_RULES
        #: the DRAConsumableCapacity feature gate (shared devices, requests' capacity)
        self.consumable_capacity = consumable_capacity
        #: what becomes of `distinctAttribute` (DISTINCT_*; None: as the gate says)
        self.distinct_attribute = distinct_attribute or (
            DISTINCT_ENFORCED if consumable_capacity else DISTINCT_DROPPED
        )
        #: the DRAPartitionableDevices feature gate: shared counters kept (None: no counters to check)
        self.available: dict[tuple[str, str], int] | None = (
            node.counters.available() if partitionable_devices and node.counters is not None else None
        )
        #: (counter set, counter) -> consumed by the devices allocated on the node
        self.counters_used: dict[tuple[str, str], int] = {}
        #: counters that ruled a device out during the last allocation (why a placement did not fit)
        self.exhausted: set[tuple[str, str]] = set()
        self.classes = classes
        self.cache = cache
        self.views = cache.views(node)
        self.in_use: set[int] = set()
        #: shared devices (allowMultipleAllocations): device index -> capacity name -> consumed
        self.consumed: dict[int, dict[str, Fraction]] = {}
        self._searched = False
        #: (class, request selectors, device index) -> selectable; keyed by content, not by position,
        #: because later calls allocate other claims (the scheduler decides this afresh per Allocate)
        self._selectable: dict[tuple[str, tuple[str, ...], int], bool] = {}

    @classmethod
    def for_gates(
        cls, node: Node, classes: Mapping[str, DeviceClass], cache: SelectorCache, gates: FeatureGates
    ) -> NodeAllocator:
        """The allocator of a cluster with `gates` (its release's, or an operator's overrides)."""
        return cls(
            node,
            classes,
            cache,
            consumable_capacity=gates.consumable_capacity,
            partitionable_devices=gates.partitionable_devices,
            distinct_attribute=gates.distinct_attribute,
            rules=gates.allocator,
        )

    def shared(self, index: int) -> bool:
        """Whether the device takes several allocations (the API server keeps that only with the gate)."""
        return self.consumable_capacity and self.node.sharing_of(index) is not None

    def state(self) -> frozenset[object]:
        """What is allocated on the node: device indices in use, and (index, capacity, consumed) of shared
        ones. A state that contains another allows no more than it (the scheduler's pruning relies on it)."""
        shares = ((i, name, amount) for i, used in self.consumed.items() for name, amount in used.items())
        return frozenset((*self.in_use, *shares))

    @property
    def used(self) -> int:
        """Devices with something allocated."""
        return len(self.in_use) + len(self.consumed)

    def consumption(  # noqa: PLR0911 (one return per case of CmpRequestOverCapacity)
        self,
        sub: SubRequest,
        index: int,
        allocating: Mapping[str, Fraction] | None = None,
        *,
        request: str = "",
        static: bool = False,
    ) -> dict[str, Fraction] | None:
        """What `sub` consumes of device `index` (CmpRequestOverCapacity), or None when it does not fit.

        {} for a device taken whole; `allocating`: what this allocation already takes of the device;
        `static`: against the device's own capacity, nothing taken (1.37's `All`). A request the
        arithmetic cannot represent raises AllocationError (1.37) or skips the device (before).
        """
        if not self.consumable_capacity:
            return {}
        sharing = self.node.sharing_of(index)
        if sharing is None and not sub.capacity:
            return {}
        device = self.views[index].device
        capacity = sharing.capacity if sharing is not None else device.capacity
        policies = sharing.policies if sharing is not None else {}
        requested = dict(sub.capacity)
        if any(name not in capacity for name in requested):
            return None
        amounts: dict[str, Fraction] = {}
        for name, value in capacity.items():
            try:
                amounts[name] = consumed_capacity(
                    requested.get(name),
                    value,
                    policies.get(name),
                    fractional=self.rules.fractional,
                    overflow_zero=self.rules.overflow_zero,
                )
            except CapacityError as exc:
                if not self.rules.capacity_errors:
                    return None
                raise AllocationError(
                    f"request {request or sub.name}: checking capacity for device "
                    f"{self.node.driver}/{self.node.name}/{device.name}: capacity {name!r}: capacity request "
                    f"cannot be represented in the device's range arithmetic: {exc}"
                ) from None
        used = {} if static else self.consumed.get(index, {})
        taking = {} if static else (allocating or {})
        for name, value in capacity.items():
            amount = amounts[name]
            if violates_policy(amount, policies.get(name), fractional=self.rules.fractional):
                return None
            if amount + used.get(name, 0) + taking.get(name, 0) > value:
                return None
        return amounts if sharing is not None else {}

    def counters_fit(self, index: int, allocating: Mapping[tuple[str, str], int]) -> bool:
        """checkAvailableCounters: device `index`'s consumption within what is left of each counter."""
        if self.available is None:
            return True
        assert self.node.counters is not None
        fits = True
        for counter_set, counter, amount in self.node.counters.consumes[index]:
            key = (counter_set, counter)
            left = self.available.get(key, 0) - self.counters_used.get(key, 0) - allocating.get(key, 0)
            if amount > left:
                self.exhausted.add(key)
                fits = False
        return fits

    def consumes(self, index: int) -> tuple[tuple[str, str, int], ...]:
        """The counters device `index` consumes, when the gate keeps them."""
        if self.available is None:
            return ()
        assert self.node.counters is not None
        return self.node.counters.consumes[index]

    # --- selection ---------------------------------------------------------------------------

    def selectable(self, data: _RequestData, claim: int, index: int) -> bool:
        """isSelectable: class selectors first, then the request's; errors propagate."""
        key = (data.class_.name, data.sub.selectors, index)
        cached = self._selectable.get(key)
        if cached is not None:
            return cached
        view = self.views[index]
        result = True
        for i, expression in enumerate(data.class_.selectors):
            if not self._matches(expression, view, f"class {data.class_.name}: selector #{i}"):
                result = False
                break
        else:
            for i, expression in enumerate(data.sub.selectors):
                if not self._matches(expression, view, f"request {data.result_name}: selector #{i}"):
                    result = False
                    break
        self._selectable[key] = result
        return result

    def _matches(self, expression: str, view: DeviceView, where: str) -> bool:
        try:
            return self.cache.matches(expression, view)
        except SelectorRuntimeError as exc:
            raise AllocationError(
                f"{where} on device {self.node.driver}/{self.node.name}/{view.device.name}: "
                f"CEL runtime error: {exc.detail} (expression {exc.expression!r})"
            ) from None

    # --- allocation --------------------------------------------------------------------------

    def _request_data(self, claims: Sequence[ClaimSpec]) -> dict[tuple[int, int, int], _RequestData]:
        result: dict[tuple[int, int, int], _RequestData] = {}
        for ci, claim in enumerate(claims):
            if self.distinct_attribute == DISTINCT_DROPPED:
                for i, constraint in enumerate(claim.constraints):
                    if constraint.distinct_attribute is not None:
                        raise AllocationError(
                            f"constraint #{i}: empty constraint (unsupported constraint type?): "
                            f"distinctAttribute {constraint.distinct_attribute} needs the "
                            "DRAConsumableCapacity feature gate (alpha, off by default in Kubernetes 1.35): "
                            "without it the apiserver drops the field and the pod never schedules"
                        )
            minimum = 0
            for ri, request in enumerate(claim.requests):
                fewest = None
                for ai, sub in enumerate(request.alternatives):
                    class_ = self.classes.get(sub.device_class)
                    if class_ is None:
                        raise AllocationError(
                            f"request {request.result_name(ai)}: could not retrieve device class "
                            f"{sub.device_class}: deviceclass.resource.k8s.io "
                            f"{sub.device_class!r} not found"
                        )
                    for expression in (*class_.selectors, *sub.selectors):
                        try:
                            self.cache.compiled(expression)
                        except SelectorCompileError as exc:
                            owner = (
                                f"class {class_.name}"
                                if expression in class_.selectors
                                else f"request {request.result_name(ai)}"
                            )
                            raise AllocationError(f"{owner}: CEL compile error: {exc}") from None
                    data = _RequestData(request, ri, ai, sub, class_, sub.count)
                    if sub.wants_all:
                        data.all_devices = self._all_devices(data, ci)
                        data.num_devices = len(data.all_devices)
                    result[(ci, ri, ai)] = data
                    fewest = data.num_devices if fewest is None else min(fewest, data.num_devices)
                minimum += fewest or 0
            if minimum > ALLOCATION_RESULTS_MAX_SIZE:
                raise AllocationError(
                    f"number of requested devices {minimum} exceeds the claim limit of "
                    f"{ALLOCATION_RESULTS_MAX_SIZE}"
                )
        return result

    def _all_devices(self, data: _RequestData, ci: int) -> list[int]:
        """The devices `All` takes: selectable, and with consumable capacity those whose capacity fits:
        their own capacity (1.37; one whose remaining capacity is taken then fails the request) or what is
        left of it after earlier claims (before 1.37: such a device is left out)."""
        out = []
        for index in range(len(self.views)):
            if not self.selectable(data, ci, index):
                continue
            if self.consumable_capacity:
                static = self.rules.all_static_capacity
                if self.consumption(data.sub, index, request=data.result_name, static=static) is None:
                    continue
            out.append(index)
        return out

    def allocate(self, claims: Sequence[ClaimSpec], commit: bool = True) -> list[ClaimResult] | None:
        """Devices for every claim of one pod on this node, or None when they do not fit.

        Raises AllocationError where the scheduler reports an error. With `commit`, the chosen
        devices stay in use for later calls.
        """
        stats = self.cache.stats
        stats.allocations += 1
        if not self._searched:
            self._searched = True
            stats.nodes_searched += 1
        self.exhausted = set()
        search = _Search(self, claims, self._request_data(claims))
        try:
            found = search.run()
        finally:
            stats.search_steps += search.steps
        if not found:
            return None
        if commit:
            # devices given with admin access stay available to others (as in the scheduler); shared
            # devices add what each allocation consumes, and charge their counters once
            for _, _, index, admin, consumed, reserved in search.chosen:
                if admin:
                    continue
                if self.shared(index):
                    used = self.consumed.setdefault(index, {})
                    for name, share in consumed.items():
                        used[name] = used.get(name, Fraction(0)) + share
                else:
                    self.in_use.add(index)
                if reserved:
                    for counter_set, counter, amount in self.consumes(index):
                        key = (counter_set, counter)
                        self.counters_used[key] = self.counters_used.get(key, 0) + amount
        results: list[list[DeviceResult]] = [[] for _ in claims]
        for ci, name, index, _, consumed, _ in search.chosen:
            results[ci].append(
                DeviceResult(name, self.views[index].device.name, tuple(sorted(consumed.items())))
            )
        return [ClaimResult(tuple(r)) for r in results]


class _Search:
    def __init__(
        self,
        alloc: NodeAllocator,
        claims: Sequence[ClaimSpec],
        data: dict[tuple[int, int, int], _RequestData],
    ) -> None:
        self.alloc = alloc
        self.claims = claims
        self.data = data
        distinct = alloc.distinct_attribute
        self.constraints = [[_ConstraintState(c, distinct) for c in claim.constraints] for claim in claims]
        #: device index -> claims it is being allocated for in this attempt
        self.allocating: dict[int, set[int]] = {}
        #: (claim, request result name, device index, admin access, capacity consumed, counters reserved)
        self.chosen: list[tuple[int, str, int, bool, dict[str, Fraction], bool]] = []
        #: shared devices: what this attempt takes of them (allocatingCapacity), and how many shares
        self.allocating_capacity: dict[int, dict[str, Fraction]] = {}
        self.allocating_shares: dict[int, int] = {}
        #: counters the devices of this attempt consume (in flight)
        self.allocating_counters: dict[tuple[str, str], int] = {}
        self.steps = 0

    def run(self) -> bool:
        return self._one(0, 0, 0, 0, False)

    # one function mirrors the scheduler's allocateOne step by step, branches and all
    def _one(  # noqa: PLR0911, PLR0912, PLR0917
        self, ci: int, ri: int, ai: int, di: int, in_sub: bool, start: int = 0
    ) -> bool:
        self.steps += 1
        if self.steps > MAX_SEARCH_STEPS:
            raise AllocationError(
                f"search stopped after {MAX_SEARCH_STEPS} steps without an answer "
                "(the claims' constraints make the search too large to decide offline)"
            )
        if ci >= len(self.claims):
            return True
        claim = self.claims[ci]
        if ri >= len(claim.requests):
            return self._one(ci + 1, 0, 0, 0, False)
        request = claim.requests[ri]
        if request.first_available and not in_sub:
            return any(
                self._one(ci, ri, alternative, 0, True) for alternative in range(len(request.alternatives))
            )
        data = self.data[(ci, ri, ai)]
        if data.sub.wants_all and not data.all_devices:
            return False
        if di >= data.num_devices:
            return self._one(ci, ri + 1, 0, 0, False)
        if len([c for c in self.chosen if c[0] == ci]) + data.num_devices - di > ALLOCATION_RESULTS_MAX_SIZE:
            return False
        if data.sub.wants_all:
            index = data.all_devices[di]
            if not self._add(ci, data, index, must=True):
                return False
            if self._one(ci, ri, ai, di + 1, in_sub):
                return True
            self._remove(ci)
            return False
        # 1.36 on: the next device of the same request comes after this one (startLocation)
        first = start if self.alloc.rules.combinations else 0
        for index in range(first, len(self.alloc.views)):
            if self._unavailable(ci, data, index):
                continue
            if not self.alloc.selectable(data, ci, index):
                continue
            if (
                self.alloc.consumable_capacity
                and self.alloc.consumption(
                    data.sub, index, self.allocating_capacity.get(index), request=data.result_name
                )
                is None
            ):
                continue
            if not self._add(ci, data, index, must=False):
                continue
            if self._one(ci, ri, ai, di + 1, in_sub, index + 1):
                return True
            self._remove(ci)
        return False

    def _unavailable(self, ci: int, data: _RequestData, index: int) -> bool:
        """deviceInUse, or for admin access only allocatingDeviceForClaim (the same claim)."""
        if data.sub.admin_access:
            return ci in self.allocating.get(index, ())
        if self.alloc.shared(index):
            return False  # a shared device is never in use; its capacity decides (in _add)
        return index in self.alloc.in_use or index in self.allocating

    def _reserve(self, index: int, sign: int) -> None:
        for counter_set, counter, amount in self.alloc.consumes(index):
            key = (counter_set, counter)
            self.allocating_counters[key] = self.allocating_counters.get(key, 0) + sign * amount

    def _capacity_in_use(self, index: int) -> bool:
        """deviceCapacityInUse: a shared device with a share allocated, or being allocated."""
        return index in self.alloc.consumed or self.allocating_shares.get(index, 0) > 0

    def _add(self, ci: int, data: _RequestData, index: int, must: bool) -> bool:  # noqa: PLR0912
        # allocateDevice, step by step
        if self._unavailable(ci, data, index):
            return False
        shared = self.alloc.shared(index)
        rules = self.alloc.rules
        # a shared device already in use has its counters charged: a further share does not charge them
        reserved = False
        if not (shared and self._capacity_in_use(index)) and self.alloc.consumes(index):
            if not self.alloc.counters_fit(index, self.allocating_counters):
                return False
            self._reserve(index, +1)
            reserved = True
        device = self.alloc.views[index].device
        subrequest = data.sub.name if data.request.first_available else None
        added: list[_ConstraintState] = []
        for state in self.constraints[ci]:
            if not state.add(data.request.name, subrequest, device, self.alloc.node.driver):
                for done in reversed(added):
                    done.remove(data.request.name)
                if reserved and rules.counter_rollback:
                    self._reserve(index, -1)  # before 1.37 the reservation leaked (kubernetes#140437)
                if must:
                    raise AllocationError(
                        f"request {data.result_name}: cannot add device "
                        f"{self.alloc.node.driver}/{self.alloc.node.name}/{device.name} because "
                        f"a claim constraint would not be satisfied ({_describe(state.constraint)})"
                    )
                return False
            added.append(state)
        consumed = self.alloc.consumption(
            data.sub, index, self.allocating_capacity.get(index), request=data.result_name
        )
        if consumed is None:
            for done in reversed(added):
                done.remove(data.request.name)
            if reserved and rules.counter_rollback:
                self._reserve(index, -1)
            return False
        if not shared:
            self.allocating.setdefault(index, set()).add(ci)
        else:
            self.allocating_shares[index] = self.allocating_shares.get(index, 0) + 1
            taking = self.allocating_capacity.setdefault(index, {})
            for name, amount in consumed.items():
                taking[name] = taking.get(name, Fraction(0)) + amount
        self.chosen.append((ci, data.result_name, index, data.sub.admin_access, consumed, reserved))
        return True

    def _remove(self, ci: int) -> None:
        _, name, index, _, consumed, reserved = self.chosen.pop()
        shared = self.alloc.shared(index)
        if shared:
            taking = self.allocating_capacity[index]
            for capacity, amount in consumed.items():
                taking[capacity] -= amount
            self.allocating_shares[index] -= 1
        else:
            self.allocating[index].discard(ci)
            if not self.allocating[index]:
                del self.allocating[index]
        # before 1.37 a shared device never gave its counters back (kubernetes#140431)
        if reserved and (not shared or self.alloc.rules.counter_rollback):
            self._reserve(index, -1)
        request = name.split("/", 1)[0]
        for state in reversed(self.constraints[ci]):
            state.remove(request)


def milli(value: Fraction | int) -> int:
    """safeMilliValue: `value` in milli units, exactly and within int64; CapacityError otherwise."""
    scaled = Fraction(value) * 1000
    if scaled.denominator != 1 or abs(scaled.numerator) > INT64_MAX:
        raise CapacityError(f"request {_show(value)} is not a representable milli value")
    return scaled.numerator


def use_milli(policy: PolicyLike, fractional: bool) -> bool:
    """useMilli: DRAFractionalCapacityRange on, min/max/step exact in milli units, step at least 1m."""
    if not fractional:
        return False
    try:
        bounds = [milli(v) for v in (policy.minimum, policy.maximum, policy.step) if v is not None]
    except CapacityError:
        return False
    return policy.step is None or bounds[-1] >= 1


def consumed_capacity(  # noqa: PLR0911
    # one return per case of calculateConsumedCapacity and roundUpRange / roundUpValidValues
    requested: Fraction | int | None,
    value: Fraction | int,
    policy: PolicyLike | None,
    *,
    fractional: bool = False,
    overflow_zero: bool = False,
) -> Fraction:
    """calculateConsumedCapacity: what a request of `requested` (None: not named) consumes of a capacity.

    `validRange` rounds up to `min`, then to the next `min + n*step`: in milli units with
    `fractional` (DRAFractionalCapacityRange) where `use_milli`, else in whole units (`Value()`, which
    rounds a fraction up). CapacityError where the request or its rounding passes int64 (or the milli
    range), or is finer than 1m on the milli path; with `overflow_zero` (1.34's allocator) a request past
    int64 is read as 0 instead, so it rounds to `min - step` and below."""
    if requested is None:
        return Fraction(policy.default if policy is not None and policy.default is not None else value)
    requested = Fraction(requested)
    if policy is None:
        return requested
    if policy.minimum is not None:
        if requested < policy.minimum:
            return Fraction(policy.minimum)
        if policy.step is None:
            return requested
        if use_milli(policy, fractional):
            request_m, step_m, min_m = milli(requested), milli(policy.step), milli(policy.minimum)
            steps = -(-(request_m - min_m) // step_m)
            if steps > (INT64_MAX - min_m) // step_m:
                raise CapacityError(
                    f"rounding request {_show(requested)} up to the next step passes the milli range"
                )
            return Fraction(min_m + step_m * steps, 1000)
        request_i, step_i, min_i = math.ceil(requested), math.ceil(policy.step), math.ceil(policy.minimum)
        if requested > INT64_MAX:
            if not overflow_zero:
                raise CapacityError(f"request {_show(requested)} exceeds MaxInt64")
            # roundUpRange on Value() = 0: Go's `/` truncates toward zero, then one step more on a rest
            added = -min_i
            steps = -(abs(added) // step_i) if added < 0 else added // step_i
            if added - steps * step_i:
                steps += 1
            return Fraction(min_i + step_i * steps)
        steps = -(-(request_i - min_i) // step_i)
        if min_i >= 0 and steps > (INT64_MAX - min_i) // step_i:
            raise CapacityError(f"rounding request {_show(requested)} up to the next step passes MaxInt64")
        return Fraction(min_i + step_i * steps)
    if policy.valid_values:
        return Fraction(next((v for v in policy.valid_values if requested <= v), requested))
    return requested


def violates_policy(  # noqa: PLR0911 (one return per case of violatesPolicy)
    amount: Fraction | int, policy: PolicyLike | None, *, fractional: bool = False
) -> bool:
    """violatesPolicy: the default is always allowed; else above max, off the step (milli units where
    `use_milli`, else whole ones) or not a valid value."""
    if policy is None or (policy.default is not None and amount == policy.default):
        return False
    if policy.minimum is not None:
        if policy.maximum is not None and amount > policy.maximum:
            return True
        if policy.step is None:
            return False
        if use_milli(policy, fractional):
            try:
                return (milli(amount) - milli(policy.minimum)) % milli(policy.step) != 0
            except CapacityError:
                return True
        whole = (math.ceil(amount), math.ceil(policy.minimum), math.ceil(policy.step))
        return (whole[0] - whole[1]) % whole[2] != 0
    if policy.valid_values:
        return amount not in policy.valid_values
    return False


def _show(value: Fraction | int) -> str:
    return format_quantity(value)


def _describe(constraint: Constraint) -> str:
    kind = "matchAttribute" if constraint.match_attribute else "distinctAttribute"
    scope = ", ".join(constraint.requests) if constraint.requests else "all requests"
    return f"{kind} {constraint.attribute} across {scope}"


__all__ = [
    "AllocationError",
    "ClaimResult",
    "DeviceResult",
    "NodeAllocator",
    "SelectorError",
    "describe_constraint",
    "lookup_attribute",
]


def describe_constraint(constraint: Constraint) -> str:
    return _describe(constraint)
