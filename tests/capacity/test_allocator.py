import pytest
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Device
from vke_gpu_dra_planner.allocator import AllocationError, NodeAllocator
from vke_gpu_dra_planner.fit import MAX_PODS_PER_NODE, Planner
from vke_gpu_dra_planner.gates import DISTINCT_DROPPED, DISTINCT_ENFORCED, DISTINCT_PRESENT
from vke_gpu_dra_planner.inventory import GpuPool, Node
from vke_gpu_dra_planner.placement import Placement
from vke_gpu_dra_planner.selection import SelectorCache, observed_ids
from vke_gpu_dra_planner.stack import default_classes

from .helpers import ATTRS, CC, MEM, exactly, fit, parsed, pool

DRIVER = facts.DRIVER_NAME
GPU_CLASS, MIG_CLASS = facts.DEVICE_CLASS_GPU.name, facts.DEVICE_CLASS_MIG.name
PRODUCT_NAME = f"{DRIVER}/{facts.ATTR_PRODUCT_NAME}"
PCIE_BUS_ID = f"{DRIVER}/{facts.ATTR_PCIE_BUS_ID}"


def test_count_that_fits_and_count_that_does_not():
    ok = fit(parsed(exactly("gpu", 2)))
    assert ok.fits and ok.pools[0].per_node == 1
    assert [d for _, _, d in ok.pools[0].chosen] == ["pool-node-0/gpu-0", "pool-node-0/gpu-1"]
    too_many = fit(parsed(exactly("gpu", 4)))
    assert not too_many.fits
    assert too_many.reasons() == [
        "pool (ecs.test.x: 2x NVIDIA A30): request gpu: needs 4, pool has 2 per node (2 devices per node)"
    ]


def test_all_takes_every_matching_device_and_needs_one():
    result = fit(parsed(exactly("gpus", mode="All")), pools=[pool(gpus=4)])
    assert result.fits and result.pools[0].per_node == 1
    assert len(result.pools[0].chosen) == 4
    none = fit(parsed(exactly("gpus", 1, f"{ATTRS}.brand == 'Quadro'", mode="All")))
    assert not none.fits
    assert "no device matches selector" in none.reasons()[0]


def test_memory_floor_with_quantity():
    assert fit(parsed(exactly("gpu", 1, f"{MEM}.compareTo(quantity('24Gi')) >= 0"))).fits
    result = fit(parsed(exactly("gpu", 1, f"{MEM}.compareTo(quantity('80Gi')) >= 0")))
    assert not result.fits
    assert result.reasons()[0].endswith("memory 80Gi > 24Gi")
    assert (
        fit(
            parsed(exactly("gpu", 1, f"{MEM}.compareTo(quantity('80Gi')) >= 0")),
            pools=[pool("NVIDIA H100 80GB HBM3", 8)],
        ).fits
        is False
    )  # 81559Mi < 80Gi
    assert fit(
        parsed(exactly("gpu", 1, f"{MEM}.compareTo(quantity('79Gi')) >= 0")),
        pools=[pool("NVIDIA H100 80GB HBM3", 8)],
    ).fits


def test_compute_capability_with_semver():
    hopper = f"{CC}.compareTo(semver('9.0.0')) >= 0"
    assert fit(parsed(exactly("gpu", 1, hopper)), pools=[pool("NVIDIA H20", 8)]).fits
    result = fit(parsed(exactly("gpu", 1, hopper)))
    assert not result.fits
    assert f"{facts.ATTR_CUDA_COMPUTE_CAPABILITY} 8.0.0 on the devices vs 9.0.0" in result.reasons()[0]


def test_several_requests_take_distinct_devices():
    result = fit(parsed(exactly("a"), exactly("b")), pools=[pool(gpus=2)])
    assert result.fits
    assert [d for _, _, d in result.pools[0].chosen] == ["pool-node-0/gpu-0", "pool-node-0/gpu-1"]
    assert not fit(parsed(exactly("a", 2), exactly("b")), pools=[pool(gpus=2)]).fits


