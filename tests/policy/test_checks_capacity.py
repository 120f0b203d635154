from __future__ import annotations

from typing import Any

import pytest
from vke_dra_policies import context
from vke_dra_policies.checks import capacity
from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt

from .stacks import SimRes, Stack, program_stack

DEPLOYMENT = pt.DEPLOYMENT
POOL = pt.NODE_POOL


@pytest.fixture(scope="module")
def dev() -> Any:  # a Stack of SimRes, which the checks read as Res
    return program_stack("dev", "python")


def test_the_program_sample_fits_its_pool(dev: Any) -> None:
    assert capacity.claims_fit(dev, {}) == []


def test_replicas_beyond_the_pool_are_reported_on_the_workload(dev: Any) -> None:
    def more(s: Stack) -> None:
        s.one(DEPLOYMENT).props["spec"]["replicas"] = 2

    (violation,) = capacity.claims_fit(dev.mutated(more), {})
    assert violation.urn == dev.one(DEPLOYMENT).urn
    assert "2 replicas wanted, 1 fit per node, 1 on the pool's maximum of 1 nodes" in violation.message


def test_catalog_rows_come_from_the_stack_config(dev: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def bigger(s: Stack) -> None:
        s.one(POOL).props["nodeConfig"]["instanceTypeIds"] = ["ecs.gni2.8xlarge"]

    stack = dev.mutated(bigger)
    (violation,) = capacity.claims_fit(stack, {})
    assert "add it with the config key vke-gpu-dra:gpuInstanceTypes" in violation.message
    rows = '{"ecs.gni2.8xlarge": {"product": "NVIDIA A10", "gpus": 2, "source": "console"}}'
    monkeypatch.setattr(context.STACK, "config", {"vke-gpu-dra:gpuInstanceTypes": rows})
    monkeypatch.setattr(context.STACK, "project", "vke-gpu-dra")
    assert capacity.claims_fit(stack, {}) == []


TEMPLATE = pt.RESOURCE_CLAIM_TEMPLATE
CLUSTER = pt.CLUSTER


# Untyped like its siblings: a Stack holds SimRes, which claims_fit reads like the analyzer's resources.
def test_the_cluster_version_selects_the_admission_rules(dev):
    """distinctAttribute is refused by a 1.35 API server (DRAConsumableCapacity off) and accepted from
    1.36 (beta, on); a 1.34 API server (the program's v1.34.2-vke.3) keeps it although the gate is off:
    the program's cluster resource says which."""

    def distinct(s: Stack) -> None:
        devices = s.one(TEMPLATE).props["spec"]["spec"]["devices"]
        devices["constraints"] = [{"distinctAttribute": f"{facts.DRIVER_NAME}/{facts.ATTR_UUID}"}]

    def version(value: str):
        def set_version(s: Stack) -> None:
            s.one(CLUSTER).props["kubernetesVersion"] = value

        return set_version

    stack = dev.mutated(distinct)
    assert capacity.claims_fit(stack, {}) == []
    (violation,) = capacity.claims_fit(stack.mutated(version("v1.35.2-vke.1")), {})
    assert "spec.spec.devices.constraints[0].matchAttribute: Required value" in violation.message
    assert "DRAConsumableCapacity is off by default in 1.35" in violation.message
    for newer in ("v1.36.0-vke.1", "v1.37.2"):
        assert capacity.claims_fit(stack.mutated(version(newer)), {}) == []


def test_the_driver_gate_consumable_shares_lets_claims_share_a_gpu_on_136(dev, monkeypatch):
    """Two pods whose claims each ask half of the GPU's memory: one GPU holds both when the driver shares
    GPUs (driver.featureGates ConsumableShares=true) on 1.36; without the gate, or on 1.34 (the API
    server drops the fields), each takes a whole GPU and the pool's one GPU holds one."""

    def halves(s: Stack) -> None:
        s.one(DEPLOYMENT).props["spec"]["replicas"] = 2
        request = s.one(TEMPLATE).props["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        request["capacity"] = {"requests": {facts.CAPACITY_MEMORY: "1Gi"}}
        s.one(CLUSTER).props["kubernetesVersion"] = "1.36"

    def on_134(s: Stack) -> None:
        s.one(CLUSTER).props["kubernetesVersion"] = "1.34"

    stack = dev.mutated(halves)
    monkeypatch.setattr(context.STACK, "project", "vke-gpu-dra")
    (violation,) = capacity.claims_fit(stack, {})
    assert "2 replicas wanted, 1 fit per node" in violation.message
    monkeypatch.setattr(context.STACK, "config", {"vke-gpu-dra:driver.featureGates": "ConsumableShares=true"})
    assert capacity.claims_fit(stack, {}) == []
    (violation,) = capacity.claims_fit(stack.mutated(on_134), {})
    assert "2 replicas wanted, 1 fit per node" in violation.message


def test_the_driver_gate_dynamic_mig_counts_mig_placements(dev, monkeypatch):
    """The pool's one A100 80GB published as MIG partitions (driver.featureGates DynamicMIG=true) on 1.36:
    seven claims for a 1g.10gb fit, an eighth does not; without the gate there is no MIG device."""

    def mig(replicas: int):
        def change(s: Stack) -> None:
            s.one(DEPLOYMENT).props["spec"]["replicas"] = replicas
            s.one(POOL).props["nodeConfig"]["instanceTypeIds"] = ["ecs.test.mig"]
            request = s.one(TEMPLATE).props["spec"]["spec"]["devices"]["requests"][0]["exactly"]
            request["deviceClassName"] = facts.DEVICE_CLASS_MIG.name
            request["selectors"] = [
                {"cel": {"expression": f"device.attributes['{facts.DRIVER_NAME}'].profile == '1g.10gb'"}}
            ]
            s.one(CLUSTER).props["kubernetesVersion"] = "1.36"

        return change

    rows = '{"ecs.test.mig": {"product": "NVIDIA A100-SXM4-80GB", "gpus": 1, "source": "test"}}'
    config = {"vke-gpu-dra:gpuInstanceTypes": rows}
    monkeypatch.setattr(context.STACK, "project", "vke-gpu-dra")
    monkeypatch.setattr(context.STACK, "config", config)
    (violation,) = capacity.claims_fit(dev.mutated(mig(7)), {})
    assert "mig.nvidia.com" in violation.message
    monkeypatch.setattr(
        context.STACK, "config", {**config, "vke-gpu-dra:driver.featureGates": "DynamicMIG=true"}
    )
    assert capacity.claims_fit(dev.mutated(mig(7)), {}) == []
    (violation,) = capacity.claims_fit(dev.mutated(mig(8)), {})
    assert "8 replicas wanted, 7 fit per node" in violation.message


def test_pods_asking_nvidia_gpu_count_against_the_pool_on_136_only(dev):
    """A Deployment written the classic way (`nvidia.com/gpu: 1`, no claim) beside the sample: on 1.36
    the scheduler makes its claim through the gpu.nvidia.com DeviceClass (extendedResourceName), on 1.34
    it stays Pending."""

    def classic(s: Stack) -> None:
        pod = s.one(DEPLOYMENT).props["spec"]["template"]["spec"]
        del pod["resourceClaims"]
        for container in pod["containers"]:
            container.pop("resources", None)
        pod["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
        s.one(CLUSTER).props["kubernetesVersion"] = "1.36"

    def mapped(s: Stack) -> None:
        manifest: dict[str, Any] = facts.DEVICE_CLASS_GPU.manifest()
        props = {**manifest, "spec": {**manifest["spec"], "extendedResourceName": "nvidia.com/gpu"}}
        s.append(SimRes(pt.DEVICE_CLASS, "gpu-class", props, urn="urn:pulumi:dev::vke-gpu-dra::gpu-class"))

    def on_134(s: Stack) -> None:
        s.one(CLUSTER).props["kubernetesVersion"] = "1.34"

    stack = dev.mutated(classic)
    (violation,) = capacity.claims_fit(stack, {})
    assert "which no DeviceClass maps" in violation.message
    stack = stack.mutated(mapped)
    assert capacity.claims_fit(stack, {}) == []
    (violation,) = capacity.claims_fit(stack.mutated(on_134), {})
    assert violation.urn == dev.one(DEPLOYMENT).urn
    assert "DRAExtendedResource is off by default in 1.34" in violation.message


def test_classic_sample_forced_on_a_one_gpu_pool_is_reported_with_what_to_do() -> None:
    """sample.classicDeployment=on deploys gpu-test-classic beside gpu-test on the dev stack's one A10:
    the capacity check names the classic sample and the ways out."""
    stack: Any = program_stack(  # a Stack of SimRes, which the checks read as Res
        "dev",
        "python",
        {
            "cluster.kubernetesVersion": "1.37",
            "cluster.forceKubernetesVersion": "true",
            "sample.classicDeployment": "on",
        },
    )
    (violation,) = capacity.claims_fit(stack, {})
    assert violation.urn == stack.one(DEPLOYMENT, "sample-deployment").urn
    assert "Deployment default/gpu-test: fits alone, but beside the workloads before it only 0 of 1" in (
        violation.message
    )
    assert "the pods placed before it: Deployment default/gpu-test-classic (1)" in violation.message
    assert "set sample.classicDeployment=auto" in violation.message
    assert "nodePool.maxReplicas" in violation.message


def test_classic_sample_left_out_by_auto_keeps_a_one_gpu_pool_fitting() -> None:
    stack: Any = program_stack(
        "dev", "python", {"cluster.kubernetesVersion": "1.37", "cluster.forceKubernetesVersion": "true"}
    )
    assert capacity.claims_fit(stack, {}) == []
    roomy: Any = program_stack(
        "dev",
        "python",
        {
            "cluster.kubernetesVersion": "1.37",
            "cluster.forceKubernetesVersion": "true",
            "nodePool.maxReplicas": "2",
        },
    )
    names = [r.props["metadata"]["name"] for r in roomy if r.type == DEPLOYMENT]
    assert "gpu-test-classic" in names
    assert capacity.claims_fit(roomy, {}) == []
