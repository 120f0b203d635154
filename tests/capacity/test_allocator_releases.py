"""The allocator where Kubernetes releases differ (`FeatureGates.allocator`, read in k8s.io/dynamic-resource-
allocation v0.34.4, v0.36.2 and v0.37.2): combinations of one request's devices (1.36 on), distinctAttribute
per device (1.37) or per request name (1.35, 1.36), counters given back on rejection and backtracking (1.37),
`All` with consumable capacity (1.37), capacity requests past int64 (1.37), fractional request policies
(DRAFractionalCapacityRange, 1.37) and shared devices that consume counters (charged once)."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

import pytest
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.consumable_shares import RequestPolicy, Sharing, memory_shares
from vke_gpu_dra_planner.allocator import (
    AllocationError,
    CapacityError,
    NodeAllocator,
    consumed_capacity,
    milli,
    use_milli,
    violates_policy,
)
from vke_gpu_dra_planner.claims import ClaimSpec
from vke_gpu_dra_planner.gates import GATES, AllocatorRules, with_overrides
from vke_gpu_dra_planner.inventory import GpuPool, Node
from vke_gpu_dra_planner.selection import SelectorCache
from vke_gpu_dra_planner.stack import default_classes

from .helpers import ATTRS, exactly, parsed

GI = 2**30
UUID = f"{facts.DRIVER_NAME}/{facts.ATTR_UUID}"
MIG = facts.DEVICE_CLASS_MIG.name


def shared_node(gpus: int) -> Node:
    return GpuPool("pool", "ecs.test.x", "NVIDIA L20", gpus, 1, 1, consumable_shares=True).node(0)


def allocator(node: Node, version: str, **changes: Any) -> NodeAllocator:
    gates = GATES[version]
    return NodeAllocator(
        node,
        default_classes(),
        SelectorCache(),
        consumable_capacity=changes.pop("consumable_capacity", gates.consumable_capacity),
        partitionable_devices=changes.pop("partitionable_devices", gates.partitionable_devices),
        distinct_attribute=changes.pop("distinct_attribute", gates.distinct_attribute),
        rules=replace(gates.allocator, **changes),
    )


def share(name: str, memory: str, count: int = 1, *, mode: str | None = None) -> dict[str, Any]:
    request = exactly(name, count, mode=mode)
    request["exactly"]["capacity"] = {"requests": {facts.CAPACITY_MEMORY: memory}}
    return request


def devices(result: list[Any] | None) -> list[list[tuple[str, str]]] | None:
    if result is None:
        return None
    return [[(d.request, d.device) for d in claim.devices] for claim in result]


# --- combinations (startLocation) ------------------------------------------------------------------


def test_one_request_never_takes_one_shared_gpu_twice_from_136_on() -> None:
    """Two devices for one request on a node with one shared GPU: 1.36 and 1.37 try the devices after the
    one taken (combinations), so the request finds no second device; the 1.34 allocator (consumable
    capacity turned on) starts from the first device again and takes the GPU twice."""
    claim = parsed(share("gpu", "1Gi", 2)).spec
    for version in ("1.36", "1.37"):
        assert allocator(shared_node(1), version).allocate([claim]) is None
    old = allocator(shared_node(1), "1.34", consumable_capacity=True)
    assert devices(old.allocate([claim])) == [[("gpu", "gpu-0"), ("gpu", "gpu-0")]]


# --- distinctAttribute per device (kubernetes#140600) -------------------------------------------------


def distinct_claim() -> ClaimSpec:
    return parsed(share("a", "1Gi", 2), share("b", "1Gi"), constraints=[{"distinctAttribute": UUID}]).spec


def test_distinct_attribute_is_compared_per_device_on_137() -> None:
    """Requests a (2 shares) and b (1 share), distinct uuids, on 2 shared GPUs: 1.37 compares every device
    and finds no third uuid. 1.36 keeps one value per request name: a's second GPU replaces its first, so
    b gets gpu-0 again beside a's gpu-0."""
    assert allocator(shared_node(2), "1.37").allocate([distinct_claim()]) is None
    assert devices(allocator(shared_node(2), "1.36").allocate([distinct_claim()])) == [
        [("a", "gpu-0"), ("a", "gpu-1"), ("b", "gpu-0")]
    ]
    assert devices(allocator(shared_node(3), "1.37").allocate([distinct_claim()])) == [
        [("a", "gpu-0"), ("a", "gpu-1"), ("b", "gpu-2")]
    ]


