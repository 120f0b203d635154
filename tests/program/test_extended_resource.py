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


@pytest.mark.parametrize(
    ("overrides", "mapped"),
    [
        ({}, False),  # the example stack: 1.34, auto
        ({"cluster.kubernetesVersion": "1.35"}, False),
        ({"cluster.kubernetesVersion": "1.36"}, True),
        ({"cluster.kubernetesVersion": "1.37"}, True),
        ({"cluster.kubernetesVersion": "1.36", "driver.extendedResource": "off"}, False),
        ({"driver.extendedResource": "on"}, True),
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


def test_classic_sample_is_written_for_the_device_plugin() -> None:
    run = harness.run_stack(
        "dev", {"cluster.kubernetesVersion": "1.36", "nodePool.taints": ["nvidia.com/gpu=present:NoSchedule"]}
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
    run = harness.run_stack("dev", {"driver.implementation": "nvidia", "cluster.kubernetesVersion": "1.36"})
    assert [r.inputs["metadata"]["name"] for r in run.by_type(DEPLOYMENT)] == ["gpu-test"]


@pytest.mark.parametrize("version", ["1.34", "1.36"])
def test_mapped_objects_pass_strict_schema_validation(version: str) -> None:
    """The field is in the v1 schema from 1.34 on (alpha there, beta in 1.36). A schema cannot tell that
    a 1.34 server drops it with its gate off: the fake API server's version rules check that."""
    run = harness.run_stack("dev", {"driver.extendedResource": "on"})
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
