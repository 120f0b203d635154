"""nvidia.com/gpu through DRA: gpu.nvidia.com's extendedResourceName and the classic sample."""

from __future__ import annotations

import kubernetes_validate
import pytest
from vke_gpu_dra_core import config as config_mod
from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt

from components import manifests
from tests.program import harness

DEVICE_CLASS = pt.DEVICE_CLASS
DEPLOYMENT = pt.DEPLOYMENT


def class_specs(run: harness.ProgramRun) -> dict[str, dict]:
    return {r.inputs["metadata"]["name"]: r.inputs["spec"] for r in run.by_type(DEVICE_CLASS)}


#: The dev stack's pool (one A10 per node) at two nodes: room for gpu-test and gpu-test-classic.
TWO_GPUS = {"nodePool.maxReplicas": 2}


@pytest.mark.parametrize(
    ("overrides", "mapped"),
    [
        ({}, False),  # the example stack: 1.34, auto
        ({"cluster.kubernetesVersion": "1.34", "driver.extendedResource": "auto"}, False),
        (
            {"cluster.kubernetesVersion": "1.37", "cluster.forceKubernetesVersion": "true", **TWO_GPUS},
            True,
        ),  # DRAExtendedResource GA
        (
            {
                "cluster.kubernetesVersion": "1.37",
                "cluster.forceKubernetesVersion": "true",
                "driver.extendedResource": "off",
                **TWO_GPUS,
            },
            False,
        ),
        ({"driver.extendedResource": "on", **TWO_GPUS}, True),
    ],
)
def test_gpu_class_maps_nvidia_gpu_per_cluster_version(overrides: dict, mapped: bool) -> None:
    run = harness.run_stack("dev", overrides)
    specs = class_specs(run)
    gpu, mig = specs[facts.DEVICE_CLASS_GPU.name], specs[facts.DEVICE_CLASS_MIG.name]
    assert gpu.get("extendedResourceName") == (facts.GPU_EXTENDED_RESOURCE if mapped else None)
    assert "extendedResourceName" not in mig  # one mapping: a MIG device is no whole nvidia.com/gpu
    deployments = {r.inputs["metadata"]["name"]: r for r in run.by_type(DEPLOYMENT)}
    assert (manifests.SAMPLE_CLASSIC_DEPLOYMENT in deployments) == mapped
    assert ("classicDeployment" in run.exports["sample"]) == mapped
    assert "classicDeploymentSkipped" not in run.exports["sample"]


def classic_deployed(run: harness.ProgramRun) -> bool:
    names = [r.inputs["metadata"]["name"] for r in run.by_type(DEPLOYMENT)]
    deployed = manifests.SAMPLE_CLASSIC_DEPLOYMENT in names
    assert ("classicDeployment" in run.exports["sample"]) == deployed
    log_command = f"kubectl logs deployment/{manifests.SAMPLE_CLASSIC_DEPLOYMENT} -n default --all-pods=true"
    assert (log_command in run.exports["verifyCommands"]) == deployed
    return deployed


def test_auto_leaves_the_classic_sample_out_of_a_one_gpu_pool_and_says_why() -> None:
    """Changing only the Kubernetes version of the one-GPU dev stack must not ask for a second GPU."""
    run = harness.run_stack(
        "dev", {"cluster.kubernetesVersion": "1.37", "cluster.forceKubernetesVersion": "true"}
    )
    assert (
        class_specs(run)[facts.DEVICE_CLASS_GPU.name]["extendedResourceName"] == facts.GPU_EXTENDED_RESOURCE
    )
    assert not classic_deployed(run)
    assert run.exports["sample"]["classicDeploymentSkipped"] == (
        "gpu-test-classic left out: the samples need 2 GPUs and node pool gpu-dra-dev has 1 at "
        "nodePool.maxReplicas=1; raise nodePool.maxReplicas, pick an instance type with more GPUs, "
        "or set sample.classicDeployment=on"
    )


@pytest.mark.parametrize(
    ("overrides", "deployed"),
    [
        ({}, False),  # 1 GPU at the pool's maximum
        (TWO_GPUS, True),  # 2 nodes of 1 A10
        ({"nodePool.instanceTypes": ["ecs.pni2.28xlarge"]}, True),  # 1 node of 8 A100s
        # a pool of two types may get either: the one-GPU type decides
        ({"nodePool.instanceTypes": ["ecs.pni2.28xlarge", "ecs.gni2.3xlarge"]}, False),
        ({"driver.deviceSource": "simulated", "driver.simulatedGpus": 2}, True),
        ({"sample.classicDeployment": "on"}, True),  # the capacity policy then reports the pool
        ({"sample.classicDeployment": "off", **TWO_GPUS}, False),
    ],
)
def test_classic_deployment_modes_on_a_mapped_cluster(overrides: dict, deployed: bool) -> None:
    run = harness.run_stack(
        "dev", {"cluster.kubernetesVersion": "1.37", "cluster.forceKubernetesVersion": "true", **overrides}
    )
    assert classic_deployed(run) == deployed
    skipped = run.exports["sample"].get("classicDeploymentSkipped")
    auto = overrides.get("sample.classicDeployment", "auto") == "auto"
    assert (skipped is not None) == (auto and not deployed)