# --- allocationMode All with consumable capacity (kubernetes#140769) ----------------------------------


def test_all_fails_on_137_when_a_matching_gpus_remaining_memory_is_taken() -> None:
    """gpu-0 keeps 1/4 of its memory after a first claim; then `All` devices with half the memory each:
    1.37 takes both GPUs by their own capacity, gpu-0 has too little left, the request fails; 1.36 left
    gpu-0 out and allocated gpu-1 alone."""
    memory = shared_node(2).sharing_of(0)
    assert memory is not None
    whole = memory.capacity[facts.CAPACITY_MEMORY]
    first = parsed(share("big", f"{whole * 3 // 4 // 2**20}Mi")).spec
    every = parsed(share("all", f"{whole // 2 // 2**20}Mi", mode="All")).spec
    for version, expected in (("1.37", None), ("1.36", [[("all", "gpu-1")]])):
        alloc = allocator(shared_node(2), version)
        assert devices(alloc.allocate([first])) == [[("big", "gpu-0")]]
        assert devices(alloc.allocate([every])) == expected, version


def test_all_takes_only_devices_whose_own_capacity_fits() -> None:
    """A request for more memory than a GPU has: no GPU is part of `All`, which then fails (no device)."""
    alloc = allocator(shared_node(2), "1.37")
    assert alloc.allocate([parsed(share("all", "1Ti", mode="All")).spec]) is None


# --- capacity requests the arithmetic cannot represent (kubernetes#140442, #140702, #140666) ----------


def test_a_request_past_int64_fails_the_allocation_on_137_and_skips_the_gpu_before() -> None:
    """The real v1.37.2 scheduler: `capacity "memory": capacity request cannot be represented in the
    device's range arithmetic: request 10E exceeds MaxInt64` (the whole-unit path, the gate off)."""
    claim = parsed(share("gpu", "10E")).spec
    with pytest.raises(
        AllocationError, match=r"gpu-0: capacity 'memory': capacity request cannot be .* exceeds MaxInt64"
    ):
        allocator(shared_node(1), "1.37").allocate([claim])
    with pytest.raises(AllocationError, match="not a representable milli value"):
        allocator(shared_node(1), "1.37", fractional=True).allocate([claim])
    assert allocator(shared_node(1), "1.36").allocate([claim]) is None


def test_a_request_finer_than_a_milli_unit_fails_with_fractional_ranges_on() -> None:
    """1Gi and 1.5 millionths of a byte: above the range's min and not a whole milli value."""
    claim = parsed(share("gpu", "1073741824.0000015")).spec
    with pytest.raises(AllocationError, match="not a representable milli value"):
        allocator(shared_node(1), "1.37", fractional=True).allocate([claim])
    # without DRAFractionalCapacityRange (1.37's default) the whole-unit path rounds it up to 1Gi and a
    # byte, then to 1Gi+1Mi
    result = allocator(shared_node(1), "1.37").allocate([claim])
    assert result is not None and result[0].devices[0].consumed == ((facts.CAPACITY_MEMORY, GI + 2**20),)
    # a request below the range's min is the min, fine or not
    below = allocator(shared_node(1), "1.37", fractional=True).allocate([parsed(share("gpu", "1500u")).spec])
    assert below is not None and below[0].devices[0].consumed == ((facts.CAPACITY_MEMORY, 2**20),)


# --- fractional request policies (DRAFractionalCapacityRange) ------------------------------------------

TENTHS = RequestPolicy(default=1, minimum=Fraction(1, 10), maximum=1, step=Fraction(1, 10))


