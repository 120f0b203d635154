"""Kubernetes 1.36 DRA in the planner: pods asking an extended resource (KEP-5004, DRAExtendedResource)
and GPUs shared by memory between claims (KEP-5075, DRAConsumableCapacity, the driver gate
ConsumableShares); on 1.34 neither exists and the verdicts stay what they were."""

from __future__ import annotations

from typing import Any

import pytest
from vke_gpu_dra_core import facts, featuregates
from vke_gpu_dra_core.config import raw_from_stack_file
from vke_gpu_dra_core.config import read as read_config
from vke_gpu_dra_planner.admission import ADMITTED
from vke_gpu_dra_planner.allocator import NodeAllocator, consumed_capacity, violates_policy
from vke_gpu_dra_planner.claims import ManifestError, parse_device_class
from vke_gpu_dra_planner.fit import Planner
from vke_gpu_dra_planner.gates import GATES
from vke_gpu_dra_planner.inventory import SHARE_STEP, GpuPool, RequestPolicy, memory_shares, slice_device
from vke_gpu_dra_planner.selection import SelectorCache
from vke_gpu_dra_planner.stack import StackModel, add_object, default_classes
from vke_gpu_dra_planner.verdict import EXTENDED_CLAIM, plan_model

from .helpers import exactly, parsed, template

GPU = facts.DEVICE_CLASS_GPU.name
GI = 2**30


def shared_pool(gpus: int = 1, nodes: int = 1, *, shares: bool = True) -> GpuPool:
    return GpuPool("pool", "ecs.test.x", "NVIDIA L20", gpus, nodes, nodes, consumable_shares=shares)


def memory_of(pool: GpuPool) -> int:
    sharing = pool.node(0).sharing_of(0)
    assert sharing is not None
    return sharing.capacity[facts.CAPACITY_MEMORY]


def share(name: str, memory: str | None, count: int = 1) -> dict[str, Any]:
    request = exactly(name, count)
    if memory is not None:
        request["exactly"]["capacity"] = {"requests": {facts.CAPACITY_MEMORY: memory}}
    return request


def allocator(pool: GpuPool, version: str) -> NodeAllocator:
    gates = GATES[version]
    return NodeAllocator(
        pool.node(0), default_classes(), SelectorCache(), consumable_capacity=gates.consumable_capacity
    )


# --- request policies (calculateConsumedCapacity, violatesPolicy) -----------------------------------


RANGE = RequestPolicy(default=8, minimum=2, maximum=16, step=4)


@pytest.mark.parametrize(
    ("requested", "policy", "consumed", "allowed"),
    [
        (None, RANGE, 8, True),  # not named: the default
        (None, None, 100, True),  # not named, no policy: the whole capacity
        (1, RANGE, 2, True),  # below min: min
        (3, RANGE, 6, True),  # up to min + n*step
        (6, RANGE, 6, True),
        (15, RANGE, 18, False),  # rounded past max
        (7, None, 7, True),  # no policy: as asked
        (3, RequestPolicy(valid_values=(4, 8)), 4, True),  # the first valid value not below it
        (9, RequestPolicy(valid_values=(4, 8)), 9, False),  # above all: as asked, and refused
        (5, RequestPolicy(minimum=0), 5, True),  # no step: as asked
    ],
)
def test_a_request_is_rounded_as_the_scheduler_rounds_it(requested, policy, consumed, allowed):
    amount = consumed_capacity(requested, 100, policy)
    assert amount == consumed
    assert violates_policy(amount, policy) is not allowed