def test_auto_on_an_existing_cluster_has_no_pool_to_size() -> None:
    run = harness.run_stack("local", {"cluster.kubernetesVersion": "1.36"})
    assert not classic_deployed(run)
    assert (
        "target=existing-cluster has no node pool of this stack"
        in run.exports["sample"]["classicDeploymentSkipped"]
    )
    run = harness.run_stack("local", {"cluster.kubernetesVersion": "1.36", "sample.classicDeployment": "on"})
    assert classic_deployed(run)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({}, ("driver.extendedResource=auto", "cluster.kubernetesVersion=1.34")),
        (
            {
                "cluster.kubernetesVersion": "1.37",
                "cluster.forceKubernetesVersion": "true",
                "driver.extendedResource": "off",
            },
            ("driver.extendedResource=off",),
        ),
        (
            {
                "cluster.kubernetesVersion": "1.37",
                "cluster.forceKubernetesVersion": "true",
                "driver.implementation": "nvidia",
            },
            ("driver.implementation=nvidia",),
        ),
    ],
)
def test_classic_on_without_the_mapping_is_one_clear_error(overrides: dict, named: tuple[str, ...]) -> None:
    raw = harness.stack_raw_config("dev", {"sample.classicDeployment": "on", **overrides})
    with pytest.raises(config_mod.StackConfigError) as err:
        config_mod.load(raw)
    assert len(err.value.issues) == 1
    text = str(err.value)
    assert "sample.classicDeployment" in text and "'on'" in text
    assert "auto or off" in text
    for part in named:
        assert part in text


def test_bad_classic_mode_is_one_clear_error() -> None:
    raw = harness.stack_raw_config("dev", {"sample.classicDeployment": "yes"})
    with pytest.raises(config_mod.StackConfigError) as err:
        config_mod.load(raw)
    text = str(err.value)
    assert "sample.classicDeployment" in text and "'yes'" in text and "one of auto, on, off" in text


def test_classic_sample_is_written_for_the_device_plugin() -> None:
    run = harness.run_stack(
        "dev",
        {
            "cluster.kubernetesVersion": "1.37",
            "cluster.forceKubernetesVersion": "true",
            "nodePool.taints": ["nvidia.com/gpu=present:NoSchedule"],
            **TWO_GPUS,
        },
    )
    classic = run.one(DEPLOYMENT, "classic")
    dep = harness.api_json(classic, "apps/v1", "Deployment")
    assert dep["metadata"] == {"name": "gpu-test-classic", "namespace": "default"}
    pod = dep["spec"]["template"]["spec"]
    assert "resourceClaims" not in pod
    (container,) = pod["containers"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert container["args"] == ["-c", "nvidia-smi -L; sleep 600"]
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
    ]
    assert dep["spec"]["selector"]["matchLabels"] == {"app": "gpu-test-classic"}
    gpu_class = next(r for r in run.by_type(DEVICE_CLASS) if r.inputs["metadata"]["name"] == "gpu.nvidia.com")
    assert run.depends_on(classic, gpu_class)
    assert run.exports["sample"]["classicDeployment"] == "gpu-test-classic"
    assert (
        run.exports["verifyCommands"][-1]
        == "kubectl logs deployment/gpu-test-classic -n default --all-pods=true"
    )


def test_nvidia_chart_gets_no_classic_sample() -> None:
    """NVIDIA's chart owns the DeviceClasses then; the program does not know its mapping."""
    run = harness.run_stack(
        "dev",
        {
            "driver.implementation": "nvidia",
            "cluster.kubernetesVersion": "1.37",
            "cluster.forceKubernetesVersion": "true",
        },
    )
    assert [r.inputs["metadata"]["name"] for r in run.by_type(DEPLOYMENT)] == ["gpu-test"]


@pytest.mark.parametrize("version", ["1.34", "1.36"])
def test_mapped_objects_pass_strict_schema_validation(version: str) -> None:
    """The field is in the v1 schema from 1.34 on (alpha there, beta in 1.36). A schema cannot tell that
    a 1.34 server drops it with its gate off: the fake API server's version rules check that."""
    run = harness.run_stack("dev", {"driver.extendedResource": "on", "sample.classicDeployment": "on"})
    bodies = [harness.api_json(r, "resource.k8s.io/v1", "DeviceClass") for r in run.by_type(DEVICE_CLASS)]
    bodies += [harness.api_json(r, "apps/v1", "Deployment") for r in run.by_type(DEPLOYMENT)]
    assert len(bodies) == 4
    for body in bodies:
        kubernetes_validate.validate(body, desired_version=version, strict=True)


def test_bad_mode_is_one_clear_error() -> None:
    raw = harness.stack_raw_config("dev", {"driver.extendedResource": "yes"})
    with pytest.raises(config_mod.StackConfigError) as err:
        config_mod.load(raw)
    text = str(err.value)
    assert "driver.extendedResource" in text and "'yes'" in text and "one of auto, on, off" in text
