"""`vke-gpu-dra plan` (the CLI process) gives the verdict the real kube-scheduler and kube-apiserver give on
the same nodes, devices and workloads: the scenarios of docs/capacity-planning.md, and whether the API
server admits a claim with a distinctAttribute constraint (the field DRAConsumableCapacity gates).
On both releases also the DRA features 1.37 has on and 1.34 has off (alpha): pods asking an extended resource
that a DeviceClass maps (DRAExtendedResource), and two claims sharing one GPU's memory
(DRAConsumableCapacity, the device published with allowMultipleAllocations as the driver gate
ConsumableShares publishes it), and MIG placements published as partitionable devices (KEP-4815, the driver
gate DynamicMIG): which still fit after others are taken, with the counters kept (1.37); where the server
drops them (1.34) the plugin publishes its GPUs whole.

The nodes are the stack's pool at its maximum size (2 x ecs.gni3cl.44xlarge: 4 x NVIDIA L20, 176 vCPUs,
960 GiB), each with the kubelet plugin publishing the simulated GPUs of that product.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from vke_gpu_dra_core import dra_gates, facts
from vke_gpu_dra_core.mig_partitions import product_partitions
from vke_gpu_dra_planner.inventory import SHARE_STEP, GpuPool, slice_device

from .cluster import TEST_LABEL, Cluster
from .controlplane import ADMIN_TOKEN, ApiError, wait_until

#: The releases with the DRA features VKE's 1.34 lacks on by default (1.38: the same allocator cases
#: as 1.37, DRAFractionalCapacityRange on).
NEWER = ("1.37", "1.38")


VKE_GPU_DRA = Path(sys.executable).with_name("vke-gpu-dra")
INSTANCE_TYPE = "ecs.gni3cl.44xlarge"
PRODUCT, GPUS, NODES, VCPUS, MEMORY_GIB = "NVIDIA L20", 4, 2, 176, 960
CATALOG = {INSTANCE_TYPE: {"product": PRODUCT, "gpus": GPUS, "source": "test", "vcpus": VCPUS,
                           "memoryGiB": MEMORY_GIB}}  # fmt: skip


def template(name: str, count: int, *, distinct: bool = False) -> dict[str, Any]:
    devices: dict[str, Any] = {
        "requests": [
            {"name": "gpu", "exactly": {"deviceClassName": facts.DEVICE_CLASS_GPU.name, "count": count}}
        ]
    }
    if distinct:
        devices["constraints"] = [{"distinctAttribute": f"{facts.DRIVER_NAME}/{facts.ATTR_UUID}"}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": devices}},
    }


def deployment(name: str, replicas: int, claim: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {TEST_LABEL: namespace},
                    "containers": [
                        {"name": "ctr", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
                    ],
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": claim}],
                },
            },
        },
    }


#: name: (templates, deployments in creation order as (name, replicas, template)).
SCENARIOS: dict[str, tuple[list[tuple[str, int]], list[tuple[str, int, str]]]] = {
    # Spreading puts the one-GPU pods 2 + 2: no node keeps 4 GPUs free for the whole-node pod.
    "spread-leaves-a-whole-node-pod-pending": (
        [("one", 1), ("four", 4)], [("small", 4, "one"), ("whole", 1, "four")]
    ),
    # Spreading puts the one-GPU pods 1 + 1: both three-GPU pods find a node.
    "spread-leaves-room-for-larger-pods": (
        [("one", 1), ("three", 3)], [("small", 2, "one"), ("large", 2, "three")]
    ),
}  # fmt: skip


def write_stack(folder: Path, extra: dict[str, Any] | None = None) -> Path:
    """A stack whose GPU pool is NODES nodes of INSTANCE_TYPE (and the project file beside it)."""
    (folder / "Pulumi.yaml").write_text("name: vke-gpu-dra\nruntime: python\n")
    stack = folder / "Pulumi.envtest.yaml"
    config = {
        "vke-gpu-dra:nodePool.instanceTypes": [INSTANCE_TYPE],
        "vke-gpu-dra:nodePool.minReplicas": NODES,
        "vke-gpu-dra:nodePool.desiredReplicas": NODES,
        "vke-gpu-dra:nodePool.maxReplicas": NODES,
        "vke-gpu-dra:gpuInstanceTypes": json.dumps(CATALOG),
        **(extra or {}),
    }
    stack.write_text(yaml.safe_dump({"config": config}))
    return stack


def turned(cluster: Cluster) -> str:
    """The gates the cluster's control plane turns away from its release's defaults, as `plan
    --kubernetes-feature-gates` takes them (`DRAConsumableCapacity=true` on the tier's gated 1.34)."""
    plane = cluster.plane
    return ",".join(
        f"{gate}={str(on).lower()}"
        for gate, on in sorted((plane.feature_gates or {}).items())
        if on != dra_gates.on_by_default(gate, plane.release)
    )


def plan(
    cluster: Cluster, objects: list[dict[str, Any]], version: str, config: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The planner's report (JSON) for `objects` in this test's namespace."""
    stack = write_stack(cluster.tmp, config)
    manifests = cluster.tmp / "workloads.yaml"
    manifests.write_text(
        yaml.safe_dump_all(
            [
                o
                if o["kind"] == "DeviceClass"
                else {**o, "metadata": {**o["metadata"], "namespace": cluster.namespace}}
                for o in objects
            ]
        )
    )
    gates = turned(cluster) if version == cluster.plane.version else ""
    result = subprocess.run(
        [str(VKE_GPU_DRA), "plan", "--stack-config", str(stack), "--manifests", str(manifests),
         "--kubernetes-version", version, "-o", "json",
         *(["--kubernetes-feature-gates", gates] if gates else [])],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def gpu_pool(cluster: Cluster) -> list[str]:
    """The pool's nodes, each with the plugin publishing its GPUs (admin credentials: the chart's own
    token and policy are tested elsewhere); the DeviceClasses from the chart."""
    cluster.install_chart()
    names = []
    for i in range(NODES):
        node = cluster.add_node(f"n{i}", cpu=str(VCPUS), memory=f"{MEMORY_GIB}Gi")
        names.append(node["metadata"]["name"])
        cluster.start_plugin(names[-1], ADMIN_TOKEN, gpus=GPUS, product=PRODUCT)
    assert wait_until(lambda: all(cluster.slices_of(n) for n in names), timeout=60), "no slices published"
    return names


def settled(cluster: Cluster, name: str, replicas: int) -> list[dict[str, Any]] | None:
    """The Deployment's pods once each is bound to a node or found unschedulable; else None."""
    pods = cluster.pods(f"app={name}")
    if len(pods) != replicas:
        return None
    for pod in pods:
        unschedulable = any(
            c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
            for c in pod.get("status", {}).get("conditions") or []
        )
        if not pod["spec"].get("nodeName") and not unschedulable:
            return None
    return pods


def schedule(
    cluster: Cluster,
    deployments: list[tuple[str, int, str]],
    objects: dict[str, dict[str, Any]] | None = None,
) -> dict[str, tuple[str, int]]:
    """Create the Deployments one after the other (as the planner orders them); (status, placed) of each.
    `objects`: a Deployment to create instead of the one `deployment()` makes, by name."""
    verdict = {}
    for name, replicas, claim in deployments:
        cluster.apply((objects or {}).get(name) or deployment(name, replicas, claim, cluster.namespace))
        pods = wait_until(functools.partial(settled, cluster, name, replicas), timeout=90)
        assert pods, (
            f"Deployment {name}: pods neither scheduled nor unschedulable: {cluster.pods(f'app={name}')}"
        )
        placed = sum(bool(p["spec"].get("nodeName")) for p in pods)
        verdict[name] = ("fits" if placed == replicas else "pending", placed)
    return verdict


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_planner_verdict_is_the_schedulers(cluster: Cluster, scenario: str) -> None:
    templates, deployments = SCENARIOS[scenario]
    claims = [template(name, count) for name, count in templates]
    report = plan(
        cluster, [*claims, *(deployment(*d, cluster.namespace) for d in deployments)], cluster.plane.version
    )
    planned = {w["name"]: (w["status"], w["placed"]) for w in report["workloads"]}

    gpu_pool(cluster)
    for claim in claims:
        cluster.apply(claim)
    assert schedule(cluster, deployments) == planned


def test_planner_admission_is_the_api_servers(each_cluster: Cluster) -> None:
    """A claim template with a distinctAttribute constraint: the planner admits or refuses it as the API
    server of that release does, and where admitted the real scheduler allocates what the planner places.

    1.37 (DRAConsumableCapacity beta, on) keeps the field and allocates. 1.34.4 (the gate alpha, off) keeps
    it too: its strategy means to drop it, but clears a copy (`for _, constaint := range ...Constraints`),
    and its scheduler's allocator (the one DRAResourceClaimDeviceStatus, beta and on in 1.34, selects)
    requires each device to have the attribute but compares values by pointer, so it never finds two equal
    (planner/src/vke_gpu_dra_planner/gates.py). A server that does drop the field refuses the empty
    constraint with 422."""
    cluster = each_cluster
    version = cluster.plane.version
    claim = template("distinct", 2, distinct=True)
    report = plan(cluster, [claim, deployment("app", 1, "distinct", cluster.namespace)], version)
    [planned] = report["templates"]
    [workload] = report["workloads"]

    try:
        cluster.apply(claim)
    except ApiError as exc:
        assert (planned["admission"], workload["status"]) == ("refused", "refused")
        assert exc.status == 422
        assert planned["admissionMessage"].split(" (")[0] in exc.message
        return
    assert (planned["admission"], workload["status"]) == ("admitted", "fits")
    stored = cluster.api.get(
        f"/apis/resource.k8s.io/v1/namespaces/{cluster.namespace}/resourceclaimtemplates/distinct"
    )
    assert stored["spec"]["spec"]["devices"]["constraints"] == claim["spec"]["spec"]["devices"]["constraints"]
    gpu_pool(cluster)
    assert schedule(cluster, [("app", 1, "distinct")]) == {"app": ("fits", workload["placed"])}


# ------------------------------------------------- DRA features on in 1.37, alpha and off in 1.34


def extended_deployment(
    name: str, replicas: int, resource: str, count: int, namespace: str
) -> dict[str, Any]:
    """A Deployment written the classic way: `resource: count` in the container's limits, no claim."""
    manifest = deployment(name, replicas, "unused", namespace)
    pod = manifest["spec"]["template"]["spec"]
    del pod["resourceClaims"]
    pod["containers"][0]["resources"] = {"limits": {resource: str(count)}}
    return manifest


def test_extended_resource_pods_are_planned_as_the_scheduler_places_them(each_cluster: Cluster) -> None:
    """Pods asking 3 of an extended resource that a DeviceClass maps to the driver's GPUs: on 1.37 the
    scheduler makes their claims (2 of 3 pods find 3 free GPUs on the 2 x 4-GPU nodes), on 1.34 the field
    is dropped and no node advertises the resource (all Pending); the planner says the same."""
    cluster = each_cluster
    version = cluster.plane.version
    resource = "example.com/gpu"
    gpu_class: dict[str, Any] = facts.DEVICE_CLASS_GPU.manifest()
    mapped = {
        **gpu_class,
        "metadata": {"name": f"er-{cluster.namespace}"},
        "spec": {**gpu_class["spec"], "extendedResourceName": resource},
    }
    classic = extended_deployment("classic", 3, resource, 3, cluster.namespace)
    report = plan(cluster, [mapped, classic], version)
    planned = {w["name"]: (w["status"], w["placed"]) for w in report["workloads"]}
    assert planned == ({"classic": ("pending", 2)} if version in NEWER else {"classic": ("pending", 0)})

    stored = cluster.apply(mapped)
    assert stored["spec"].get("extendedResourceName") == (resource if version in NEWER else None)
    gpu_pool(cluster)
    assert schedule(cluster, [("classic", 3, "")], {"classic": classic}) == planned
    if version not in NEWER:
        assert f"Insufficient {resource}" in cluster.why_pending(
            cluster.namespace, cluster.pods("app=classic")[0]["metadata"]["name"]
        )


def test_two_claims_share_one_gpu_as_planned(each_cluster: Cluster) -> None:
    """One node, one GPU published with allowMultipleAllocations and NVIDIA's memory request policy (the
    driver gate ConsumableShares; published here by the test, the plugin's own publishing is in
    test_consumable_shares.py); two pods whose claims each ask half its memory. 1.37: both on the one GPU.
    1.34: the API server drops the request's capacity and the device's sharing, each claim takes the whole
    GPU, one pod stays Pending. The planner, with driver.featureGates ConsumableShares=true, says the same."""
    cluster = each_cluster
    version = cluster.plane.version
    config = {
        "vke-gpu-dra:nodePool.minReplicas": 1,
        "vke-gpu-dra:nodePool.desiredReplicas": 1,
        "vke-gpu-dra:nodePool.maxReplicas": 1,
        "vke-gpu-dra:driver.deviceSource": "simulated",
        "vke-gpu-dra:driver.simulatedGpus": 1,
        "vke-gpu-dra:driver.simulatedProduct": PRODUCT,
        "vke-gpu-dra:driver.featureGates": "ConsumableShares=true",
    }
    node_name = cluster.add_node("share", cpu=str(VCPUS), memory=f"{MEMORY_GIB}Gi")["metadata"]["name"]
    simulated = GpuPool("pool", INSTANCE_TYPE, PRODUCT, 1, 1, 1, consumable_shares=True).node(0)
    device = slice_device(simulated.devices[0], simulated.sharing_of(0))
    sharing = simulated.sharing_of(0)
    assert sharing is not None
    half = f"{sharing.capacity[facts.CAPACITY_MEMORY] // 2 // SHARE_STEP}Mi"
    claim = template("half", 1)
    claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {
        "requests": {facts.CAPACITY_MEMORY: half}
    }
    report = plan(cluster, [claim, deployment("pair", 2, "half", cluster.namespace)], version, config)
    planned = {w["name"]: (w["status"], w["placed"]) for w in report["workloads"]}
    assert planned == ({"pair": ("fits", 2)} if version in NEWER else {"pair": ("pending", 1)})

    cluster.apply(facts.DEVICE_CLASS_GPU.manifest(), shared=True)
    published = cluster.apply({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-shares"},
        "spec": {"driver": facts.DRIVER_NAME, "nodeName": node_name, "devices": [device],
                 "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1}},
    })  # fmt: skip
    stored = cluster.apply(claim)
    [kept] = published["spec"]["devices"]
    if version in NEWER:
        assert kept.get("allowMultipleAllocations") is True
        assert "requestPolicy" in kept["capacity"][facts.CAPACITY_MEMORY]
        assert stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]
    else:
        assert "allowMultipleAllocations" not in kept
        assert "requestPolicy" not in kept["capacity"][facts.CAPACITY_MEMORY]
        assert "capacity" not in stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert schedule(cluster, [("pair", 2, "half")]) == planned


# --------------------------------------------------------------------- MIG partitions (KEP-4815, DynamicMIG)

MIG_PRODUCT = "NVIDIA A100-SXM4-80GB"
#: name: Deployments in creation order as (name, replicas, MIG profile; None: the whole GPU).
MIG_SCENARIOS: dict[str, list[tuple[str, int, str | None]]] = {
    # seven 1g.10gb placements per GPU: the eighth claim stays Pending
    "seven-1g-fit-an-eighth-does-not": [("small", 8, "1g.10gb")],
    # the 3g takes the first placement (memory slices 0-3), where the only 4g placement lies
    "3g-then-4g": [("three", 1, "3g.40gb"), ("four", 1, "4g.40gb")],
    # the 4g takes slices 0-3, the 3g the placement at 4
    "4g-then-3g": [("four", 1, "4g.40gb"), ("three", 1, "3g.40gb")],
    # the whole GPU consumes every counter: no partition fits beside it, nor it beside one
    "whole-gpu-then-1g": [("whole", 1, None), ("small", 1, "1g.10gb")],
    "1g-then-whole-gpu": [("small", 1, "1g.10gb"), ("whole", 1, None)],
}


#: what the 1.37 scheduler (counters kept) does with each scenario: name -> (status, placed)
MIG_ON_137: dict[str, dict[str, tuple[str, int]]] = {
    "seven-1g-fit-an-eighth-does-not": {"small": ("pending", 7)},
    "3g-then-4g": {"three": ("fits", 1), "four": ("pending", 0)},
    "4g-then-3g": {"four": ("fits", 1), "three": ("fits", 1)},
    "whole-gpu-then-1g": {"whole": ("fits", 1), "small": ("pending", 0)},
    "1g-then-whole-gpu": {"small": ("fits", 1), "whole": ("pending", 0)},
}


def mig_template(name: str, profile: str | None) -> dict[str, Any]:
    """A claim for one MIG device of `profile` (mig.nvidia.com), or for the whole GPU (gpu.nvidia.com)."""
    claim = template(name, 1)
    if profile is not None:
        request = claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        request["deviceClassName"] = facts.DEVICE_CLASS_MIG.name
        expression = f"device.attributes['{facts.DRIVER_NAME}'].{facts.ATTR_PROFILE} == '{profile}'"
        request["selectors"] = [{"cel": {"expression": expression}}]
    return claim


def mig_slices(node_name: str, counters_kept: bool = True) -> list[dict[str, Any]]:
    """The node's one A100 as DynamicMIG publishes it from 1.35 on: the counter set in a slice of its own,
    the whole GPU and every placement in another, each consuming counters. Counters and consumption come
    from core's mig_partitions; the devices' attributes from the planner's pool (as the plugin's). On a
    server that drops shared counters (not `counters_kept`) the plugin publishes the GPU whole, as without
    DynamicMIG (test_dynamic_mig.py runs the plugin there), and so does this."""
    partitions = product_partitions(MIG_PRODUCT, 0)
    devices = GpuPool("pool", INSTANCE_TYPE, MIG_PRODUCT, 1, 1, 1, dynamic_mig=True).node(0).devices
    assert [d.name for d in devices] == [p.name for p in partitions.devices]
    if not counters_kept:
        pool = {"name": node_name, "generation": 1, "resourceSliceCount": 1}
        whole = {"driver": facts.DRIVER_NAME, "nodeName": node_name, "pool": pool,
                 "devices": [devices[0].slice_entry()]}  # fmt: skip
        spec = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice"}
        return [{**spec, "metadata": {"name": f"{node_name}-devices"}, "spec": whole}]
    pool = {"name": node_name, "generation": 1, "resourceSliceCount": 2}
    counters = {
        "driver": facts.DRIVER_NAME,
        "nodeName": node_name,
        "pool": pool,
        "sharedCounters": [partitions.counter_set.to_api()],
    }
    published = [
        {**device.slice_entry(), "consumesCounters": partition.consumes_counters()}
        for device, partition in zip(devices, partitions.devices, strict=True)
    ]
    return [
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
         "metadata": {"name": f"{node_name}-{suffix}"}, "spec": spec}
        for suffix, spec in (
            ("counters", counters),
            ("devices", {"driver": facts.DRIVER_NAME, "nodeName": node_name, "pool": pool,
                         "devices": published}),
        )
    ]  # fmt: skip