def test_shares_are_published_as_nvidia_publishes_them():
    pool = shared_pool()
    device, sharing = pool.node(0).devices[0], pool.node(0).sharing_of(0)
    assert sharing is not None
    memory = device.capacity[facts.CAPACITY_MEMORY] // SHARE_STEP * SHARE_STEP
    assert sharing.policies[facts.CAPACITY_MEMORY] == RequestPolicy(memory, SHARE_STEP, memory, SHARE_STEP)
    entry = slice_device(device, sharing)
    assert entry["allowMultipleAllocations"] is True
    assert entry["capacity"][facts.CAPACITY_MEMORY]["requestPolicy"] == {
        "default": f"{memory // SHARE_STEP}Mi" if memory % GI else f"{memory // GI}Gi",
        "validRange": {"min": "1Mi", "max": entry["capacity"][facts.CAPACITY_MEMORY]["value"], "step": "1Mi"},
    }
    assert memory_shares(device) == sharing
    assert shared_pool(shares=False).node(0).sharing == ()


# --- consumable capacity in the allocator --------------------------------------------------------


def test_two_claims_share_one_gpu_up_to_its_memory_on_136():
    pool = shared_pool()
    half = f"{memory_of(pool) // 2 // SHARE_STEP}Mi"
    claim = parsed(share("gpu", half)).spec
    alloc = allocator(pool, "1.36")
    first, second = alloc.allocate([claim]), alloc.allocate([claim])
    assert first is not None and second is not None
    assert first[0].devices[0].device == second[0].devices[0].device == "gpu-0"
    assert first[0].devices[0].consumed == (
        (facts.CAPACITY_MEMORY, memory_of(pool) // 2 // SHARE_STEP * SHARE_STEP),
    )
    assert alloc.allocate([claim]) is None  # the memory is spent
    assert alloc.used == 1 and not alloc.in_use


def test_a_claim_without_capacity_takes_the_default_the_whole_gpu():
    pool = shared_pool()
    alloc = allocator(pool, "1.36")
    assert alloc.allocate([parsed(share("gpu", None)).spec]) is not None
    assert alloc.allocate([parsed(share("gpu", "1Gi")).spec]) is None


def test_more_than_the_gpu_or_an_unknown_capacity_fits_nowhere():
    pool = shared_pool()
    alloc = allocator(pool, "1.36")
    too_much = f"{memory_of(pool) // SHARE_STEP + 1}Mi"
    assert alloc.allocate([parsed(share("gpu", too_much)).spec]) is None
    unknown = exactly("gpu")
    unknown["exactly"]["capacity"] = {"requests": {"bandwidth": "1"}}
    assert alloc.allocate([parsed(unknown).spec]) is None


def test_two_requests_of_one_claim_may_share_one_gpu():
    pool = shared_pool()
    quarter = f"{memory_of(pool) // 4 // SHARE_STEP}Mi"
    result = allocator(pool, "1.36").allocate([parsed(share("a", quarter), share("b", quarter)).spec])
    assert result is not None
    assert [d.device for d in result[0].devices] == ["gpu-0", "gpu-0"]


def test_on_134_the_fields_are_dropped_and_each_claim_takes_a_whole_gpu():
    pool = shared_pool(gpus=2)
    half = f"{memory_of(pool) // 2 // SHARE_STEP}Mi"
    claim = parsed(share("gpu", half)).spec
    alloc = allocator(pool, "1.34")
    devices = [alloc.allocate([claim]) for _ in range(3)]
    assert [r[0].devices[0].device if r else None for r in devices] == ["gpu-0", "gpu-1", None]
    assert [r[0].devices[0].consumed if r else None for r in devices[:2]] == [(), ()]


def test_capacity_requests_select_whole_gpus_without_shares_on_136():
    pool = shared_pool(shares=False)
    alloc = allocator(pool, "1.36")
    assert alloc.allocate([parsed(share("gpu", f"{memory_of(shared_pool()) + GI}")).spec]) is None
    assert alloc.allocate([parsed(share("gpu", "1Gi")).spec]) is not None
    assert alloc.allocate([parsed(share("gpu", "1Gi")).spec]) is None  # exclusive: in use


def test_fit_counts_shares_per_node():
    pool = shared_pool(gpus=2, nodes=2)
    quarter = f"{memory_of(pool) // 4 // SHARE_STEP}Mi"
    tpl = parsed(share("gpu", quarter))
    result = Planner(default_classes(), consumable_capacity=True).fit("t", [("t", tpl.spec)], [[pool]], 16)
    assert (result.pools[0].per_node, result.at_max, result.fits) == (8, 16, True)
    result = Planner(default_classes()).fit("t", [("t", tpl.spec)], [[pool]], 16)
    assert (result.pools[0].per_node, result.at_max, result.fits) == (2, 4, False)


# --- the stack: workloads sharing GPUs, and pods asking nvidia.com/gpu ---------------------------------


def deployment(name: str, replicas: int, *, claim: str | None = None, limits: dict[str, Any] | None = None):
    container: dict[str, Any] = {"name": "c", "image": "busybox"}
    spec: dict[str, Any] = {"containers": [container]}
    if limits is not None:
        container["resources"] = {"limits": limits}
    if claim is not None:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": claim}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas, "template": {"spec": spec}},
    }


