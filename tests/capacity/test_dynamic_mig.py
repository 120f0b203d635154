"""MIG partitions in the planner (the driver gate DynamicMIG, KEP-4815 partitionable devices): the pool's
devices come from core's one definition, the allocator keeps each counter set's sum within its counters
as kube-scheduler's structured allocator does (DRAPartitionableDevices, on in 1.36), and without the
gate (1.34) the API server drops the counters, so the driver publishes its GPUs whole, as the plan says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from vke_gpu_dra_core import facts, featuregates
from vke_gpu_dra_core.mig_partitions import product_partitions
from vke_gpu_dra_planner import check_stack
from vke_gpu_dra_planner.allocator import NodeAllocator
from vke_gpu_dra_planner.gates import GATES, VersionError, with_overrides
from vke_gpu_dra_planner.inventory import GpuPool
from vke_gpu_dra_planner.mig import WHOLE_GPU, claims_per_profile
from vke_gpu_dra_planner.selection import SelectorCache
from vke_gpu_dra_planner.stack import StackModel, add_object, default_classes
from vke_gpu_dra_planner.verdict import plan_model

from .helpers import ATTRS, exactly, template
from .test_dra136 import deployment

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
MIG = facts.DEVICE_CLASS_MIG.name
GPU = facts.DEVICE_CLASS_GPU.name
WITH_GATE_134 = with_overrides(GATES["1.34"], "DRAPartitionableDevices=true")


def mig_pool(product: str = A100, gpus: int = 1, nodes: int = 1, *, mig: bool = True) -> GpuPool:
    return GpuPool("pool", "ecs.test.x", product, gpus, nodes, nodes, dynamic_mig=mig)


def profile_claim(name: str, profile: str) -> dict[str, Any]:
    """A claim for one MIG device of `profile` (class mig.nvidia.com, the driver's `profile` attribute)."""
    return template(exactly("gpu", 1, f"{ATTRS}.{facts.ATTR_PROFILE} == '{profile}'", cls=MIG), name=name)


def whole_gpu_claim(name: str = "whole") -> dict[str, Any]:
    return template(exactly("gpu", 1, cls=GPU), name=name)


def planned(pool: GpuPool, objects: list[dict[str, Any]], gates: Any) -> dict[str, tuple[str, int]]:
    return {w.workload.name: (w.status, w.placed) for w in plan(pool, objects, gates).workloads}


def plan(pool: GpuPool, objects: list[dict[str, Any]], gates: Any) -> Any:
    stack = StackModel(classes=default_classes(), pools=[[pool]])
    for obj in objects:
        add_object(stack, obj)
    return plan_model(stack, gates)


# --- the pool's devices ---------------------------------------------------------------------------------


@pytest.mark.parametrize("product", [A100, H100])
def test_devices_and_counters_come_from_core_partitions(product):
    node = mig_pool(product, gpus=2).node(0)
    assert node.counters is not None
    expected = [product_partitions(product, minor) for minor in (0, 1)]
    assert [d.name for d in node.devices] == [p.name for gpu in expected for p in gpu.devices]
    assert node.counters.sets == tuple(
        (gpu.counter_set.name, tuple(gpu.counter_set.counters.items())) for gpu in expected
    )
    assert node.counters.consumes == tuple(
        tuple((p.counter_set, k, v) for k, v in p.consumes.items()) for gpu in expected for p in gpu.devices
    )
    whole, first = node.devices[0], node.devices[1]
    assert whole.attributes[facts.ATTR_TYPE] == facts.DEVICE_TYPE_GPU
    assert first.attributes[facts.ATTR_TYPE] == facts.DEVICE_TYPE_MIG
    assert first.attributes[facts.ATTR_PARENT_UUID] == whole.uuid
    assert first.attributes[facts.ATTR_PRODUCT_NAME] == product
    assert facts.ATTR_UUID not in first.attributes  # created only when prepared


def test_products_without_mig_and_the_gate_off_publish_whole_gpus():
    for pool in (mig_pool("NVIDIA L20", gpus=2), mig_pool(A100, gpus=2, mig=False)):
        node = pool.node(0)
        assert node.counters is None
        assert [d.name for d in node.devices] == ["gpu-0", "gpu-1"]


def test_claims_per_profile_on_an_empty_gpu_follow_nvidias_table():
    per_gpu = claims_per_profile(mig_pool(A100).node(0), keep_counters=True)
    assert per_gpu == {
        WHOLE_GPU: 1,
        "1g.10gb": 7,
        "1g.10gb+me": 1,  # one OFA engine per GPU
        "1g.20gb": 4,
        "2g.20gb": 3,
        "3g.40gb": 2,
        "4g.40gb": 1,
        "7g.80gb": 1,
    }
    dropped = claims_per_profile(mig_pool(A100).node(0), keep_counters=False)
    assert dropped["1g.10gb+me"] == 7 and dropped["1g.10gb"] == 7


# --- which placements still fit after others are taken ---------------------------------------------------


@pytest.mark.parametrize("product", [A100, H100])
@pytest.mark.parametrize(
    "gates", [GATES["1.36"], GATES["1.37"], WITH_GATE_134], ids=["1.36", "1.37", "1.34-with-gate"]
)
def test_seven_1g_10gb_claims_fit_an_eighth_does_not(product, gates):
    objects = [profile_claim("small", "1g.10gb"), deployment("small", 8, claim="small")]
    result = plan(mig_pool(product), objects, gates)
    [workload] = result.workloads
    assert (workload.status, workload.placed) == ("pending", 7)
    # the claims took every 1g.10gb placement: a 3g.40gb claim finds its memory slices consumed
    objects += [profile_claim("three", "3g.40gb"), deployment("three", 1, claim="three")]
    result = plan(mig_pool(product), objects, gates)
    three = result.workloads[1]
    assert (three.status, three.placed) == ("pending", 0)
    assert any("memory-slice-0" in r and "gpu-0-counter-set" in r for r in three.reasons), three.reasons
    left = next(iter(result.mig_left.values()))
    assert left["1g.10gb"] == 0 and left[WHOLE_GPU] == 0 and left["7g.80gb"] == 0


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        # the 4g takes slices 0-3, the 3g the placement at 4
        ((("four", "4g.40gb"), ("three", "3g.40gb")), {"four": ("fits", 1), "three": ("fits", 1)}),
        # the 3g takes the first placement (slices 0-3), where the only 4g placement lies
        ((("three", "3g.40gb"), ("four", "4g.40gb")), {"three": ("fits", 1), "four": ("pending", 0)}),
        # two 3g fill the GPU, a third does not fit
        ((("three", "3g.40gb"),), {"three": ("pending", 2)}),
    ],
)
def test_3g_and_4g_combinations(order, expected):
    replicas = {"three": 3} if len(order) == 1 else {}
    objects: list[dict[str, Any]] = []
    for name, profile in order:
        objects += [profile_claim(name, profile), deployment(name, replicas.get(name, 1), claim=name)]
    assert planned(mig_pool(H100), objects, GATES["1.36"]) == expected
    assert planned(mig_pool(A100), objects, GATES["1.36"]) == expected