def test_match_attribute_across_requests():
    same_root = [{"requests": ["a", "b"], "matchAttribute": facts.ATTR_PCIE_ROOT}]
    # every simulated GPU has its own PCIe root: two GPUs never share one
    result = fit(parsed(exactly("a"), exactly("b"), constraints=same_root), pools=[pool(gpus=8)])
    assert not result.fits
    assert (
        f"not together under the constraint(s) matchAttribute {facts.ATTR_PCIE_ROOT}" in result.reasons()[0]
    )
    same_product = [{"requests": ["a", "b"], "matchAttribute": PRODUCT_NAME}]
    assert fit(parsed(exactly("a"), exactly("b"), constraints=same_product), pools=[pool(gpus=8)]).fits
    # a constraint limited to other requests does not apply
    only_a = [{"requests": ["a"], "matchAttribute": facts.ATTR_PCIE_ROOT}]
    assert fit(parsed(exactly("a"), exactly("b"), constraints=only_a), pools=[pool(gpus=8)]).fits


def test_distinct_attribute_with_consumable_capacity():
    planner = Planner(default_classes(), consumable_capacity=True)
    distinct = [{"distinctAttribute": PRODUCT_NAME}]
    spec = parsed(exactly("a"), exactly("b"), constraints=distinct).spec
    assert not planner.fit("t", [("t", spec)], [[pool(gpus=8)]], 1).fits
    distinct_bus = [{"distinctAttribute": PCIE_BUS_ID}]
    spec = parsed(exactly("a", 3), constraints=distinct_bus).spec
    assert planner.fit("t", [("t", spec)], [[pool(gpus=8)]], 1).fits


def test_distinct_attribute_on_134_needs_the_attribute_but_compares_no_values():
    # 1.34 keeps distinctAttribute (gate on or off) and its allocator compares the values by pointer: two
    # GPUs of the same product are allocated together, a device without the attribute is not
    planner = Planner(default_classes(), distinct_attribute=DISTINCT_PRESENT)
    same_product = [{"distinctAttribute": PRODUCT_NAME}]
    result = planner.fit("t", [("t", parsed(exactly("a", 2), constraints=same_product).spec)], [[pool()]], 1)
    assert result.fits
    assert [d for _, _, d in result.pools[0].chosen] == ["pool-node-0/gpu-0", "pool-node-0/gpu-1"]
    lacking = [{"distinctAttribute": f"{DRIVER}/nonexistent"}]
    result = planner.fit("t", [("t", parsed(exactly("a"), constraints=lacking).spec)], [[pool()]], 1)
    assert not result.fits and result.error is None
    assert "distinctAttribute gpu.nvidia.com/nonexistent" in result.reasons()[0]
    # from 1.35 the values are compared; left unset, distinct_attribute follows consumable_capacity
    enforced = Planner(default_classes(), consumable_capacity=True, distinct_attribute=DISTINCT_ENFORCED)
    spec = parsed(exactly("a", 2), constraints=same_product).spec
    assert not enforced.fit("t", [("t", spec)], [[pool()]], 1).fits
    allocator = NodeAllocator(pool().node(0), default_classes(), SelectorCache(), consumable_capacity=True)
    assert allocator.distinct_attribute == DISTINCT_ENFORCED
    assert NodeAllocator(pool().node(0), default_classes(), SelectorCache()).distinct_attribute == (
        DISTINCT_DROPPED
    )


def test_distinct_attribute_without_the_feature_gate_never_schedules():
    # DRAConsumableCapacity is off in 1.35: the apiserver drops distinctAttribute and the scheduler's
    # allocator then fails on the empty constraint (1.34 keeps it: the test above)
    distinct_bus = [{"distinctAttribute": PCIE_BUS_ID}]
    result = fit(parsed(exactly("a", 3), constraints=distinct_bus), pools=[pool(gpus=8)])
    assert not result.fits
    assert "constraint #0" in result.error and "DRAConsumableCapacity" in result.error
    assert "empty constraint (unsupported constraint type?)" in result.error
    with pytest.raises(AllocationError, match="DRAConsumableCapacity"):
        NodeAllocator(pool(gpus=8).node(0), default_classes(), SelectorCache()).allocate(
            [parsed(exactly("a", 3), constraints=distinct_bus).spec]
        )


