import json
from types import SimpleNamespace
from typing import Any

from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_planner import check_stack

from .helpers import MEM, exactly, template

POOL = pt.NODE_POOL
DRA_LABELS = [{"key": key, "value": value} for key, value in facts.REQUIRED_NODE_LABELS.items()]


class Unknown:
    """Stands for a value the engine does not know during preview."""


def res(type_: str, name: str, props: dict[str, Any]) -> SimpleNamespace:
    return SimpleNamespace(
        resource_type=type_, name=name, urn=f"urn:pulumi:dev::p::{type_}::{name}", props=props
    )


def node_pool(types: list[Any] | None = None, high: float = 2.0, labels: list[dict[str, str]] | None = None):
    return res(
        POOL,
        "gpu-pool",
        {
            "name": "gpu",
            "nodeConfig": {"instanceTypeIds": types or ["ecs.hpcpni3ln.45xlarge"]},
            "kubernetesConfig": {"labels": DRA_LABELS if labels is None else labels, "cordon": False},
            "autoScaling": {"enabled": True, "minReplicas": 1.0, "maxReplicas": high},
        },
    )


def claim_template(*requests: dict[str, Any], name: str = "t"):
    props = template(*requests, name=name)
    return res(pt.RESOURCE_CLAIM_TEMPLATE, name, props)


def deployment(replicas: Any = 1.0, claim: str = "t", name: str = "app"):
    return res(
        pt.DEPLOYMENT,
        name,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "replicas": replicas,
                "template": {
                    "spec": {
                        "containers": [{"name": "c", "image": Unknown()}],
                        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": claim}],
                    }
                },
            },
        },
    )


def test_fitting_stack_has_no_violation():
    assert check_stack([node_pool(), claim_template(exactly("gpu", 2)), deployment(8.0)]) == []


def test_replicas_beyond_the_pool_maximum_are_a_violation_on_the_workload():
    violations = check_stack([node_pool(high=2.0), claim_template(exactly("gpu", 4)), deployment(5.0)])
    assert len(violations) == 1
    assert violations[0].urn.endswith("::app")
    assert violations[0].message == (
        "Deployment default/app (5 replica(s)) does not fit the GPU node pools: gpu (ecs.hpcpni3ln.45xlarge: "
        "8x NVIDIA H20): 5 replicas wanted, 2 fit per node, 4 on the pool's maximum of 2 nodes"
    )


def test_selector_no_device_matches_is_explained():
    tpl = claim_template(exactly("gpu", 1, f"{MEM}.compareTo(quantity('141Gi')) >= 0"))
    [violation] = check_stack([node_pool(), tpl, deployment()])
    assert "request gpu: no device matches selector" in violation.message
    assert violation.message.endswith("memory 141Gi > 95.58Gi")


def test_workloads_together_exhaust_the_pool():
    resources = [
        node_pool(high=1.0),
        claim_template(exactly("gpu", 4)),
        deployment(2.0, name="first"),
        deployment(1.0, name="second"),
    ]
    [violation] = check_stack(resources)
    assert violation.message.startswith(
        "Deployment default/second: fits alone, but beside the workloads before "
        "it only 0 of 1 replica(s) find devices"
    )


def test_stacks_without_a_dra_pool_or_with_unknowns_are_not_decided():
    tpl, app = claim_template(exactly("gpu", 64)), deployment()
    assert check_stack([tpl, app]) == []  # e.g. target=existing-cluster
    assert check_stack([node_pool(labels=[]), tpl, app]) == []  # the labels policy reports that
    assert check_stack([node_pool(types=[Unknown()]), tpl, app]) == []  # preview
    assert check_stack([node_pool(), tpl, deployment(Unknown())]) == []


def test_references_are_left_to_the_claim_references_policy_unless_asked():
    resources = [
        node_pool(),
        claim_template(exactly("gpu", 1, cls="nope.example.com")),
        deployment(),
        deployment(claim="missing", name="other"),
    ]
    assert check_stack(resources) == []
    messages = [v.message for v in check_stack(resources, report_references=True)]
    assert any("could not retrieve device class nope.example.com" in m for m in messages)
    assert any(
        "ResourceClaimTemplate default/missing (pod claim gpu) is not part of the stack" in m
        for m in messages
    )


def test_gpu_family_type_missing_from_the_catalog_and_config_rows():
    tpl, app = claim_template(exactly("gpu", 1)), deployment()
    [violation] = check_stack([node_pool(types=["ecs.gni2.8xlarge"]), tpl, app])
    assert violation.message.startswith(
        "node pool gpu: capacity cannot be checked: instance type 'ecs.gni2.8xlarge'"
    )
    rows = json.dumps({"ecs.gni2.8xlarge": {"product": "NVIDIA A10", "gpus": 2, "source": "console"}})
    assert check_stack([node_pool(types=["ecs.gni2.8xlarge"]), tpl, app], rows) == []
    assert check_stack([node_pool(types=["ecs.g3i.2xlarge"]), tpl, app]) == []  # not a GPU family: not ours


def test_bad_manifest_is_one_clear_violation():
    bad = res(
        pt.RESOURCE_CLAIM_TEMPLATE,
        "bad",
        {
            "metadata": {"name": "bad"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {
                                    "deviceClassName": facts.DEVICE_CLASS_GPU.name,
                                    "allocationMode": "Some",
                                },
                            }
                        ]
                    }
                }
            },
        },
    )
    [violation] = check_stack([node_pool(), bad])
    assert violation.message == (
        "ResourceClaimTemplate bad: field spec.spec.devices.requests[0].exactly."
        "allocationMode is 'Some'; allowed: ExactCount, All"
    )


