"""The real pack over gRPC: every example stack passes, each broken stack fails exactly one way."""

from __future__ import annotations

from typing import Any

import pytest
from pulumi.runtime.proto import analyzer_pb2
from vke_gpu_dra import facts

from .analyzer_client import Diagnostic, PackProcess
from .stacks import KUBECONFIG_TEXT, SimRes, Stack, example_stacks, program_stack

MANDATORY_POLICIES = {
    "kubernetes-version",
    "gpu-node-pool-labels",
    "gpu-node-pool-instance-types",
    "gpu-node-pool-runtime",
    "no-device-plugin-beside-dra",
    "dra-driver-values",
    "device-classes",
    "claim-references",
    "secrets",
    "production-protection",
}
ADVISORY_POLICIES = {"api-server-public-access", "node-pool-auto-scaling"}


def mandatory(diags: list[Diagnostic]) -> list[Diagnostic]:
    return [d for d in diags if d.level == "mandatory"]


def test_analyzer_info_lists_every_policy(analyzer: PackProcess) -> None:
    info = analyzer.info()
    assert info.name == "vke-gpu-dra"
    levels = {p.name: p.enforcementLevel for p in info.policies}
    assert set(levels) == MANDATORY_POLICIES | ADVISORY_POLICIES
    assert {n for n, lvl in levels.items() if lvl == analyzer_pb2.MANDATORY} == MANDATORY_POLICIES


@pytest.mark.parametrize(("stack", "implementation"), list(example_stacks()))
def test_example_stacks_have_no_mandatory_violation(
    analyzer: PackProcess, stack: str, implementation: str
) -> None:
    diags = analyzer.run(program_stack(stack, implementation))
    assert mandatory(diags) == []
    # Preview-only notes ("can't run policy during preview") would mean a policy touched an unknown.
    assert not [d for d in diags if "during preview" in d.message]


def test_dev_stack_gets_the_public_api_server_advisory(analyzer: PackProcess) -> None:
    diags = analyzer.run(program_stack("dev", "python"))
    assert [(d.policy, d.level) for d in diags] == [("api-server-public-access", "advisory")]
    assert "0.0.0.0/0" in diags[0].message


# --- broken stacks: one small change each, exactly one mandatory violation ---

CLUSTER = "volcengine:vke/cluster:Cluster"
POOL = "volcengine:vke/nodePool:NodePool"
RUNTIME = "pulumi-python:dynamic/vke:NodePoolRuntime"
RELEASE = "kubernetes:helm.sh/v3:Release"
RCT = "kubernetes:resource.k8s.io/v1:ResourceClaimTemplate"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
DEVICE_CLASS = "kubernetes:resource.k8s.io/v1:DeviceClass"


def _labels(stack: Stack) -> list[dict[str, str]]:
    return stack.one(POOL).props["kubernetesConfig"]["labels"]


def k8s_133(s: Stack) -> None:
    s.one(CLUSTER).props["kubernetesVersion"] = "1.33"


def containerd_20(s: Stack) -> None:
    s.one(RUNTIME).props["runtime_version"] = "2.0"


def label_missing(s: Stack) -> None:
    s.one(POOL).props["kubernetesConfig"]["labels"] = [
        lb for lb in _labels(s) if lb["key"] != facts.LABEL_GPU_PRESENT
    ]


def label_nvidia(s: Stack) -> None:
    for lb in _labels(s):
        if lb["key"] == facts.LABEL_GPU_SCHEDULE:
            lb["value"] = "nvidia"


def label_mgpu(s: Stack) -> None:
    for lb in _labels(s):
        if lb["key"] == facts.LABEL_GPU_SCHEDULE:
            lb["value"] = "mgpu"


def device_plugin_addon(s: Stack) -> None:
    addon = SimRes(
        "volcengine:vke/addon:Addon",
        "gpu-device-plugin",
        {"clusterId": "cc-1", "name": "nvidia-device-plugin", "deployMode": "Unmanaged"},
    )
    addon.urn = f"urn:pulumi:{s.name}::vke-gpu-dra::{addon.type}::{addon.name}"
    s.append(addon)


def cpu_instance_type(s: Stack) -> None:
    s.one(POOL).props["nodeConfig"]["instanceTypeIds"] = ["ecs.g3i.2xlarge"]


def unknown_class(s: Stack) -> None:
    s.one(RCT).props["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = (
        "gpu.example.com"
    )


def no_pod_claim(s: Stack) -> None:
    del s.one(DEPLOYMENT).props["spec"]["template"]["spec"]["resourceClaims"]


def plaintext_kubeconfig_output(s: Stack) -> None:
    s.one("pulumi:pulumi:Stack").props["kubeconfig"] = KUBECONFIG_TEXT


def plaintext_password(s: Stack) -> None:
    login = s.one(POOL).props["nodeConfig"]["security"]["login"]
    login["password"] = login["password"]["value"]


def cluster_unprotected(s: Stack) -> None:
    s.one(CLUSTER).protect = False


def kubelet_plugin_anywhere(s: Stack) -> None:
    del s.one(RELEASE).props["values"]["kubeletPlugin"]["affinity"]


def gpu_resources_off(s: Stack) -> None:
    s.one(RELEASE).props["values"]["gpuResourcesEnabledOverride"] = False