def test_first_available_falls_back_in_order():
    big = {"name": "big", "deviceClassName": GPU_CLASS, "count": 4}
    small = {"name": "small", "deviceClassName": GPU_CLASS, "count": 1}
    result = fit(parsed({"name": "gpu", "firstAvailable": [big, small]}), pools=[pool(gpus=2)])
    assert result.fits
    assert [r for _, r, _ in result.pools[0].chosen] == ["gpu/small"]
    preferred = fit(parsed({"name": "gpu", "firstAvailable": [big, small]}), pools=[pool(gpus=8)])
    assert [r for _, r, _ in preferred.pools[0].chosen] == ["gpu/big"] * 4


def test_replicas_exhaust_the_pool():
    tpl = parsed(exactly("gpu", 1))
    result = fit(tpl, replicas=4, pools=[pool(gpus=2, low=1, high=2)])
    assert result.fits and (result.at_min, result.at_max) == (2, 4)
    over = fit(tpl, replicas=5, pools=[pool(gpus=2, low=1, high=2)])
    assert not over.fits
    assert over.reasons() == [
        "pool (ecs.test.x: 2x NVIDIA A30): 5 replicas wanted, 2 fit per node, "
        "4 on the pool's maximum of 2 nodes"
    ]


def test_devices_already_taken_by_earlier_pods_are_skipped():
    allocator = NodeAllocator(pool(gpus=3).node(0), default_classes(), SelectorCache())
    spec = parsed(exactly("gpu", 2)).spec
    first = allocator.allocate([spec])
    assert first is not None and [d.device for d in first[0].devices] == ["gpu-0", "gpu-1"]
    assert allocator.allocate([spec]) is None
    single = allocator.allocate([parsed(exactly("gpu", 1)).spec])
    assert single is not None and single[0].devices[0].device == "gpu-2"


def test_non_compiling_selector_is_an_error_with_expression():
    result = fit(parsed(exactly("gpu", 1, "device.driver == 1")))
    assert not result.fits
    assert "CEL compile error" in result.error
    assert "'device.driver == 1'" in result.error
    assert "found no matching overload for '_==_' applied to '(string, int)'" in result.error


def test_runtime_error_fails_allocation_like_the_scheduler():
    result = fit(parsed(exactly("gpu", 1, f"{ATTRS}.{facts.ATTR_PROFILE} == '1g.6gb'")))
    assert not result.fits
    assert result.error.startswith(
        f"request gpu: selector #0 on device {DRIVER}/pool-node-0/gpu-0: "
        "CEL runtime error: no such key: profile"
    )


def test_mig_class_against_full_gpus():
    result = fit(parsed(exactly("mig", 1, cls=MIG_CLASS)))
    assert not result.fits and result.error is None
    assert f"request mig: no device matches device class {MIG_CLASS}" in result.reasons()[0]


def test_missing_device_class_is_an_error():
    result = fit(parsed(exactly("gpu", 1, cls="nope.example.com")))
    assert "could not retrieve device class nope.example.com" in result.error


def test_more_than_32_devices_in_a_claim_is_an_error():
    with pytest.raises(AllocationError, match="exceeds the claim limit of 32"):
        NodeAllocator(pool(gpus=40).node(0), default_classes(), SelectorCache()).allocate(
            [parsed(exactly("gpu", 33)).spec]
        )


def test_cache_projection_only_for_literal_lookups():
    assert observed_ids(f"device.driver == 'x' && {MEM}.compareTo(quantity('1')) > 0") == {
        ("capacity", DRIVER, facts.CAPACITY_MEMORY)
    }
    assert observed_ids("'x' in device.attributes['a.io']") == {("attributes", "a.io", "x")}
    assert observed_ids("device.attributes['a.io'].exists(k, k == 'x')") is None
    assert observed_ids("size(device.attributes) > 0") is None


def test_identical_nodes_share_one_evaluation():
    result = fit(
        parsed(exactly("gpu", 1, f"{MEM}.compareTo(quantity('1Gi')) >= 0")),
        replicas=1,
        pools=[pool(gpus=8, low=10, high=50)],
    )
    assert result.at_max == 400


