"""The planner's answer is the one kube-scheduler and kube-apiserver give on the same nodes and devices.

Each case states what the default scheduler (or the API server) does and why; the expectation is that
outcome, not what a first-fit search would say.
"""

import json
from typing import Any

import pytest
from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_planner import check_stack
from vke_gpu_dra_planner.gates import VersionError, feature_gates, with_overrides
from vke_gpu_dra_planner.stack import model_from_resources
from vke_gpu_dra_planner.verdict import plan_model

from .helpers import exactly
from .test_policy import DRA_LABELS, POOL, claim_template, deployment, node_pool, res

#: a 4-GPU type, from the stack's catalog rows (with CPU and memory, which the scheduler scores)
FOUR = "ecs.gni3cl.44xlarge"
ROWS = json.dumps(
    {FOUR: {"product": "NVIDIA L20", "gpus": 4, "source": "test", "vcpus": 176, "memoryGiB": 960}}
)


def two_nodes_of_four_gpus():
    pool = node_pool(types=[FOUR], high=2.0)
    pool.props["autoScaling"]["minReplicas"] = 2.0
    return pool


def plan_of(resources: list[Any], rows: str = ROWS, version: str | None = None):
    model = model_from_resources(resources, rows)
    return plan_model(model, feature_gates(version) if version else None)


def statuses(resources: list[Any], **kwargs: Any) -> dict[str, tuple[str, int, int]]:
    return {w.workload.name: (w.status, w.wanted, w.placed) for w in plan_of(resources, **kwargs).workloads}


def test_one_gpu_pods_spread_so_a_whole_node_pod_stays_pending():
    """4 one-GPU pods, then one 4-GPU pod, on 2 nodes x 4 GPUs.

    The scheduler has no DRA score for `exactly` requests; the system default topology spreading
    (hostname, maxSkew 3, ScheduleAnyway, weight 2) and LeastAllocated on the pods' non-zero default
    requests (100m CPU, 200Mi) both prefer the node with fewer pods, so the 1-GPU pods land 2 + 2.
    No node keeps 4 free GPUs: the 4-GPU pod stays Pending (first fit would have packed 4 + 0).
    """
    resources = [
        two_nodes_of_four_gpus(),
        claim_template(exactly("gpu", 1), name="one"),
        claim_template(exactly("gpu", 4), name="four"),
        deployment(4.0, claim="one", name="small"),
        deployment(1.0, claim="four", name="whole"),
    ]
    assert statuses(resources) == {"small": ("fits", 4, 4), "whole": ("pending", 1, 0)}
    [violation] = check_stack(resources, ROWS)
    assert violation.urn.endswith("::whole")
    assert violation.message.startswith(
        "Deployment default/whole: fits alone, but beside the workloads before it only 0 of 1 replica(s)"
    )
    whole = plan_of(resources).workloads[1]
    assert (whole.guaranteed, whole.best) == (0, 1)
    assert any("MostAllocated" in h for h in whole.hints)


def test_spread_pods_leave_room_for_larger_pods_on_every_node():
    """2 one-GPU pods, then 2 three-GPU pods, on 2 nodes x 4 GPUs.

    Spreading puts the 1-GPU pods one per node; each node keeps 3 free GPUs, so both 3-GPU pods are
    scheduled. First fit (both 1-GPU pods on node 0) would leave room for one 3-GPU pod only.
    """
    resources = [
        two_nodes_of_four_gpus(),
        claim_template(exactly("gpu", 1), name="one"),
        claim_template(exactly("gpu", 3), name="three"),
        deployment(2.0, claim="one", name="small"),
        deployment(2.0, claim="three", name="large"),
    ]
    assert check_stack(resources, ROWS) == []
    assert statuses(resources) == {"small": ("fits", 2, 2), "large": ("fits", 2, 2)}
    large = plan_of(resources).workloads[1]
    assert large.guaranteed == 1  # a packing profile would leave one 3-GPU pod pending
    assert any("depends on the scheduler's choices" in h for h in large.hints)


def namespace(name: str, labels: dict[str, str] | None = None):
    props = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}
    return res(pt.NAMESPACE, name, props)