def test_a_whole_gpu_claim_blocks_every_partition_and_a_partition_blocks_the_whole_gpu():
    whole_first = [
        whole_gpu_claim(),
        deployment("whole", 1, claim="whole"),
        profile_claim("small", "1g.10gb"),
        deployment("small", 1, claim="small"),
    ]
    result = plan(mig_pool(A100), whole_first, GATES["1.36"])
    assert {w.workload.name: (w.status, w.placed) for w in result.workloads} == {
        "whole": ("fits", 1),
        "small": ("pending", 0),
    }
    why = " ".join(result.workloads[1].reasons)
    assert "counters already consumed: pool-node-0: gpu-0-counter-set: " in why
    assert "memory-slice-0" in why
    assert set(next(iter(result.mig_left.values())).values()) == {0}
    small_first = whole_first[2:] + whole_first[:2]
    assert planned(mig_pool(A100), small_first, GATES["1.36"]) == {
        "small": ("fits", 1),
        "whole": ("pending", 0),
    }
    # two GPUs: the whole-GPU claim takes the other one
    assert planned(mig_pool(A100, gpus=2), small_first, GATES["1.36"]) == {
        "small": ("fits", 1),
        "whole": ("fits", 1),
    }


def test_one_pod_asking_more_than_a_gpu_holds_says_which_counters_are_exhausted():
    claim = template(
        exactly("a", 2, f"{ATTRS}.{facts.ATTR_PROFILE} == '3g.40gb'", cls=MIG),
        exactly("b", 1, f"{ATTRS}.{facts.ATTR_PROFILE} == '1g.10gb'", cls=MIG),
        name="two",
    )
    result = plan(mig_pool(A100), [claim, deployment("two", 1, claim="two")], GATES["1.36"])
    [workload] = result.workloads
    assert (workload.status, workload.placed) == ("pending", 0)
    assert any("counters that are exhausted: gpu-0-counter-set:" in r for r in workload.reasons)


