"""The planner's allocator agrees with the real kube-scheduler where 1.37's allocator differs from the ones
before it (the 1.37 release notes' allocator fixes) and where 1.34 differs from 1.37. Each test lets the
real scheduler place the pods and compares with the planner's verdict for that release; on 1.37 it also
shows that the rules of 1.36 (`vke-gpu-dra plan --kubernetes-version 1.36`) would have said otherwise, so
the case tells the releases apart.

* `allocationMode: All` with consumable capacity (kubernetes#140769): a GPU whose remaining memory is
  taken fails the request on 1.37 instead of being left out;
* `distinctAttribute` per device with consumable capacity (kubernetes#140600);
* counters given back when a candidate fails a constraint (kubernetes#140431, #140437);
* a capacity request past int64 (kubernetes#140442, #140702, #140666): an allocation error on 1.37;
* a fractional `validRange`: kept by the 1.37 API server, but DRAFractionalCapacityRange (beta) is off on a
  default 1.37 control plane, so requests are rounded in whole units; the 1.34 API server drops the policy
  and the capacity requests.

The first three, and `distinctAttribute` over one shared GPU, run on a fourth control plane too: 1.34 with
DRAConsumableCapacity turned on (`allocator_clusters`), where v1.34.4's experimental allocator leaves `All`
pending after a partial claim, never takes one shared device twice under `distinctAttribute` (it compares
pointers), and allocates a share past int64 consuming 0; `plan` gets the gate with
`--kubernetes-feature-gates`.

Devices are published by the test (the driver's own publishing is tested in test_consumable_shares.py and
test_dynamic_mig.py): the simulated GPUs of the planner's pool, shared as the driver gate ConsumableShares
publishes them, or partitioned as DynamicMIG publishes them.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.consumable_shares import RequestPolicy, Sharing
from vke_gpu_dra_core.quantity import format_quantity
from vke_gpu_dra_planner.allocator import NodeAllocator
from vke_gpu_dra_planner.claims import parse_claim_template
from vke_gpu_dra_planner.gates import GATES, with_overrides
from vke_gpu_dra_planner.inventory import SHARE_STEP, GpuPool, Node, slice_device
from vke_gpu_dra_planner.selection import SelectorCache
from vke_gpu_dra_planner.stack import default_classes

from .cluster import Cluster
from .controlplane import wait_until
from .test_planner_agreement import (
    INSTANCE_TYPE,
    MEMORY_GIB,
    MIG_PRODUCT,
    NEWER,
    PRODUCT,
    VCPUS,
    deployment,
    mig_slices,
    mig_template,
    plan,
    schedule,
    template,
    turned,
)

UUID = f"{facts.DRIVER_NAME}/{facts.ATTR_UUID}"
PROFILE = f"{facts.DRIVER_NAME}/{facts.ATTR_PROFILE}"


def one_node(gpus: int, product: str, gate: str) -> dict[str, Any]:
    """Stack config: one node of `gpus` simulated GPUs of `product`, driver gate `gate` on."""
    return {
        "vke-gpu-dra:nodePool.minReplicas": 1,
        "vke-gpu-dra:nodePool.desiredReplicas": 1,
        "vke-gpu-dra:nodePool.maxReplicas": 1,
        "vke-gpu-dra:driver.deviceSource": "simulated",
        "vke-gpu-dra:driver.simulatedGpus": gpus,
        "vke-gpu-dra:driver.simulatedProduct": product,
        "vke-gpu-dra:driver.featureGates": f"{gate}=true",
    }


def shared_node(gpus: int) -> Node:
    return GpuPool("pool", INSTANCE_TYPE, PRODUCT, gpus, 1, 1, consumable_shares=True).node(0)


def publish(cluster: Cluster, node_name: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The DeviceClasses and one ResourceSlice of `entries` for the node; the slice as stored."""
    cluster.apply(facts.DEVICE_CLASS_GPU.manifest(), shared=True)
    return cluster.apply({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-devices"},
        "spec": {"driver": facts.DRIVER_NAME, "nodeName": node_name, "devices": entries,
                 "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1}},
    })  # fmt: skip


def gated_134(node: Node) -> NodeAllocator:
    """The planner's allocator for 1.34 with DRAConsumableCapacity turned on."""
    gates = with_overrides(GATES["1.34"], "DRAConsumableCapacity=true")
    return NodeAllocator.for_gates(node, default_classes(), SelectorCache(), gates)


def publish_shared_gpus(cluster: Cluster, gpus: int) -> None:
    node_name = cluster.add_node("shares", cpu=str(VCPUS), memory=f"{MEMORY_GIB}Gi")["metadata"]["name"]
    node = shared_node(gpus)
    publish(cluster, node_name, [slice_device(d, node.sharing_of(i)) for i, d in enumerate(node.devices)])


def memory_share(name: str, memory: str, count: int = 1, *, mode: str = "ExactCount") -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": facts.DEVICE_CLASS_GPU.name}
    if mode == "All":
        body["allocationMode"] = "All"
    else:
        body["count"] = count
    body["capacity"] = {"requests": {facts.CAPACITY_MEMORY: memory}}
    return {"name": name, "exactly": body}


def claim_template(
    name: str, *requests: dict[str, Any], constraints: list[Any] | None = None
) -> dict[str, Any]:
    claim = template(name, 1)
    devices = claim["spec"]["spec"]["devices"]
    devices["requests"] = list(requests)
    if constraints:
        devices["constraints"] = constraints
    return claim


def verdicts(report: dict[str, Any]) -> dict[str, tuple[str, int]]:
    return {w["name"]: (w["status"], w["placed"]) for w in report["workloads"]}


def agree(
    cluster: Cluster,
    claims: list[dict[str, Any]],
    order: list[tuple[str, int, str]],
    config: dict[str, Any],
    publish_devices: Any,
    *,
    tells_136_apart: bool = True,
) -> dict[str, tuple[str, int]]:
    """Plan `claims` and the Deployments `order` (name, replicas, template) for this cluster's release
    (and the gates its control plane turns), let the real scheduler place them, assert both agree; on 1.37
    also that 1.36's rules differ (unless not `tells_136_apart`). The scheduler's verdict."""
    version = cluster.plane.version
    objects = [*claims, *(deployment(n, r, t, cluster.namespace) for n, r, t in order)]
    planned = verdicts(plan(cluster, objects, version, config))
    publish_devices()
    for claim in claims:
        cluster.apply(claim)
    actual = schedule(cluster, order)
    assert actual == planned, f"{version}: scheduler {actual}, planner {planned}"
    if version in NEWER and tells_136_apart:
        assert verdicts(plan(cluster, objects, "1.36", config)) != actual, "the case does not tell 1.36 apart"
    return actual


def test_all_with_a_gpus_memory_taken_fails_on_137(allocator_clusters: Cluster) -> None:
    """2 shared GPUs; a first pod takes 3/4 of gpu-0's memory, a second asks `All` GPUs with half the
    memory each. 1.37: gpu-0 is one of `All` and has too little left: Pending (1.36 left it out and
    placed the pod on gpu-1). 1.34: capacity dropped, the first pod takes gpu-0 whole, `All` cannot
    have it: Pending. 1.34 with DRAConsumableCapacity on: Pending, as on 1.37 (alone, `All` gets both)."""
    cluster = allocator_clusters
    memory = shared_node(2).sharing_of(0)
    assert memory is not None
    whole = memory.capacity[facts.CAPACITY_MEMORY]
    claims = [
        claim_template("big", memory_share("gpu", f"{whole * 3 // 4 // SHARE_STEP}Mi")),
        claim_template("every", memory_share("gpu", f"{whole // 2 // SHARE_STEP}Mi", mode="All")),
    ]
    actual = agree(
        cluster,
        claims,
        [("big", 1, "big"), ("every", 1, "every")],
        one_node(2, PRODUCT, "ConsumableShares"),
        lambda: publish_shared_gpus(cluster, 2),
    )
    assert actual["every"][1] == 0


def test_distinct_attribute_is_enforced_per_device_on_137(allocator_clusters: Cluster) -> None:
    """2 shared GPUs; one claim: request a (2 shares), request b (1 share), distinct uuids. 1.37 finds no
    third uuid: Pending (1.36 let b share gpu-0 with a). 1.34: whole GPUs, none left for b: Pending. 1.34
    with DRAConsumableCapacity on keeps one value per request name, as 1.36: b shares gpu-0 with a."""
    cluster = allocator_clusters
    claim = claim_template(
        "distinct",
        memory_share("a", "1Gi", 2),
        memory_share("b", "1Gi"),
        constraints=[{"distinctAttribute": UUID}],
    )
    agree(
        cluster,
        [claim],
        [("distinct", 1, "distinct")],
        one_node(2, PRODUCT, "ConsumableShares"),
        lambda: publish_shared_gpus(cluster, 2),
    )


def test_distinct_attribute_never_takes_one_shared_gpu_twice(allocator_clusters: Cluster) -> None:
    """1 shared GPU; one claim asking 2 shares of it with distinct uuids. 1.37 and 1.38 compare the values:
    Pending. 1.34 with DRAConsumableCapacity on keeps the GPU's sharing and compares the attribute by
    pointer: one device gives one pointer, so its second share is refused too: Pending (the planner's 1.34
    model placed both shares before). 1.34 with the gate off: whole GPUs, only one: Pending."""
    cluster = allocator_clusters
    claim = claim_template("twice", memory_share("a", "1Gi", 2), constraints=[{"distinctAttribute": UUID}])
    actual = agree(
        cluster,
        [claim],
        [("twice", 1, "twice")],
        one_node(1, PRODUCT, "ConsumableShares"),
        lambda: publish_shared_gpus(cluster, 1),
        tells_136_apart=False,  # 1.36 compares values too
    )
    assert actual == {"twice": ("pending", 0)}


def test_counters_of_a_rejected_placement_are_given_back_on_137(each_cluster: Cluster) -> None:
    """One A100 80GB partitioned (DynamicMIG); one claim: a 3g.40gb, then any MIG device with the same
    profile. The 1g.10gb placements on memory slices 4-6 are tried first and fail the constraint: 1.37
    gives their counters back and allocates the 3g.40gb on slices 4-7 (1.36 kept them: Pending). 1.34
    would drop the counters, so the plugin publishes the GPU whole: no MIG device, Pending."""
    cluster = each_cluster
    claim = mig_template("pair", "3g.40gb")
    devices = claim["spec"]["spec"]["devices"]
    devices["requests"].append({"name": "same", "exactly": {"deviceClassName": facts.DEVICE_CLASS_MIG.name}})
    devices["constraints"] = [{"matchAttribute": PROFILE}]

    def publish_mig() -> None:
        node_name = cluster.add_node("mig", cpu=str(VCPUS), memory=f"{MEMORY_GIB}Gi")["metadata"]["name"]
        for device_class in (facts.DEVICE_CLASS_GPU, facts.DEVICE_CLASS_MIG):
            cluster.apply(device_class.manifest(), shared=True)
        for piece in mig_slices(node_name, cluster.plane.version in NEWER):
            cluster.apply(piece)

    actual = agree(
        cluster, [claim], [("pair", 1, "pair")], one_node(1, MIG_PRODUCT, "DynamicMIG"), publish_mig
    )
    assert actual == ({"pair": ("fits", 1)} if cluster.plane.version in NEWER else {"pair": ("pending", 0)})


def settled_or_failed(cluster: Cluster, name: str) -> tuple[str, int] | None:
    """The Deployment's one pod: ("fits", 1) once bound, ("pending", 0) once the scheduler gave up on it
    (Unschedulable, or SchedulerError when allocation failed with an error); else None."""
    pods = cluster.pods(f"app={name}")
    if len(pods) != 1:
        return None
    if pods[0]["spec"].get("nodeName"):
        return ("fits", 1)
    for condition in pods[0].get("status", {}).get("conditions") or []:
        if condition["type"] == "PodScheduled" and condition.get("reason") in (
            "Unschedulable",
            "SchedulerError",
        ):
            return ("pending", 0)
    return None


def test_a_capacity_request_past_int64_is_planned_as_the_scheduler_treats_it(
    allocator_clusters: Cluster,
) -> None:
    """A share of 10E bytes of memory: the 1.37 scheduler fails the allocation with an error (`capacity
    request cannot be represented in the device's range arithmetic: request 10E exceeds MaxInt64`) and the
    pod stays Pending; 1.38 too, from its milli-unit path (`request 10E is not a representable milli
    value`); the planner names the same error. 1.34 drops the request and gives the whole GPU. 1.34 with
    DRAConsumableCapacity on reads 10E as 0 (`Quantity.Value()` cannot scale it): the share is allocated
    and records `memory: 0`, as the planner's allocator consumes."""
    cluster = allocator_clusters
    version = cluster.plane.version
    claim = claim_template("huge", memory_share("gpu", "10E"))
    objects = [claim, deployment("huge", 1, "huge", cluster.namespace)]
    report = plan(cluster, objects, version, one_node(1, PRODUCT, "ConsumableShares"))
    publish_shared_gpus(cluster, 1)
    cluster.apply(claim)
    cluster.apply(deployment("huge", 1, "huge", cluster.namespace))
    actual = wait_until(lambda: settled_or_failed(cluster, "huge"), timeout=90)
    assert actual, cluster.pods("app=huge")
    assert {"huge": actual} == verdicts(report)
    if version in NEWER:
        [workload] = report["workloads"]
        wording = "capacity request cannot be represented in the device's range arithmetic"
        # 1.37 computes in whole units (DRAFractionalCapacityRange off), 1.38 in milli units (on)
        why = "exceeds MaxInt64" if version == "1.37" else "is not a representable milli value"
        assert any(wording in r and why in r for r in workload["reasons"]), workload
        pod = cluster.pods("app=huge")[0]["metadata"]["name"]
        assert wording in cluster.why_pending(cluster.namespace, pod)
    if turned(cluster):  # 1.34 with DRAConsumableCapacity: allocated, consuming nothing
        [result] = cluster.claim_of(cluster.pods("app=huge")[0])["status"]["allocation"]["devices"]["results"]
        assert result["consumedCapacity"] == {facts.CAPACITY_MEMORY: "0"}
        [planned] = gated_134(shared_node(1)).allocate([parse_claim_template(claim).spec]) or []
        assert dict(planned.devices[0].consumed) == {facts.CAPACITY_MEMORY: 0}


# ----------------------------------------------------------- fractional ranges (DRAFractionalCapacityRange)

#: a `shares` capacity of 1, shared in tenths: fractional min and step
TENTHS = RequestPolicy(default=1, minimum=Fraction(1, 10), maximum=1, step=Fraction(1, 10))


def tenths_node() -> Node:
    node = GpuPool("pool", INSTANCE_TYPE, PRODUCT, 1, 1, 1).node(0)
    return replace(node, sharing=(Sharing((("shares", 1),), (("shares", TENTHS),)),))


def planned_in_order(node: Node, version: str, claim: dict[str, Any], pods: int) -> list[str | None]:
    """The planner's allocator for `version` (its default gates) on `node`: for each of `pods` pods (one
    claim from `claim` each, in creation order) the `shares` it consumes, or None when it gets no device."""
    gates = GATES[version]
    alloc = NodeAllocator.for_gates(node, default_classes(), SelectorCache(), gates)
    spec = parse_claim_template(claim).spec
    out: list[str | None] = []
    for _ in range(pods):
        result = alloc.allocate([spec])
        consumed = dict(result[0].devices[0].consumed) if result else {}
        out.append(None if result is None else format_quantity(consumed.get("shares", Fraction(1))))
    return out


def test_fractional_shares_are_planned_as_the_scheduler_allocates_them(each_cluster: Cluster) -> None:
    """One device with a `shares` capacity of 1 and validRange {min 100m, max 1, step 100m}; four pods
    asking 250m each. The 1.37 API server keeps the range, but DRAFractionalCapacityRange is off by default
    (on only with --min-compatibility-version 1.37): the scheduler rounds in whole units, 250m to 1, and one
    pod fits. 1.38 has the gate GA and on: 250m is rounded up to the step, and three pods fit with 300m
    each (measured on v1.38.0-beta.0). 1.34 drops `allowMultipleAllocations`,
    the policy and the requests: one pod takes the device. The planner says the same, down to the consumed
    capacity."""
    cluster = each_cluster
    version = cluster.plane.version
    node = tenths_node()
    node_name = cluster.add_node("tenths", cpu=str(VCPUS), memory=f"{MEMORY_GIB}Gi")["metadata"]["name"]
    stored = publish(cluster, node_name, [slice_device(node.devices[0], node.sharing_of(0))])
    [kept] = stored["spec"]["devices"]
    if version in NEWER:
        policy = kept["capacity"]["shares"]["requestPolicy"]
        assert policy["validRange"] == {"min": "100m", "max": "1", "step": "100m"}
    else:
        assert "allowMultipleAllocations" not in kept
    claim = claim_template(
        "tenth",
        {"name": "s", "exactly": {"deviceClassName": facts.DEVICE_CLASS_GPU.name,
                                  "capacity": {"requests": {"shares": "250m"}}}},
    )  # fmt: skip
    planned = planned_in_order(node, version, claim, 4)
    cluster.apply(claim)
    actual = schedule(cluster, [(f"p{i}", 1, "tenth") for i in range(4)])
    assert [actual[f"p{i}"] == ("fits", 1) for i in range(4)] == [p is not None for p in planned]
    consumed = [
        cluster.claim_of(p)["status"]["allocation"]["devices"]["results"][0].get("consumedCapacity", {})
        for p in cluster.pods()
        if p["spec"].get("nodeName")
    ]
    if version in NEWER:
        assert [c["shares"] for c in consumed] == [p for p in planned if p is not None]
    else:
        assert consumed == [{}]
    if version == "1.38":  # milli units: 250m rounded up to the 100m step, three shares fit
        assert [c["shares"] for c in consumed] == ["300m"] * 3, consumed