def test_admin_access_sees_devices_in_use_and_takes_none():
    allocator = NodeAllocator(pool(gpus=2).node(0), default_classes(), SelectorCache())
    assert allocator.allocate([parsed(exactly("gpu", 2)).spec]) is not None
    admin_spec = parsed(exactly("monitor", 2, admin=True)).spec
    assert allocator.allocate([admin_spec]) is not None
    assert allocator.allocate([admin_spec]) is not None  # admin access does not use the devices up
    assert allocator.allocate([parsed(exactly("gpu", 1)).spec]) is None


def test_all_with_an_unsatisfiable_constraint_is_an_error():
    root = [{"matchAttribute": facts.ATTR_PCIE_ROOT}]
    result = fit(parsed(exactly("gpus", mode="All"), constraints=root), pools=[pool(gpus=2)])
    assert not result.fits
    assert result.error == (
        f"request gpus: cannot add device {DRIVER}/pool-node-0/gpu-1 because a claim constraint "
        f"would not be satisfied (matchAttribute {facts.ATTR_PCIE_ROOT} across all requests)"
    )


def test_selection_is_not_reused_across_allocations_of_other_claims():
    node = pool(gpus=1).node(0)
    mig = Device(
        "m-0", "mig", "m-0", {facts.ATTR_TYPE: facts.DEVICE_TYPE_MIG}, {facts.CAPACITY_MEMORY: 40 * 2**30}
    )
    node = Node(node.name, node.pool, (*node.devices, mig))
    allocator = NodeAllocator(node, default_classes(), SelectorCache())
    assert allocator.allocate([parsed(exactly("x", cls=MIG_CLASS)).spec], commit=False) is not None
    result = allocator.allocate([parsed(exactly("x")).spec], commit=False)
    assert result is not None and [d.device for d in result[0].devices] == ["gpu-0"]


def test_shared_claim_does_not_leak_its_selection_into_later_pods():
    last = f"{ATTRS}.{facts.ATTR_PCIE_BUS_ID}"
    a30 = GpuPool("pool", "x", "NVIDIA A30", 4, 1, 1)
    bus = a30.node(0).devices[-1].attributes[facts.ATTR_PCIE_BUS_ID]
    shared = parsed(exactly("s", 1, f"{last} == '{bus}'")).spec
    per_pod = parsed(exactly("g", 1, f"{last} != '{bus}'")).spec
    result = Planner(default_classes()).fit("w", [("per", per_pod)], [[a30]], 10, shared=[("sh", shared)])
    assert result.at_max == 3


def test_admin_access_pods_are_bounded_by_max_pods_not_devices():
    result = fit(parsed(exactly("a", 1, admin=True)), replicas=50, pools=[pool(gpus=2, low=1, high=1)])
    assert result.fits
    assert result.pools[0].per_node == MAX_PODS_PER_NODE
    shared = parsed(exactly("s", 1)).spec
    admin = parsed(exactly("a", 1, admin=True)).spec
    pinned = Planner(default_classes()).fit("w", [("a", admin)], [[pool(gpus=2)]], 50, shared=[("s", shared)])
    assert pinned.fits and pinned.at_max == MAX_PODS_PER_NODE


def test_daemonset_ignores_pools_its_node_selector_rules_out():
    a30 = GpuPool("a30", "ecs.a30.x", "NVIDIA A30", 2, 1, 2)
    h20 = GpuPool("h20", "ecs.h20.x", "NVIDIA H20", 8, 1, 2)
    only_a30 = Placement(node_selector=(("node.kubernetes.io/instance-type", "ecs.a30.x"),))
    spec = parsed(exactly("gpu", 1)).spec
    planner = Planner(default_classes())
    daemonset = planner.fit("ds", [("c", spec)], [[a30], [h20]], None, placement=only_a30)
    assert daemonset.fits, daemonset.reasons()
    nowhere = Placement(node_selector=(("node.kubernetes.io/instance-type", "ecs.none.x"),))
    ruled_out = planner.fit("ds", [("c", spec)], [[a30], [h20]], None, placement=nowhere)
    assert not ruled_out.fits
    assert any("nodeSelector" in r for r in ruled_out.reasons())
    too_big = planner.fit(
        "ds", [("c", parsed(exactly("gpu", 4)).spec)], [[a30], [h20]], None, placement=only_a30
    )
    assert not too_big.fits
    assert all(r.startswith("a30 ") for r in too_big.reasons()), too_big.reasons()