def resource_claim(*requests: dict[str, Any], name: str = "shared"):
    props = template(*requests, name=name)
    props["kind"] = "ResourceClaim"
    props["spec"] = props["spec"]["spec"]
    return res(pt.RESOURCE_CLAIM, name, props)


def sharing(replicas: float, name: str, *extra: dict[str, str]):
    app = deployment(replicas, name=name)
    claims = app.props["spec"]["template"]["spec"]["resourceClaims"]
    claims[:] = [{"name": "shared", "resourceClaimName": "shared"}, *extra]
    return app


def test_a_shared_resource_claim_is_allocated_once_and_pins_its_pods():
    shared = resource_claim(exactly("gpu", 1))
    # every pod shares the one GPU: replicas are not limited by devices, and two workloads may share it
    assert check_stack([node_pool(high=3.0), shared, sharing(20.0, "a"), sharing(5.0, "b")]) == []
    # with a per-pod claim of 4 GPUs too, the pods must all fit beside the shared GPU on its node
    per_pod = {"name": "own", "resourceClaimTemplateName": "t"}
    [violation] = check_stack(
        [node_pool(high=3.0), shared, claim_template(exactly("gpu", 4)), sharing(2.0, "c", per_pod)]
    )
    assert violation.message.startswith("Deployment default/c (2 replica(s)) does not fit")
    assert "2 replicas wanted, 1 fit per node, 1 on the pool's maximum of 3 nodes" in violation.message


def tainted_pool(*taints: dict[str, str]):
    pool = node_pool()
    pool.props["kubernetesConfig"]["taints"] = list(taints)
    return pool


def placed(**pod_fields: Any):
    app = deployment()
    app.props["spec"]["template"]["spec"].update(pod_fields)
    return app


def test_pods_must_tolerate_the_pool_taints_and_match_its_labels():
    tpl = claim_template(exactly("gpu", 1))
    taint = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    [violation] = check_stack([tainted_pool(taint), tpl, placed()])
    assert violation.message.endswith(
        "the pods do not tolerate the pool's taint nvidia.com/gpu=true:NoSchedule"
    )
    tolerate = [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
    assert check_stack([tainted_pool(taint), tpl, placed(tolerations=tolerate)]) == []
    assert check_stack([tainted_pool(taint), tpl, placed(tolerations=[{"operator": "Exists"}])]) == []
    soft = {"key": "x", "value": "", "effect": "PreferNoSchedule"}
    assert check_stack([tainted_pool(soft), tpl, placed()]) == []
    [wrong] = check_stack([node_pool(), tpl, placed(nodeSelector={facts.LABEL_GPU_SCHEDULE: "nvidia"})])
    assert f"nodeSelector {facts.LABEL_GPU_SCHEDULE}=nvidia does not match the pool's label" in wrong.message
    dra = {"key": facts.LABEL_GPU_SCHEDULE, "operator": "In", "values": [facts.LABEL_GPU_SCHEDULE_DRA]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [dra]}]
            }
        }
    }
    assert check_stack([node_pool(), tpl, placed(affinity=affinity)]) == []
    other_type = {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["ecs.gni2.3xlarge"]}
    affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] = [
        {"matchExpressions": [other_type]}
    ]
    [mismatch] = check_stack([node_pool(), tpl, placed(affinity=affinity)])
    assert mismatch.message.endswith("required node affinity matches none of the pool's labels")
    # a label the pool does not set (VKE sets it on the node) is assumed to match
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["cn-beijing-a"]}
    affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] = [
        {"matchExpressions": [zone]}
    ]
    assert check_stack([node_pool(), tpl, placed(affinity=affinity)]) == []


def test_the_node_pool_runtime_owns_the_pool_bounds():
    pool = node_pool(high=1.0)
    runtime = res(pt.NODE_POOL_RUNTIME, "rt", {"min_replicas": 1.0, "max_replicas": 3.0})
    runtime.dependencies = [pool.urn]
    tpl, app = claim_template(exactly("gpu", 8)), deployment(3.0)
    assert len(check_stack([pool, tpl, app])) == 1  # the pool was created with at most 1 node
    assert check_stack([pool, runtime, tpl, app]) == []  # the runtime raises it to 3
    runtime.props["max_replicas"] = Unknown()
    assert check_stack([pool, runtime, tpl, app]) == []  # undecided in preview


def test_a_daemonset_beside_other_workloads_only_counts_the_pools_it_may_use():
    def labelled_pool(name: str, role: str):
        pool = node_pool(labels=[*DRA_LABELS, {"key": "role", "value": role}])
        pool.name = pool.props["name"] = name
        pool.urn = f"urn:pulumi:dev::p::{POOL}::{name}"
        return pool

    daemons = deployment(name="per-node")
    daemons.resource_type = pt.DAEMON_SET
    daemons.props["kind"] = "DaemonSet"
    del daemons.props["spec"]["replicas"]
    daemons.props["spec"]["template"]["spec"]["nodeSelector"] = {"role": "a"}
    resources = [
        labelled_pool("pool-a", "a"),
        labelled_pool("pool-b", "b"),
        claim_template(exactly("gpu", 1)),
        daemons,
        deployment(1.0, name="app"),
    ]
    assert check_stack(resources) == []