def test_the_allocator_counts_in_flight_and_allocated_devices():
    node = mig_pool(A100).node(0)
    allocator = NodeAllocator(node, default_classes(), SelectorCache(), partitionable_devices=True)
    stack = StackModel(classes=default_classes())
    add_object(stack, profile_claim("three", "3g.40gb"))
    add_object(stack, profile_claim("small", "1g.10gb"))
    three, small = stack.templates["default/three"].spec, stack.templates["default/small"].spec
    # two claims in one pod: in flight together (the second 3g takes the other placement), then allocated
    [first, second] = allocator.allocate([three, three]) or []
    assert [first.devices[0].device, second.devices[0].device] == [
        "gpu-0-mig-3g40gb-9-0",
        "gpu-0-mig-3g40gb-9-4",
    ]
    assert allocator.counters_used[("gpu-0-counter-set", "memory-slice-7")] == 1
    assert allocator.counters_used[("gpu-0-counter-set", "multiprocessors")] == 84
    assert allocator.allocate([small]) is None
    assert ("gpu-0-counter-set", "memory-slice-0") in allocator.exhausted
    # in flight only: one pod asking a 3g and a 4g gets both (slices 4-7 and 0-3)
    fresh = NodeAllocator(node, default_classes(), SelectorCache(), partitionable_devices=True)
    add_object(stack, profile_claim("four", "4g.40gb"))
    result = fresh.allocate([three, stack.templates["default/four"].spec], commit=False)
    assert result is not None
    assert [r.devices[0].device for r in result] == ["gpu-0-mig-3g40gb-9-4", "gpu-0-mig-4g40gb-5-0"]
    assert fresh.counters_used == {}


# --- Kubernetes 1.34 without the gate --------------------------------------------------------------------


def test_134_without_the_gate_gets_whole_gpus_as_the_driver_publishes_them():
    """A server that drops shared counters (1.34 and 1.35 by default) makes the driver publish its GPUs as
    without DynamicMIG (`counter_layout` is None): no claim gets a MIG placement, the whole GPU fits."""
    objects = [
        profile_claim("three", "3g.40gb"),
        deployment("three", 1, claim="three"),
        profile_claim("four", "4g.40gb"),
        deployment("four", 1, claim="four"),
        whole_gpu_claim(),
        deployment("whole", 1, claim="whole"),
    ]
    whole_only = {"three": ("pending", 0), "four": ("pending", 0), "whole": ("fits", 1)}
    assert planned(mig_pool(A100), objects, GATES["1.34"]) == whole_only
    assert planned(mig_pool(A100), objects, GATES["1.35"]) == whole_only
    separate = {"three": ("fits", 1), "four": ("pending", 0), "whole": ("pending", 0)}
    assert planned(mig_pool(A100), objects, WITH_GATE_134) == separate
    assert planned(mig_pool(A100), objects, GATES["1.36"]) == separate


def test_kubernetes_gate_overrides():
    gates = with_overrides(GATES["1.34"], " DRAPartitionableDevices=true, ")
    assert gates.partitionable_devices and not GATES["1.34"].partitionable_devices
    assert (
        gates.state("DRAPartitionableDevices") == "DRAPartitionableDevices is turned on in this 1.34 cluster"
    )
    assert with_overrides(GATES["1.36"], "DRAPartitionableDevices=false").partitionable_devices is False
    assert with_overrides(GATES["1.36"], "") == GATES["1.36"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "DynamicMIG=true",
            "--kubernetes-feature-gates: feature gate 'DynamicMIG' is not one the planner models; allowed: "
            "DRAAdminAccess, DRAConsumableCapacity, DRADeviceTaintRules, DRADeviceTaints, "
            "DRAExtendedResource, DRAFractionalCapacityRange, "
            "DRAPartitionableDevices, DRAPrioritizedList, DRAResourceClaimDeviceStatus",
        ),
        (
            "DRAPartitionableDevices=yes",
            "--kubernetes-feature-gates: 'DRAPartitionableDevices=yes'; allowed: "
            "DRAPartitionableDevices=true or DRAPartitionableDevices=false",
        ),
        (
            "DRAPartitionableDevices",
            "--kubernetes-feature-gates: 'DRAPartitionableDevices'; allowed: "
            "DRAPartitionableDevices=true or DRAPartitionableDevices=false",
        ),
    ],
)
def test_bad_kubernetes_gates_are_one_error_naming_them(text, message):
    with pytest.raises(VersionError) as caught:
        with_overrides(GATES["1.34"], text)
    assert str(caught.value) == message