@pytest.mark.parametrize(
    ("requested", "fractional", "consumed"),
    [
        (Fraction(1, 4), True, Fraction(3, 10)),  # 250m -> 300m in milli units
        (Fraction(3, 10), True, Fraction(3, 10)),
        (Fraction(1, 20), True, Fraction(1, 10)),  # below min: min
        (Fraction(1, 4), False, Fraction(1)),  # whole units: Value() rounds 250m and 100m up to 1
        (None, True, Fraction(1)),  # not named: the default
    ],
)
def test_fractional_ranges_round_in_milli_units(
    requested: Fraction | None, fractional: bool, consumed: Fraction
) -> None:
    assert consumed_capacity(requested, 1, TENTHS, fractional=fractional) == consumed
    assert violates_policy(consumed, TENTHS, fractional=fractional) is False


def test_milli_arithmetic_needs_the_gate_and_exact_milli_values() -> None:
    assert use_milli(TENTHS, True) and not use_milli(TENTHS, False)
    assert not use_milli(
        RequestPolicy(default=1, minimum=Fraction(1, 10_000), step=Fraction(1, 10_000)), True
    )
    assert violates_policy(Fraction(1, 4), TENTHS, fractional=True)  # off the 100m step
    assert milli(Fraction(3, 2)) == 1500
    with pytest.raises(CapacityError, match="not a representable milli value"):
        milli(Fraction(1, 10_000))
    with pytest.raises(CapacityError, match="passes the milli range"):
        consumed_capacity(
            Fraction(2**63 - 2, 1000), 2**63 - 1, RequestPolicy(default=1, minimum=1, step=3), fractional=True
        )


def tenths_node() -> Node:
    """One device with a `shares` capacity of 1 shared in tenths (a fractional validRange)."""
    node = shared_node(1)
    sharing = Sharing((("shares", 1),), (("shares", TENTHS),))
    return replace(node, sharing=(sharing,))


def test_claims_share_a_fractional_capacity_in_milli_steps_on_137() -> None:
    """Requests of 250m shares: with DRAFractionalCapacityRange each rounds to 300m, three fit on the device
    and a fourth does not; without it (1.37's default) each rounds to 1 and only one fits."""
    claim = parsed(
        {"name": "s", "exactly": {"deviceClassName": facts.DEVICE_CLASS_GPU.name,
                                  "capacity": {"requests": {"shares": "250m"}}}}
    ).spec  # fmt: skip
    for fractional, fitting in ((True, 3), (False, 1)):
        alloc = allocator(tenths_node(), "1.37", fractional=fractional)
        placed = [alloc.allocate([claim]) is not None for _ in range(4)]
        assert placed == [True] * fitting + [False] * (4 - fitting), fractional


# --- counters: given back on rejection (kubernetes#140437), charged once per shared device (#139040) -----


def mig_node() -> Node:
    return GpuPool("pool", "ecs.test.x", "NVIDIA A100-SXM4-80GB", 1, 1, 1, dynamic_mig=True).node(0)


def profile(name: str, value: str) -> dict[str, Any]:
    return exactly(name, 1, f"{ATTRS}.{facts.ATTR_PROFILE} == '{value}'", cls=MIG)


def test_a_rejected_placement_gives_its_counters_back_on_137() -> None:
    """A 3g.40gb (memory slices 0-3), then any MIG device with the same profile (matchAttribute): the
    1g.10gb placements on slices 4-6 come first, reserve their counters and fail the constraint. 1.37
    gives the counters back and finds the 3g.40gb placement on slices 4-7; 1.36 leaks them, and that
    placement no longer fits."""
    claim = parsed(
        profile("a", "3g.40gb"),
        exactly("b", 1, cls=MIG),
        constraints=[{"matchAttribute": f"{facts.DRIVER_NAME}/{facts.ATTR_PROFILE}"}],
    ).spec
    node = mig_node()
    fixed = allocator(node, "1.37").allocate([claim])
    assert fixed is not None
    profiles = {d.name: d.attributes.get(facts.ATTR_PROFILE) for d in node.devices}
    assert [profiles[d.device] for d in fixed[0].devices] == ["3g.40gb"] * 2
    assert fixed[0].devices[0].device != fixed[0].devices[1].device
    assert allocator(mig_node(), "1.36").allocate([claim]) is None