def admin_stack(*extra: Any) -> list[Any]:
    return [node_pool(), claim_template(exactly("gpu", 1, admin=True)), deployment(), *extra]


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"resource.kubernetes.io/admin-access": "true"}, "fits"),
        ({}, "refused"),
        ({"resource.kubernetes.io/admin-access": "yes"}, "refused"),
        (None, "unknown"),
    ],
)
def test_admin_access_needs_the_namespace_label(labels, expected):
    """Since 1.34 (DRAAdminAccess on) the API server refuses a claim or template with adminAccess in a
    namespace without `resource.kubernetes.io/admin-access: "true"`. A namespace outside the stack has
    labels nobody here knows: the answer is unknown, and the policy does not block on it.
    """
    extra = [] if labels is None else [namespace("default", labels)]
    [workload] = plan_of(admin_stack(*extra)).workloads
    assert workload.status == expected
    violations = check_stack(admin_stack(*extra))
    if expected == "refused":
        [violation] = violations
        assert violation.message == (
            "Deployment default/app: the API server refuses it: ResourceClaimTemplate.resource.k8s.io "
            '"t" is invalid: spec.spec.devices.requests[0].exactly.adminAccess: Forbidden: admin access '
            "to devices requires the `resource.kubernetes.io/admin-access: true` label on the "
            "containing namespace"
        )
        assert workload.placed == 0
    else:
        assert violations == []
    if expected == "unknown":
        assert "namespace default, which is not part of the stack" in workload.reasons[0]


@pytest.mark.parametrize(
    ("version", "expected"),
    [("1.34", "fits"), ("v1.34.4", "fits"), ("v1.35.1", "refused"), ("1.36", "fits"), ("1.37", "fits")],
)
def test_distinct_attribute_per_version(version, expected):
    """`distinctAttribute` belongs to DRAConsumableCapacity: alpha (off) in 1.34 and 1.35, beta (on) from
    1.36. With the gate off a 1.35 API server drops the field and then refuses the empty constraint, so
    creating the template fails (`pulumi up` fails); with it on, the constraint is enforced. A 1.34 API
    server keeps the field although the gate is off (the real v1.34.4 stores it: its strategy clears a
    copy of each constraint), so the template is admitted there; a hint says that its scheduler only
    checks that the devices have the attribute.
    """
    tpl = claim_template(exactly("gpu", 2))
    tpl.props["spec"]["spec"]["devices"]["constraints"] = [
        {"distinctAttribute": f"{facts.DRIVER_NAME}/{facts.ATTR_UUID}"}
    ]
    resources = [node_pool(), tpl, deployment(8.0)]
    [workload] = plan_of(resources, version=version).workloads
    assert workload.status == expected
    violations = check_stack(resources, kubernetes_version=version)
    if expected == "refused":
        [violation] = violations
        assert violation.message == (
            'Deployment default/app: the API server refuses it: ResourceClaimTemplate.resource.k8s.io "t" '
            "is invalid: spec.spec.devices.constraints[0].matchAttribute: Required value (distinctAttribute "
            f"is dropped: DRAConsumableCapacity is off by default in {feature_gates(version).version})"
        )
    else:
        assert violations == [] and workload.placed == 8
    kept = [h for h in workload.hints if "distinctAttribute is kept" in h]
    if feature_gates(version).version == "1.34":
        assert kept == [
            "default/t: spec.spec.devices.constraints[0].distinctAttribute is kept although "
            "DRAConsumableCapacity is off by default in 1.34 (the API server's drop misses it), and the 1.34 "
            "scheduler only checks that every device of its requests has gpu.nvidia.com/uuid: devices with "
            "equal values may be allocated together"
        ]
    else:
        assert kept == []