def test_dynamic_mig_is_a_driver_gate_off_by_default():
    assert featuregates.DYNAMIC_MIG == "DynamicMIG"
    assert featuregates.FeatureGates().dynamic_mig is False
    assert featuregates.parse("DynamicMIG=true").dynamic_mig is True


# --- the plan command -----------------------------------------------------------------------------------


def write_stack(folder: Path, product: str = A100, gates: str = "DynamicMIG=true") -> Path:
    (folder / "Pulumi.yaml").write_text("name: vke-gpu-dra\nruntime: python\n")
    stack = folder / "Pulumi.mig.yaml"
    config = {
        "vke-gpu-dra:nodePool.instanceTypes": ["ecs.gni3cl.11xlarge"],
        "vke-gpu-dra:nodePool.minReplicas": 1,
        "vke-gpu-dra:nodePool.desiredReplicas": 1,
        "vke-gpu-dra:nodePool.maxReplicas": 1,
        "vke-gpu-dra:driver.deviceSource": "simulated",
        "vke-gpu-dra:driver.simulatedGpus": 1,
        "vke-gpu-dra:driver.simulatedProduct": product,
        "vke-gpu-dra:driver.featureGates": gates,
    }
    stack.write_text(yaml.safe_dump({"config": config}))
    return stack


def run_plan(tmp_path: Path, capsys: Any, *extra: str, product: str = A100) -> tuple[int, dict[str, Any]]:
    from vke_gpu_dra_ops.__main__ import main

    manifests = tmp_path / "m.yaml"
    manifests.write_text(
        yaml.safe_dump_all(
            [
                profile_claim("three", "3g.40gb"),
                deployment("three", 1, claim="three"),
                profile_claim("four", "4g.40gb"),
                deployment("four", 1, claim="four"),
            ]
        )
    )
    stack = write_stack(tmp_path, product)
    rc = main(["plan", "--stack-config", str(stack), "--manifests", str(manifests), "-o", "json", *extra])
    return rc, json.loads(capsys.readouterr().out)


def test_plan_command_reports_mig_profiles_per_pool(tmp_path, capsys):
    rc, report = run_plan(tmp_path, capsys, "--kubernetes-version", "1.36")
    assert rc == 1 and report["dynamicMIG"] is True
    assert {w["name"]: (w["status"], w["placed"]) for w in report["workloads"]} == {
        "three": ("fits", 1),
        "four": ("pending", 0),
    }
    [four] = [w for w in report["workloads"] if w["name"] == "four"]
    assert any("memory-slice-0" in r for r in four["reasons"])
    [pool] = report["pools"]
    assert pool["migProfiles"]["1g.10gb"] == {"perGpu": 7, "perNode": 7, "atMaxSize": 7}
    assert pool["migProfiles"]["3g.40gb"]["perNode"] == 2
    assert pool["migLeft"]["3g.40gb"] == 1 and pool["migLeft"]["4g.40gb"] == 0
    assert pool["migLeft"]["1g.10gb"] == 3
    [three] = [t for t in report["templates"] if t["name"] == "three"]
    assert three["devices"] == [{"request": "gpu", "device": "gpu-dra-node-0/gpu-0-mig-3g40gb-9-0"}]


def test_plan_command_on_134_without_and_with_the_gate(tmp_path, capsys):
    rc, report = run_plan(tmp_path, capsys, "--kubernetes-version", "1.34")
    assert rc == 1 and report["featureGates"]["DRAPartitionableDevices"] is False
    assert {w["name"]: w["status"] for w in report["workloads"]} == {"three": "pending", "four": "pending"}
    [pool] = report["pools"]
    assert any(
        "drops the slices' sharedCounters" in n and "publishes its GPUs whole" in n for n in pool["notes"]
    )
    assert pool["migProfiles"] == {}
    rc, report = run_plan(
        tmp_path,
        capsys,
        "--kubernetes-version",
        "1.34",
        "--kubernetes-feature-gates",
        "DRAPartitionableDevices=true",
    )
    assert rc == 1 and report["featureGates"]["DRAPartitionableDevices"] is True
    assert {w["name"]: w["status"] for w in report["workloads"]} == {"three": "fits", "four": "pending"}
    assert not any("sharedCounters" in n for n in report["pools"][0]["notes"])