def test_a_shared_gpu_that_consumes_counters_charges_them_once() -> None:
    """The whole A100 shared by memory (allowMultipleAllocations) and consuming every counter: two half
    shares fit (the second does not charge the counters again), and after them no MIG placement fits."""
    node = mig_node()
    sharing = memory_shares(node.devices[0])
    node = replace(node, sharing=(sharing, *(None,) * (len(node.devices) - 1)))
    half = f"{sharing.capacity[facts.CAPACITY_MEMORY] // 2 // 2**20}Mi"
    whole = parsed(share("gpu", half)).spec
    for version in ("1.36", "1.37"):
        alloc = allocator(node, version)
        assert devices(alloc.allocate([whole])) == [[("gpu", "gpu-0")]]
        assert devices(alloc.allocate([whole])) == [[("gpu", "gpu-0")]], version
        assert alloc.allocate([parsed(profile("m", "1g.10gb")).spec]) is None


# --- 1.34 with DRAConsumableCapacity turned on (its experimental allocator, run on the real v1.34.4) ----


def gated_134(node: Node) -> NodeAllocator:
    """The planner's allocator for a 1.34 cluster whose operator turned DRAConsumableCapacity on."""
    gates = with_overrides(GATES["1.34"], "DRAConsumableCapacity=true")
    return NodeAllocator.for_gates(node, default_classes(), SelectorCache(), gates)


def test_distinct_attribute_on_gated_134_never_takes_one_shared_gpu_twice() -> None:
    """Pointers compared: two shares of one GPU under distinct uuids collide (the real 1.34.4 leaves the
    claim Pending); one value per request name, so b may take a's first GPU again."""
    twice = parsed(share("a", "1Gi", 2), constraints=[{"distinctAttribute": UUID}]).spec
    assert gated_134(shared_node(1)).allocate([twice]) is None
    assert devices(gated_134(shared_node(2)).allocate([twice])) == [[("a", "gpu-0"), ("a", "gpu-1")]]
    assert devices(gated_134(shared_node(2)).allocate([distinct_claim()])) == [
        [("a", "gpu-0"), ("a", "gpu-1"), ("b", "gpu-0")]
    ]


def test_all_on_gated_134_fails_when_a_matching_gpus_remaining_memory_is_taken() -> None:
    """As on 1.37: after a claim took 3/4 of gpu-0, `All` with half the memory each fails (the real
    v1.34.4: Pending); on an empty node `All` takes both GPUs."""
    memory = shared_node(2).sharing_of(0)
    assert memory is not None
    whole = memory.capacity[facts.CAPACITY_MEMORY]
    every = parsed(share("all", f"{whole // 2 // 2**20}Mi", mode="All")).spec
    assert devices(gated_134(shared_node(2)).allocate([every])) == [[("all", "gpu-0"), ("all", "gpu-1")]]
    alloc = gated_134(shared_node(2))
    assert devices(alloc.allocate([parsed(share("big", f"{whole * 3 // 4 // 2**20}Mi")).spec])) == [
        [("big", "gpu-0")]
    ]
    assert alloc.allocate([every]) is None


def test_a_request_past_int64_on_gated_134_is_allocated_consuming_nothing() -> None:
    """`Quantity.Value()` of 10E is 0 in 1.34's allocator: rounded up the memory policy's range it is 0,
    which the real v1.34.4 allocates and records as `consumedCapacity: {memory: "0"}`; the GPU still
    takes every other share."""
    alloc = gated_134(shared_node(1))
    result = alloc.allocate([parsed(share("gpu", "10E")).spec])
    assert devices(result) == [[("gpu", "gpu-0")]]
    assert result is not None and dict(result[0].devices[0].consumed) == {facts.CAPACITY_MEMORY: 0}
    memory = shared_node(1).sharing_of(0)
    assert memory is not None
    whole = memory.capacity[facts.CAPACITY_MEMORY]
    assert devices(alloc.allocate([parsed(share("gpu", f"{whole // 2**20}Mi")).spec])) == [[("gpu", "gpu-0")]]


def test_rules_default_to_the_newest_release() -> None:
    alloc = NodeAllocator(shared_node(1), default_classes(), SelectorCache())
    assert alloc.rules == GATES["1.38"].allocator
    assert isinstance(alloc.rules, AllocatorRules)