@pytest.mark.parametrize(
    ("version", "gates", "shared", "lacking"),
    [
        # the real v1.34.4 scheduler: both GPUs (equal productName) for the claim; none without the attribute
        ("1.34", "", "fits", "pending"),
        ("1.34", "DRAConsumableCapacity=true", "fits", "pending"),
        # the real v1.37.2 scheduler: no two devices with the same productName, none without the attribute
        ("1.37", "", "pending", "pending"),
        ("1.36", "", "pending", "pending"),
        ("1.35", "DRAConsumableCapacity=true", "pending", "pending"),
    ],
)
def test_distinct_attribute_values_are_compared_from_135(version, gates, shared, lacking):
    """A claim for 2 GPUs whose distinctAttribute every GPU of the node shares (productName: 4 x L20), and
    one naming an attribute no GPU has. 1.34's allocator (k8s.io/dynamic-resource-allocation v0.34.4, the
    one DRAResourceClaimDeviceStatus selects) compares the values by pointer, so equal values never
    collide: the first claim gets gpu-0 and gpu-1, as on a real v1.34.4 control plane; a device without
    the attribute is still refused. From 1.35 (gate on) the values are compared: the first claim stays
    Pending, as on a real v1.37.2."""

    def constrained(attribute: str, name: str) -> Any:
        tpl = claim_template(exactly("gpu", 2), name=name)
        tpl.props["spec"]["spec"]["devices"]["constraints"] = [{"distinctAttribute": attribute}]
        return tpl

    resources = [
        two_nodes_of_four_gpus(),
        constrained(f"{facts.DRIVER_NAME}/{facts.ATTR_PRODUCT_NAME}", "same"),
        constrained(f"{facts.DRIVER_NAME}/nonexistent", "lacking"),
        deployment(1.0, claim="same", name="same"),
        deployment(1.0, claim="lacking", name="lacking"),
    ]
    model = model_from_resources(resources, ROWS)
    plan = plan_model(model, with_overrides(feature_gates(version), gates))
    assert {w.workload.name: w.status for w in plan.workloads} == {"same": shared, "lacking": lacking}
    if shared == "fits":
        [pool] = plan.workloads[0].alone.pools
        assert [d.split("/")[-1] for _, _, d in pool.chosen] == ["gpu-0", "gpu-1"]
    for workload in plan.workloads:
        if workload.status == "pending":
            attribute = facts.ATTR_PRODUCT_NAME if workload.workload.name == "same" else "nonexistent"
            [reason] = workload.reasons
            assert reason.endswith(
                "each request fits alone, but not together under the constraint(s) distinctAttribute "
                f"{facts.DRIVER_NAME}/{attribute} across all requests"
            )


def test_the_cluster_resource_names_the_version():
    """The VKE cluster's kubernetesVersion (e.g. v1.36.0-vke.1) selects the gates. A version before 1.34
    is the kubernetes-version policy's to report (planned with the 1.34 rules); a newer one than the
    planner knows is planned with the newest table (1.37)."""
    tpl = claim_template(exactly("gpu", 1))
    tpl.props["spec"]["spec"]["devices"]["constraints"] = [
        {"distinctAttribute": f"{facts.DRIVER_NAME}/{facts.ATTR_UUID}"}
    ]
    cluster = res(pt.CLUSTER, "c", {"kubernetesVersion": "v1.36.0-vke.1"})
    assert check_stack([cluster, node_pool(), tpl, deployment()]) == []
    cluster.props["kubernetesVersion"] = "v1.35.2"
    [violation] = check_stack([cluster, node_pool(), tpl, deployment()])
    assert "DRAConsumableCapacity is off by default in 1.35" in violation.message
    for version in ("v1.37.2", "v1.38.1", "v1.34.2-vke.3", "v1.29.3"):
        cluster.props["kubernetesVersion"] = version
        assert check_stack([cluster, node_pool(), tpl, deployment()]) == [], version
    with pytest.raises(VersionError, match=r"allowed: 1\.34, 1\.35, 1\.36, 1\.37, 1\.38 "):
        feature_gates("latest")


def labelled_pool(name: str, types: list[str], high: float, role: str):
    pool = node_pool(types=types, high=high, labels=[*DRA_LABELS, {"key": "role", "value": role}])
    pool.name = pool.props["name"] = name
    pool.urn = f"urn:pulumi:dev::p::{POOL}::{name}"
    return pool