@pytest.mark.parametrize("scenario", MIG_SCENARIOS)
def test_mig_placements_are_planned_as_the_scheduler_allocates_them(
    each_cluster: Cluster, scenario: str
) -> None:
    """One node with one A100 80GB published as MIG partitions (the driver gate DynamicMIG; published here
    by the test). 1.37 (DRAPartitionableDevices on): the scheduler allocates a placement only while the
    counters it consumes are left, and the planner says which claims fit and which stay Pending. On the
    1.34 (gate alpha, off) the API server would drop the counters, so the plugin publishes the GPU whole
    (as without DynamicMIG): no MIG claim is allocated, the whole-GPU claim is, and the planner says that
    too."""
    cluster = each_cluster
    version = cluster.plane.version
    deployments = MIG_SCENARIOS[scenario]
    claims = {name: mig_template(name, profile) for name, _, profile in deployments}
    config = {
        "vke-gpu-dra:nodePool.minReplicas": 1,
        "vke-gpu-dra:nodePool.desiredReplicas": 1,
        "vke-gpu-dra:nodePool.maxReplicas": 1,
        "vke-gpu-dra:driver.deviceSource": "simulated",
        "vke-gpu-dra:driver.simulatedGpus": 1,
        "vke-gpu-dra:driver.simulatedProduct": MIG_PRODUCT,
        "vke-gpu-dra:driver.featureGates": "DynamicMIG=true",
    }
    objects = [*claims.values(), *(deployment(n, r, n, cluster.namespace) for n, r, _ in deployments)]
    report = plan(cluster, objects, version, config)
    planned = {w["name"]: (w["status"], w["placed"]) for w in report["workloads"]}
    kept = version in NEWER
    if kept:
        assert planned == MIG_ON_137[scenario]
    else:  # the GPU published whole: no MIG placement, the whole GPU for the claim that asks it
        assert planned == {n: ("fits", r) if p is None else ("pending", 0) for n, r, p in deployments}

    node_name = cluster.add_node("mig", cpu=str(VCPUS), memory=f"{MEMORY_GIB}Gi")["metadata"]["name"]
    for device_class in (facts.DEVICE_CLASS_GPU, facts.DEVICE_CLASS_MIG):
        cluster.apply(device_class.manifest(), shared=True)
    stored = [cluster.apply(s) for s in mig_slices(node_name, kept)]
    if kept:
        assert stored[0]["spec"].get("sharedCounters")
        assert all(d.get("consumesCounters") for d in stored[1]["spec"]["devices"])
    for claim in claims.values():
        cluster.apply(claim)
    assert schedule(cluster, [(n, r, n) for n, r, _ in deployments]) == planned