def controller_affinity_default(s: Stack) -> None:
    release = s.one(RELEASE).props
    del release["valueYamlFiles"], release["allowNullValues"]


def gpu_class_selects_everything(s: Stack) -> None:
    spec = s.one(DEVICE_CLASS, facts.DEVICE_CLASS_GPU.name).props["spec"]
    spec["selectors"][0]["cel"]["expression"] = f"device.driver == '{facts.DRIVER_NAME}'"


def mig_class_does_not_compile(s: Stack) -> None:
    spec = s.one(DEVICE_CLASS, facts.DEVICE_CLASS_MIG.name).props["spec"]
    spec["selectors"][0]["cel"]["expression"] = "device.attributes['gpu.nvidia.com'].type =="


BROKEN = [
    # (id, stack, implementation, mutation, policy, words the message must contain)
    ("kubernetes-1.33", "dev", "python", k8s_133, "kubernetes-version", ["vke-cluster", '"1.33"', "1.34"]),
    (
        "containerd-2.0",
        "dev",
        "python",
        containerd_20,
        "gpu-node-pool-runtime",
        ["gpu-runtime", '"2.0"', "2.1"],
    ),
    (
        "label-missing",
        "dev",
        "python",
        label_missing,
        "gpu-node-pool-labels",
        ["gpu-pool", "nvidia.com/gpu.present is missing", 'value: "true"'],
    ),
    (
        "label-value-nvidia",
        "dev",
        "python",
        label_nvidia,
        "no-device-plugin-beside-dra",
        ["gpu-pool", 'vke.node.gpu.schedule="nvidia"', '"nvidia-dra"'],
    ),
    (
        "label-value-mgpu",
        "prod",
        "nvidia",
        label_mgpu,
        "no-device-plugin-beside-dra",
        ["mGPU", '"nvidia-dra"'],
    ),
    (
        "device-plugin-add-on",
        "dev",
        "nvidia",
        device_plugin_addon,
        "no-device-plugin-beside-dra",
        ["gpu-device-plugin", '"nvidia-device-plugin"', "remove the add-on"],
    ),
    (
        "cpu-instance-type",
        "dev",
        "python",
        cpu_instance_type,
        "gpu-node-pool-instance-types",
        ["gpu-pool", "ecs.g3i.2xlarge", "GPU Accelerated"],
    ),
    (
        "template-unknown-class",
        "dev",
        "python",
        unknown_class,
        "claim-references",
        ["sample-claim-template", "'gpu.example.com'", "gpu.nvidia.com"],
    ),
    (
        "container-claim-without-pod-claim",
        "local",
        "nvidia",
        no_pod_claim,
        "claim-references",
        ["sample-deployment", "'gpu'", "resourceClaims"],
    ),
    (
        "plaintext-kubeconfig-output",
        "dev",
        "python",
        plaintext_kubeconfig_output,
        "secrets",
        ['"kubeconfig"', "plaintext", "pulumi.Output.secret"],
    ),
    (
        "plaintext-node-password",
        "prod",
        "python",
        plaintext_password,
        "secrets",
        ["gpu-pool", "nodeConfig.security.login.password", "pulumi.Output.secret"],
    ),
    (
        "production-without-protect",
        "prod",
        "python",
        cluster_unprotected,
        "production-protection",
        ["vke-cluster", "protect is false", "protect=True"],
    ),
    (
        "kubelet-plugin-on-any-node",
        "dev",
        "python",
        kubelet_plugin_anywhere,
        "dra-driver-values",
        ["dra-driver-release", "kubeletPlugin", "nvidia-dra"],
    ),
    (
        "nvidia-gpu-resources-off",
        "prod",
        "nvidia",
        gpu_resources_off,
        "dra-driver-values",
        ["gpuResourcesEnabledOverride is False", "set it to true"],
    ),
    (
        "nvidia-controller-affinity-default",
        "dev",
        "nvidia",
        controller_affinity_default,
        "dra-driver-values",
        ["controller.affinity is not set", "null"],
    ),
    (
        "gpu-class-selects-mig",
        "dev",
        "python",
        gpu_class_selects_everything,
        "device-classes",
        ["gpu.nvidia.com", "also select a MIG device", "device.attributes"],
    ),
    (
        "mig-class-does-not-compile",
        "prod",
        "python",
        mig_class_does_not_compile,
        "device-classes",
        ["mig.nvidia.com", "does not compile", "Syntax error"],
    ),
]


@pytest.mark.parametrize("case", [pytest.param(case, id=case[0]) for case in BROKEN])
def test_broken_stack_fails_exactly_one_policy(analyzer: PackProcess, case: tuple[Any, ...]) -> None:
    _, stack, implementation, mutate, policy, words = case
    diags = mandatory(analyzer.run(program_stack(stack, implementation).mutated(mutate)))
    assert [d.policy for d in diags] == [policy], [d.message for d in diags]
    for word in words:
        assert word in diags[0].message


def test_broken_resource_is_named_by_urn(analyzer: PackProcess) -> None:
    broken = program_stack("dev", "python").mutated(k8s_133)
    (diag,) = mandatory(analyzer.run(broken))
    assert diag.urn == broken.one(CLUSTER).urn