def test_every_pool_of_a_stack_is_planned_and_reported_per_pool():
    """Two GPU pools: the scheduler places pods on either unless a nodeSelector rules one out; pods that
    may use both spill over to the second when the first is full."""
    selector = deployment(2.0, name="trainer")
    selector.props["spec"]["template"]["spec"]["nodeSelector"] = {"role": "train"}
    resources = [
        labelled_pool("train", ["ecs.hpcpni3ln.45xlarge"], 1.0, "train"),
        labelled_pool("infer", [FOUR], 2.0, "infer"),
        claim_template(exactly("gpu", 4)),
        selector,
        deployment(3.0, name="anywhere"),
    ]
    plan = plan_of(resources)
    by_name = {w.workload.name: w for w in plan.workloads}
    trainer, anywhere = by_name["trainer"], by_name["anywhere"]
    assert (trainer.status, trainer.placed) == ("fits", 2)
    assert trainer.per_pool == {
        "train (ecs.hpcpni3ln.45xlarge: 8x NVIDIA H20)": 2,
        "infer (ecs.gni3cl.44xlarge: 4x NVIDIA L20)": 0,
    }
    assert (anywhere.status, anywhere.placed) == ("pending", 2)
    assert anywhere.per_pool["infer (ecs.gni3cl.44xlarge: 4x NVIDIA L20)"] == 2


def test_a_pool_of_several_instance_types_is_reported_as_a_mix():
    """A pool listing an 8-GPU and a 4-GPU type gets either from the autoscaler: the verdict takes the
    worse, and the mix shows both."""
    resources = [
        node_pool(types=["ecs.hpcpni3ln.45xlarge", FOUR], high=1.0),
        claim_template(exactly("gpu", 4)),
        deployment(2.0),
    ]
    [workload] = plan_of(resources).workloads
    assert (workload.status, workload.placed) == ("pending", 1)
    assert workload.mix == {"ecs.hpcpni3ln.45xlarge": 2, FOUR: 1}


def test_job_pods_without_spreading_leave_the_choice_to_chance():
    """Pods of a Job have no ReplicaSet/StatefulSet owner, so no system default spreading. LeastAllocated
    on 100m/200Mi of a 176-vCPU / 960 GiB node rounds to the same score on both nodes: the scheduler picks
    at random, so the 4-GPU pod finds a whole node only by chance. Not counted as fitting."""
    job = deployment(name="batch")
    job.resource_type = pt.JOB
    job.props["kind"] = "Job"
    job.props["spec"]["parallelism"] = job.props["spec"].pop("replicas") and 4
    resources = [
        two_nodes_of_four_gpus(),
        claim_template(exactly("gpu", 1), name="one"),
        claim_template(exactly("gpu", 4), name="four"),
        job,
        deployment(1.0, claim="four", name="whole"),
    ]
    resources[3].props["spec"]["template"]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "one"
    assert statuses(resources) == {"batch": ("fits", 4, 4), "whole": ("pending", 1, 0)}
    assert statuses(resources) == {"batch": ("fits", 4, 4), "whole": ("pending", 1, 0)}
    whole = plan_of(resources).workloads[1]
    assert (whole.guaranteed, whole.best) == (0, 1)


def test_an_unknown_cluster_version_in_preview_leaves_gated_fields_undecided():
    """In preview the cluster's version may be unknown: distinctAttribute cannot be decided then (1.35
    refuses it, 1.34 and 1.36 on admit it); other answers (the same in 1.34 to 1.37) still are."""
    from .test_policy import Unknown

    cluster = res(pt.CLUSTER, "c", {"kubernetesVersion": Unknown()})
    tpl = claim_template(exactly("gpu", 1))
    tpl.props["spec"]["spec"]["devices"]["constraints"] = [
        {"distinctAttribute": f"{facts.DRIVER_NAME}/{facts.ATTR_UUID}"}
    ]
    assert check_stack([cluster, node_pool(), tpl, deployment()]) == []
    [violation] = check_stack([cluster, node_pool(), claim_template(exactly("gpu", 9)), deployment()])
    assert "needs 9, pool has 8 per node" in violation.message
