"""The structured-parameters allocator of resource.k8s.io/v1, for one node at a time.

Follows `k8s.io/dynamic-resource-allocation/structured` (1.34): a pod's claims are allocated together on
one node by exhaustive search that stops at the first solution; requests in order, devices in slice order,
skipping devices in use; class selectors before request selectors, all of which must be true; `All`
takes every matching device on the node (and fails if one is in use, or none matches); `firstAvailable`
tries its subrequests in order; `matchAttribute` constraints are checked as devices are added.
`distinctAttribute` belongs to the DRAConsumableCapacity feature gate (alpha, off in 1.34): without it the
apiserver drops the field and the scheduler fails the claim on the empty constraint left behind, so such a
claim is an error unless `consumable_capacity` is set (then the constraint is enforced). A CEL runtime
error on a device, a selector that does not compile, a missing DeviceClass or more than 32 devices in a
claim fail the allocation with an error, as in the scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from vke_gpu_dra_core.device_model import AttributeValue, Device, Version

from .cel.environment import SelectorCompileError, SelectorError, SelectorRuntimeError
from .claims import ALLOCATION_RESULTS_MAX_SIZE, ClaimSpec, Constraint, DeviceClass, Request, SubRequest
from .inventory import Node
from .selection import DeviceView, SelectorCache

#: Upper bound on search steps per allocation attempt (the scheduler bounds its search by time).
MAX_SEARCH_STEPS: Final = 200_000


class AllocationError(Exception):
    """The scheduler would fail allocation with an error (not just "does not fit")."""


@dataclass(frozen=True)
class DeviceResult:
    request: str
    device: str


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
    def __init__(self, constraint: Constraint) -> None:
        self.constraint = constraint
        self.values: list[tuple[str, object]] = []
        self.skipped: list[bool] = []

    def add(self, request: str, subrequest: str | None, device: Device, driver: str) -> bool:
        if not self.constraint.applies_to(request, subrequest):
            self.skipped.append(True)
            return True
        value = lookup_attribute(device, driver, self.constraint.attribute)
        if value is None:
            return False
        key = _attribute_key(value)
        if self.constraint.match_attribute is not None:
            if self.values and self.values[0] != key:
                return False
        elif key in self.values:
            return False
        self.values.append(key)
        self.skipped.append(False)
        return True

    def remove(self) -> None:
        if not self.skipped.pop():
            self.values.pop()


class NodeAllocator:
    """Allocates pods' claims on one node; keeps the node's devices in use between calls."""

    def __init__(
        self,
        node: Node,
        classes: Mapping[str, DeviceClass],
        cache: SelectorCache,
        *,
        consumable_capacity: bool = False,
    ) -> None:
        self.node = node
        #: the DRAConsumableCapacity feature gate (enables `distinctAttribute`)
        self.consumable_capacity = consumable_capacity
        self.classes = classes
        self.cache = cache
        self.views = cache.views(node)
        self.in_use: set[int] = set()
        self._searched = False
        #: (class, request selectors, device index) -> selectable; keyed by content, not by position,
        #: because later calls allocate other claims (the scheduler decides this afresh per Allocate)
        self._selectable: dict[tuple[str, tuple[str, ...], int], bool] = {}

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
            if not self.consumable_capacity:
                for i, constraint in enumerate(claim.constraints):
                    if constraint.distinct_attribute is not None:
                        raise AllocationError(
                            f"constraint #{i}: empty constraint (unsupported constraint type?): "
                            f"distinctAttribute {constraint.distinct_attribute} needs the "
                            "DRAConsumableCapacity feature gate (alpha, off by default in Kubernetes 1.34), "
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
                        data.all_devices = [i for i in range(len(self.views)) if self.selectable(data, ci, i)]
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
        search = _Search(self, claims, self._request_data(claims))
        try:
            found = search.run()
        finally:
            stats.search_steps += search.steps
        if not found:
            return None
        if commit:
            # devices given with admin access stay available to others (as in the scheduler)
            self.in_use.update(index for _, _, index, admin in search.chosen if not admin)
        results: list[list[DeviceResult]] = [[] for _ in claims]
        for ci, name, index, _ in search.chosen:
            results[ci].append(DeviceResult(name, self.views[index].device.name))
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
        self.constraints = [[_ConstraintState(c) for c in claim.constraints] for claim in claims]
        #: device index -> claims it is being allocated for in this attempt
        self.allocating: dict[int, set[int]] = {}
        #: (claim, request result name, device index, admin access)
        self.chosen: list[tuple[int, str, int, bool]] = []
        self.steps = 0

    def run(self) -> bool:
        return self._one(0, 0, 0, 0, False)

    # one function mirrors the scheduler's allocateOne step by step, branches and all
    def _one(self, ci: int, ri: int, ai: int, di: int, in_sub: bool) -> bool:  # noqa: PLR0911, PLR0912
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
        for index in range(len(self.alloc.views)):
            if self._unavailable(ci, data, index):
                continue
            if not self.alloc.selectable(data, ci, index):
                continue
            if not self._add(ci, data, index, must=False):
                continue
            if self._one(ci, ri, ai, di + 1, in_sub):
                return True
            self._remove(ci)
        return False

    def _unavailable(self, ci: int, data: _RequestData, index: int) -> bool:
        """deviceInUse, or for admin access only allocatingDeviceForClaim (the same claim)."""
        if data.sub.admin_access:
            return ci in self.allocating.get(index, ())
        return index in self.alloc.in_use or index in self.allocating

    def _add(self, ci: int, data: _RequestData, index: int, must: bool) -> bool:
        if self._unavailable(ci, data, index):
            return False
        device = self.alloc.views[index].device
        subrequest = data.sub.name if data.request.first_available else None
        added: list[_ConstraintState] = []
        for state in self.constraints[ci]:
            if not state.add(data.request.name, subrequest, device, self.alloc.node.driver):
                for done in added:
                    done.remove()
                if must:
                    raise AllocationError(
                        f"request {data.result_name}: cannot add device "
                        f"{self.alloc.node.driver}/{self.alloc.node.name}/{device.name} because "
                        f"a claim constraint would not be satisfied ({_describe(state.constraint)})"
                    )
                return False
            added.append(state)
        self.allocating.setdefault(index, set()).add(ci)
        self.chosen.append((ci, data.result_name, index, data.sub.admin_access))
        return True

    def _remove(self, ci: int) -> None:
        _, _, index, _ = self.chosen.pop()
        self.allocating[index].discard(ci)
        if not self.allocating[index]:
            del self.allocating[index]
        for state in self.constraints[ci]:
            state.remove()


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