def mapped_class(resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    manifest: dict[str, Any] = facts.DEVICE_CLASS_GPU.manifest()
    return {**manifest, "spec": {**manifest["spec"], "extendedResourceName": resource}}


def model(*objects: dict[str, Any], pool: GpuPool | None = None) -> StackModel:
    built = StackModel(classes=default_classes(), pools=[[pool or shared_pool(gpus=2, shares=False)]])
    for obj in objects:
        add_object(built, obj)
    return built


def verdicts(stack: StackModel, version: str) -> dict[str, tuple[str, int]]:
    return {w.workload.name: (w.status, w.placed) for w in plan_model(stack, GATES[version]).workloads}


def test_an_extended_resource_pod_counts_as_its_claim_on_136():
    stack = model(mapped_class(), deployment("classic", 3, limits={"nvidia.com/gpu": 1}))
    assert verdicts(stack, "1.36") == {"classic": ("pending", 2)}
    stack = model(mapped_class(), deployment("classic", 1, limits={"nvidia.com/gpu": "2"}))
    assert verdicts(stack, "1.36") == {"classic": ("fits", 1)}
    plan = plan_model(stack, GATES["1.36"])
    assert plan.workloads[0].alone is not None and plan.workloads[0].alone.fits


def test_extended_resource_pods_and_claims_share_the_pool():
    stack = model(
        mapped_class(),
        template(exactly("gpu"), name="one"),
        deployment("claims", 1, claim="one"),
        deployment("classic", 2, limits={"nvidia.com/gpu": 1}),
    )
    assert verdicts(stack, "1.36") == {"claims": ("fits", 1), "classic": ("pending", 1)}


def test_the_implicit_class_name_maps_without_extended_resource_name():
    stack = model(deployment("implicit", 2, limits={f"deviceclass.resource.kubernetes.io/{GPU}": 1}))
    assert verdicts(stack, "1.36") == {"implicit": ("fits", 2)}


def test_on_134_an_extended_resource_pod_stays_pending_and_says_why():
    stack = model(mapped_class(), deployment("classic", 1, limits={"nvidia.com/gpu": 1}))
    plan = plan_model(stack, GATES["1.34"])
    [workload] = plan.workloads
    assert (workload.status, workload.placed) == ("pending", 0)
    assert "DRAExtendedResource is off by default in 1.34" in workload.reasons[0]
    assert "Insufficient nvidia.com/gpu" in workload.reasons[0]
    assert not plan.fits


def test_an_unmapped_nvidia_gpu_pod_stays_pending_on_136():
    stack = model(deployment("classic", 1, limits={"nvidia.com/gpu": 1}))
    [workload] = plan_model(stack, GATES["1.36"]).workloads
    assert workload.status == "pending"
    assert "which no DeviceClass maps" in workload.reasons[0]


def test_other_extended_resources_are_not_the_gpu_pools_business():
    stack = model(deployment("rdma", 1, limits={"rdma.example.com/hca": 1}))
    assert verdicts(stack, "1.36") == verdicts(stack, "1.34") == {}


def test_the_scheduler_claim_has_one_request_per_container_resource():
    stack = model(mapped_class(), deployment("classic", 1, limits={"nvidia.com/gpu": 2}))
    plan = plan_model(stack, GATES["1.36"])
    alone = plan.workloads[0].alone
    assert alone is not None
    assert [c[:2] for c in alone.pools[0].chosen] == [
        (EXTENDED_CLAIM, "container-0-request-0"),
        (EXTENDED_CLAIM, "container-0-request-0"),
    ]


def test_workloads_share_gpus_on_136_and_not_on_134():
    pool = shared_pool(gpus=1)
    half = f"{memory_of(pool) // 2 // SHARE_STEP}Mi"
    stack = model(template(share("gpu", half), name="half"), deployment("pair", 2, claim="half"), pool=pool)
    assert verdicts(stack, "1.36") == {"pair": ("fits", 2)}
    assert verdicts(stack, "1.34") == {"pair": ("pending", 1)}
    plan = plan_model(stack, GATES["1.34"])
    assert plan.admissions["default/half"].status == ADMITTED
    assert plan.admissions["default/half"].dropped == (
        "spec.spec.devices.requests[0].exactly.capacity is dropped (DRAConsumableCapacity is off by "
        "default in 1.34): it asks for whole devices",
    )
    assert any("capacity is dropped" in h for h in plan.workloads[0].hints)
    assert plan_model(stack, GATES["1.36"]).admissions["default/half"].dropped == ()


def test_without_the_driver_gate_the_gpus_are_not_shared_on_136():
    pool = shared_pool(gpus=1)
    half = f"{memory_of(pool) // 2 // SHARE_STEP}Mi"
    stack = model(template(share("gpu", half), name="half"), deployment("pair", 2, claim="half"), pool=pool)
    stack.share_gpus(False)
    assert verdicts(stack, "1.36") == {"pair": ("pending", 1)}


# --- bad input ----------------------------------------------------------------------------------------


def test_a_capacity_request_that_is_no_quantity_is_one_clear_error():
    with pytest.raises(ManifestError, match=r"capacity.requests.memory is 'lots'; allowed: a non-negative"):
        parsed(share("gpu", "lots"))
    with pytest.raises(ManifestError, match=r"capacity.requests has key 'no such'"):
        bad = exactly("gpu")
        bad["exactly"]["capacity"] = {"requests": {"no such": "1"}}
        parsed(bad)


def test_a_bad_extended_resource_name_or_quantity_is_one_clear_error():
    with pytest.raises(ManifestError, match=r"spec.extendedResourceName is 'gpu'; allowed: an extended"):
        parse_device_class(mapped_class("gpu"))
    with pytest.raises(ManifestError, match=r"spec.extendedResourceName is 'x.kubernetes.io/gpu'"):
        parse_device_class(mapped_class("x.kubernetes.io/gpu"))
    with pytest.raises(
        ManifestError,
        match=r"Deployment half: field spec.template.spec.containers\[0\].resources.limits.nvidia.com/gpu "
        r"is '0.5'; allowed: a whole number",
    ):
        add_object(StackModel(), deployment("half", 1, limits={"nvidia.com/gpu": "0.5"}))


def test_consumable_shares_and_mps_are_refused_together():
    assert featuregates.conflicts({"ConsumableShares": True, "MPSSupport": True}) is not None
    assert featuregates.conflicts({"ConsumableShares": True, "TimeSlicingSettings": True}) is None
    _, issues = read_config(
        raw_from_stack_file({"vke-gpu-dra:driver.featureGates": "ConsumableShares=true,MPSSupport=true"})
    )
    [issue] = [i for i in issues if "featureGates" in i.key]
    assert "MPS sharing is not supported when consumable shares is enabled" in str(issue)
    cfg, issues = read_config(
        raw_from_stack_file({"vke-gpu-dra:driver.featureGates": "ConsumableShares=true"})
    )
    assert not [i for i in issues if "featureGates" in i.key]
    assert cfg.driver.feature_gates == {"ConsumableShares": True}


# --- the plan command -----------------------------------------------------------------------------------


def test_plan_command_shares_gpus_with_the_driver_gate_on_136_only(tmp_path, capsys):
    import json

    import yaml
    from vke_gpu_dra_ops.__main__ import main

    (tmp_path / "Pulumi.yaml").write_text("name: vke-gpu-dra\nruntime: python\n")
    stack = tmp_path / "Pulumi.share.yaml"
    config = {
        "vke-gpu-dra:nodePool.instanceTypes": ["ecs.gni3cl.11xlarge"],
        "vke-gpu-dra:driver.deviceSource": "simulated",
        "vke-gpu-dra:driver.simulatedGpus": 1,
        "vke-gpu-dra:driver.simulatedProduct": "NVIDIA L20",
        "vke-gpu-dra:driver.featureGates": "ConsumableShares=true",
    }
    stack.write_text(yaml.safe_dump({"config": config}))
    half = f"{memory_of(shared_pool()) // 2 // SHARE_STEP}Mi"
    manifests = tmp_path / "m.yaml"
    manifests.write_text(
        yaml.safe_dump_all(
            [
                template(share("gpu", half), name="half"),
                deployment("pair", 2, claim="half"),
                mapped_class(),
                deployment("classic", 1, limits={"nvidia.com/gpu": 1}),
            ]
        )
    )
    reports = {}
    for version in ("1.36", "1.37", "1.34"):
        args = ["plan", "--stack-config", str(stack), "--manifests", str(manifests), "-o", "json"]
        rc = main([*args, "--kubernetes-version", version])
        reports[version] = (rc, json.loads(capsys.readouterr().out))
    rc, report = reports["1.36"]
    assert report["consumableShares"] is True and report["featureGates"]["DRAExtendedResource"] is True
    # the classic pod comes after the pair, which left no memory: Pending beside them, fits alone
    assert {w["name"]: (w["status"], w["placed"]) for w in report["workloads"]} == {
        "pair": ("fits", 2),
        "classic": ("pending", 0),
    }
    # 1.37 has the gates 1.36 has on, and DRADeviceTaintRules: the same plan
    newest = reports["1.37"][1]
    assert newest["kubernetesVersion"] == "1.37"
    assert newest["featureGates"] == {**report["featureGates"], "DRADeviceTaintRules": True}
    assert newest["workloads"] == report["workloads"] and reports["1.37"][0] == rc
    rc, report = reports["1.34"]
    assert rc == 1 and report["featureGates"]["DRAExtendedResource"] is False
    assert {w["name"]: (w["status"], w["placed"]) for w in report["workloads"]} == {
        "pair": ("pending", 1),
        "classic": ("pending", 0),
    }
    [half_template] = [t for t in report["templates"] if t["name"] == "half"]
    assert half_template["admission"] == "admitted" and half_template["admissionDropped"]


def test_extended_resource_pods_kept_off_the_gpu_pools_are_not_planned():
    pod = deployment("elsewhere", 1, limits={"nvidia.com/gpu": 1})
    pod["spec"]["template"]["spec"]["nodeSelector"] = {facts.LABEL_GPU_SCHEDULE: "nvidia"}
    labelled = GpuPool(
        "pool", "ecs.test.x", "NVIDIA L20", 2, 1, 1, labels=tuple(facts.REQUIRED_NODE_LABELS.items())
    )
    assert verdicts(model(mapped_class(), pod, pool=labelled), "1.34") == {}
    del pod["spec"]["template"]["spec"]["nodeSelector"]
    assert verdicts(model(mapped_class(), pod, pool=labelled), "1.34") == {"elsewhere": ("pending", 0)}