def test_plan_command_refuses_a_bad_kubernetes_gate(tmp_path, capsys):
    from vke_gpu_dra_ops.__main__ import main

    stack = write_stack(tmp_path)
    rc = main(["plan", "--stack-config", str(stack), "--kubernetes-feature-gates", "DRAPartitionable=true"])
    assert rc == 2
    assert "--kubernetes-feature-gates: feature gate 'DRAPartitionable' is not one the planner models" in (
        capsys.readouterr().err
    )


def test_plan_command_says_a_product_without_mig_is_published_whole(tmp_path, capsys):
    _, report = run_plan(tmp_path, capsys, "--kubernetes-version", "1.36", product="NVIDIA L20")
    [pool] = report["pools"]
    assert pool["migProfiles"] == {} and pool["migLeft"] == {}
    assert any("NVIDIA L20 has no MIG profiles" in n for n in pool["notes"])
    assert {w["status"] for w in report["workloads"]} == {"pending"}  # no MIG devices at all


def test_plan_text_lists_mig_claims_per_pool(tmp_path, capsys):
    from vke_gpu_dra_ops.__main__ import main

    run_plan(tmp_path, capsys, "--kubernetes-version", "1.36")
    stack = tmp_path / "Pulumi.mig.yaml"
    main(["plan", "--stack-config", str(stack), "--manifests", str(tmp_path / "m.yaml"),
          "--kubernetes-version", "1.36"])  # fmt: skip
    text = capsys.readouterr().out
    assert "MIG claims that fit an empty node (each profile alone): gpu: 1, 1g.10gb: 7," in text
    assert "MIG claims that still fit after the workloads, pool at maximum size: gpu: 0," in text


# --- the capacity policy --------------------------------------------------------------------------------


def test_check_stack_counts_mig_placements_with_the_gate():
    from . import test_policy as p

    rows = json.dumps({"ecs.test.mig": {"product": A100, "gpus": 1, "source": "test"}})
    selector = f"{ATTRS}.{facts.ATTR_PROFILE} == '1g.10gb'"
    for replicas, fits in ((7.0, True), (8.0, False)):
        resources = [
            p.node_pool(["ecs.test.mig"], high=1.0),
            p.claim_template(exactly("gpu", 1, selector, cls=MIG)),
            p.deployment(replicas),
        ]
        violations = check_stack(resources, rows, kubernetes_version="1.36", dynamic_mig=True)
        assert (violations == []) is fits, violations
        # without the driver gate the GPU is published whole: no MIG device at all
        assert check_stack(resources, rows, kubernetes_version="1.36")


def test_a_selector_on_a_placements_memory_slices_sees_the_capacities_the_driver_publishes():
    """A placement publishes `memorySlice<i>` for each memory slice it holds (a static MIG device's
    capacities): a 1g.10gb claim asking for slice 6 gets the placement starting there, one asking for
    slice 7 (which no 1g.10gb placement holds on an A100 80GB) none."""
    profile = f"{ATTRS}.{facts.ATTR_PROFILE} == '1g.10gb'"
    selector = profile + " && 'memorySlice{}' in device.capacity['" + facts.DRIVER_NAME + "']"
    objects = [
        template(exactly("gpu", 1, selector.format(6), cls=MIG), name="six"),
        deployment("six", 1, claim="six"),
        template(exactly("gpu", 1, selector.format(7), cls=MIG), name="seven"),
        deployment("seven", 1, claim="seven"),
    ]
    result = plan(mig_pool(A100), objects, GATES["1.37"])
    assert {w.workload.name: (w.status, w.placed) for w in result.workloads} == {
        "six": ("fits", 1),
        "seven": ("pending", 0),
    }
    [placement] = [d for d in mig_pool(A100).node(0).devices if d.name.endswith("-1g10gb-19-6")]
    assert placement.capacity["memorySlice6"] == 1 and "memorySlice5" not in placement.capacity
