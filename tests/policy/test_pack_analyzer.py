"""The real pack over gRPC: every example stack passes, each broken stack fails exactly one way."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pytest
from pulumi.runtime.proto import analyzer_pb2
from vke_gpu_dra_core import facts, vke_releases
from vke_gpu_dra_core import policy_names as names
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core.versions import format_version

from .analyzer_client import Diagnostic, PackProcess
from .stacks import KUBECONFIG_TEXT, PROJECT, SimRes, Stack, after_up, example_stacks, program_stack, secret

MANDATORY_POLICIES = {
    names.CAPACITY,
    names.KUBERNETES_VERSION,
    names.NODE_POOL_LABELS,
    names.NODE_POOL_INSTANCE_TYPES,
    names.NODE_POOL_RUNTIME,
    names.NO_DEVICE_PLUGIN,
    names.NO_DEVICE_PLUGIN_ON_DRA_NODES,
    names.DRIVER_VALUES,
    names.DEVICE_CLASSES,
    names.CLAIM_REFERENCES,
    names.SECRETS,
    names.PRODUCTION_PROTECTION,
    names.DRIVER_IMAGE_REGISTRY,
    names.DRIVER_IMAGE_DIGEST,
    names.SHARING_FEATURE_GATES,
}
ADVISORY_POLICIES = {
    names.KUBERNETES_VERSION_FORCED,
    names.API_SERVER_PUBLIC_ACCESS,
    names.NODE_POOL_AUTO_SCALING,
    names.DRIVER_IMAGE_DIGEST_ADVISORY,
}


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


@pytest.mark.parametrize("implementation", ["python", "nvidia"])
def test_a_forced_137_stack_passes_with_the_forced_line_advisory(
    analyzer: PackProcess, implementation: str
) -> None:
    """A line VKE's docs do not list (1.37), forced: as the program writes it and as VKE would report the
    build after `up`, no mandatory violation and one advisory naming the line and the force key."""

    def reported_build(s: Stack) -> None:
        s.one(CLUSTER).props["kubernetesVersion"] = "v1.37.2-vke.1"

    stack = program_stack(
        "dev", implementation, {"cluster.kubernetesVersion": "1.37", "cluster.forceKubernetesVersion": "true"}
    )
    assert stack.one(CLUSTER).props["kubernetesVersion"] == "1.37"
    for judged in (stack, stack.mutated(reported_build)):
        diags = analyzer.run(judged)
        assert mandatory(diags) == []
        (forced,) = [d for d in diags if d.policy == names.KUBERNETES_VERSION_FORCED]
        assert forced.level == "advisory"
        assert "Kubernetes 1.37, which VKE's docs" in forced.message
        assert "cluster.forceKubernetesVersion=true asks VKE for it anyway" in forced.message
        assert (
            vke_releases.VKE_DOCS.checked in forced.message and vke_releases.VKE_DOCS.source in forced.message
        )


def test_the_same_137_cluster_without_the_force_key_fails_the_version_policy(analyzer: PackProcess) -> None:
    """The program refuses 1.37 unforced; a stack whose cluster still names it (the key dropped) fails
    kubernetes-version once, and gets no forced-line advisory."""
    stack = program_stack("dev", "python").mutated(
        lambda s: s.one(CLUSTER).props.__setitem__("kubernetesVersion", "1.37")
    )
    diags = analyzer.run(stack)
    (failed,) = mandatory(diags)
    assert failed.policy == names.KUBERNETES_VERSION
    assert "Kubernetes 1.37, which VKE's docs do not list" in failed.message
    assert "cluster.forceKubernetesVersion=true" in failed.message
    assert not [d for d in diags if d.policy == names.KUBERNETES_VERSION_FORCED]


def test_dev_stack_gets_the_public_api_server_advisory(analyzer: PackProcess) -> None:
    diags = analyzer.run(program_stack("dev", "python"))
    assert [(d.policy, d.level) for d in diags] == [(names.API_SERVER_PUBLIC_ACCESS, "advisory")]
    assert "0.0.0.0/0" in diags[0].message


# --- broken stacks: one small change each, exactly one mandatory violation ---

CLUSTER = pt.CLUSTER
POOL = pt.NODE_POOL
RUNTIME = pt.NODE_POOL_RUNTIME
RELEASE = pt.HELM_RELEASE
RCT = pt.RESOURCE_CLAIM_TEMPLATE
DEPLOYMENT = pt.DEPLOYMENT
DEVICE_CLASS = pt.DEVICE_CLASS
PASSWORD = "S3cr3t-Passw0rd"


def _labels(stack: Stack) -> list[dict[str, str]]:
    return stack.one(POOL).props["kubernetesConfig"]["labels"]


def _set_schedule_label(value: str) -> Callable[[Stack], None]:
    def mutate(s: Stack) -> None:
        for lb in _labels(s):
            if lb["key"] == facts.LABEL_GPU_SCHEDULE:
                lb["value"] = value

    return mutate


def k8s_133(s: Stack) -> None:
    s.one(CLUSTER).props["kubernetesVersion"] = "1.33"


def k8s_136_build(s: Stack) -> None:
    """A cluster another program made on a line VKE does not offer, as VKE would report its build."""
    s.one(CLUSTER).props["kubernetesVersion"] = "v1.36.1-vke.2"


def containerd_20(s: Stack) -> None:
    s.one(RUNTIME).props["runtime_version"] = "2.0"


def label_missing(s: Stack) -> None:
    kubernetes_config = s.one(POOL).props["kubernetesConfig"]
    kubernetes_config["labels"] = [lb for lb in _labels(s) if lb["key"] != facts.LABEL_GPU_PRESENT]


def device_plugin_addon(s: Stack) -> None:
    addon = SimRes(
        pt.ADDON,
        "gpu-device-plugin",
        {"clusterId": "vke-cluster-id", "name": "nvidia-device-plugin", "deployMode": "Unmanaged"},
    )
    addon.urn = f"urn:pulumi:{s.name}::vke-gpu-dra::{addon.type}::{addon.name}"
    s.append(addon)


def device_plugin_release(s: Stack) -> None:
    release = SimRes(
        pt.HELM_RELEASE,
        "nvdp",
        {
            "chart": "nvidia-device-plugin",
            "version": "0.17.1",
            "namespace": "nvidia-device-plugin",
            "values": {},
        },
    )
    release.urn = f"urn:pulumi:{s.name}::vke-gpu-dra::{release.type}::{release.name}"
    s.append(release)


def unknown_class(s: Stack) -> None:
    request = s.one(RCT).props["spec"]["spec"]["devices"]["requests"][0]
    request["exactly"]["deviceClassName"] = "gpu.example.com"


def no_pod_claim(s: Stack) -> None:
    del s.one(DEPLOYMENT).props["spec"]["template"]["spec"]["resourceClaims"]


def plaintext_kubeconfig_output(s: Stack) -> None:
    s.one(pt.STACK).props["kubeconfig"] = KUBECONFIG_TEXT


def plaintext_password(s: Stack) -> None:
    pool = s.one(POOL).props
    pool["nodeConfig"] = pool["nodeConfig"]["value"]  # the program marks the whole nodeConfig secret


def cluster_unprotected(s: Stack) -> None:
    s.one(CLUSTER).protect = False


def gpu_resources_off(s: Stack) -> None:
    s.one(RELEASE).props["values"]["gpuResourcesEnabledOverride"] = False


def controller_affinity_default(s: Stack) -> None:
    release = s.one(RELEASE).props
    del release["valueYamlFiles"]


def gpu_class_selects_everything(s: Stack) -> None:
    spec = s.one(DEVICE_CLASS, facts.DEVICE_CLASS_GPU.name).props["spec"]
    spec["selectors"][0]["cel"]["expression"] = f"device.driver == '{facts.DRIVER_NAME}'"


def mig_class_does_not_compile(s: Stack) -> None:
    spec = s.one(DEVICE_CLASS, facts.DEVICE_CLASS_MIG.name).props["spec"]
    spec["selectors"][0]["cel"]["expression"] = f"device.attributes['{facts.DRIVER_NAME}'].type =="


PROD_IMAGE = "vke-gpu-dra-prod-cn-beijing.cr.volces.com/vke-gpu-dra/dra-gpu-kubelet-plugin"


def image_from_chart_default(s: Stack) -> None:
    """The release sets no repository: the chart's placeholder default (registry.example.com) applies."""
    del s.one(RELEASE).props["values"]["image"]["repository"]


def image_on_localhost(s: Stack) -> None:
    s.one(RELEASE).props["values"]["image"]["repository"] = "localhost:5000/vke-gpu-dra/driver"


@dataclass(frozen=True)
class Case:
    """A broken stack: a config change the program accepts, or a mutation of what it registers.

    Mutations stand for what slips past the program's own config validation (a hand-edited stack,
    another program): the policy must still catch it.
    """

    id: str
    stack: str
    implementation: str
    policy: str
    words: tuple[str, ...]
    overrides: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict)
    remove: tuple[str, ...] = ()
    mutate: Callable[[Stack], None] | None = None

    def build(self) -> Stack:
        stack = program_stack(self.stack, self.implementation, self.overrides, self.secrets, self.remove)
        return stack.mutated(self.mutate) if self.mutate else stack


BROKEN = [
    Case(
        "kubernetes-1.33",
        "dev",
        "python",
        names.KUBERNETES_VERSION,
        ("vke-cluster", '"1.33"', format_version(facts.MIN_KUBERNETES_VERSION)),
        mutate=k8s_133,
    ),
    Case(
        "kubernetes-1.36-not-offered",
        "dev",
        "python",
        names.KUBERNETES_VERSION,
        ("vke-cluster", '"v1.36.1-vke.2"', "Kubernetes 1.36, which VKE's docs do not list", ": 1.34 ("),
        mutate=k8s_136_build,
    ),
    Case(
        "containerd-2.0",
        "dev",
        "python",
        names.NODE_POOL_RUNTIME,
        ("gpu-runtime", '"2.0"', format_version(facts.MIN_CONTAINERD_VERSION)),
        mutate=containerd_20,
    ),
    Case(
        "label-missing",
        "dev",
        "python",
        names.NODE_POOL_LABELS,
        ("gpu-pool", f"{facts.LABEL_GPU_PRESENT} is missing", f'value: "{facts.LABEL_GPU_PRESENT_VALUE}"'),
        mutate=label_missing,
    ),
    Case(
        "label-value-nvidia",
        "dev",
        "python",
        names.NO_DEVICE_PLUGIN,
        ("gpu-pool", f'{facts.LABEL_GPU_SCHEDULE}="nvidia"', f'"{facts.LABEL_GPU_SCHEDULE_DRA}"'),
        mutate=_set_schedule_label("nvidia"),
    ),
    Case(
        "label-value-mgpu",
        "prod",
        "nvidia",
        names.NO_DEVICE_PLUGIN,
        ("mGPU", f'"{facts.LABEL_GPU_SCHEDULE_DRA}"'),
        mutate=_set_schedule_label("mgpu"),
    ),
    Case(
        "device-plugin-add-on",
        "dev",
        "nvidia",
        names.NO_DEVICE_PLUGIN,
        ("gpu-device-plugin", '"nvidia-device-plugin"', "remove the add-on"),
        mutate=device_plugin_addon,
    ),
    Case(
        "device-plugin-helm-release",
        "dev",
        "python",
        names.NO_DEVICE_PLUGIN_ON_DRA_NODES,
        ("nvdp", "nvidia-device-plugin", "nvidia.com/gpu.present=true", "KEP-5004"),
        # 1.37 maps nvidia.com/gpu; sample.classicDeployment=auto leaves gpu-test-classic out of the
        # one-GPU pool, so the capacity policy stays quiet and this is the only violation
        overrides={"cluster.kubernetesVersion": "1.37", "cluster.forceKubernetesVersion": "true"},
        mutate=device_plugin_release,
    ),
    Case(
        "cpu-instance-type",
        "dev",
        "python",
        names.NODE_POOL_INSTANCE_TYPES,
        ("gpu-pool", "ecs.g3i.2xlarge", "GPU Accelerated"),
        overrides={"nodePool.instanceTypes": json.dumps(["ecs.g3i.2xlarge"])},
    ),
    Case(
        "template-unknown-class",
        "dev",
        "python",
        names.CLAIM_REFERENCES,
        ("sample-claim-template", "'gpu.example.com'", facts.DEVICE_CLASS_GPU.name),
        mutate=unknown_class,
    ),
    Case(
        "container-claim-without-pod-claim",
        "local",
        "nvidia",
        names.CLAIM_REFERENCES,
        ("sample-deployment", "'gpu'", "resourceClaims"),
        mutate=no_pod_claim,
    ),
    Case(
        "plaintext-kubeconfig-output",
        "dev",
        "python",
        names.SECRETS,
        ('"kubeconfig"', "plaintext", "pulumi.Output.secret"),
        mutate=plaintext_kubeconfig_output,
    ),
    Case(
        "plaintext-node-password",
        "prod",
        "python",
        names.SECRETS,
        ("gpu-pool", "nodeConfig.security.login.password", "pulumi.Output.secret"),
        secrets={"nodePool.password": PASSWORD},
        remove=("nodePool.keyPairName",),
        mutate=plaintext_password,
    ),
    Case(
        "production-without-protect",
        "prod",
        "python",
        names.PRODUCTION_PROTECTION,
        # The stack says production, so the program protects: the remedy is the state's protect flag.
        ("vke-cluster", "protect is false", "pulumi state protect '", "::vke-cluster'"),
        mutate=cluster_unprotected,
    ),
    Case(
        "kubelet-plugin-on-any-node",
        "dev",
        "python",
        names.DRIVER_VALUES,
        ("dra-driver-release", "kubeletPlugin", facts.LABEL_GPU_SCHEDULE_DRA),
        overrides={"driver.kubeletPluginOnAllNodes": "true"},
    ),
    Case(
        "nvidia-gpu-resources-off",
        "prod",
        "nvidia",
        names.DRIVER_VALUES,
        ("gpuResourcesEnabledOverride is False", "set it to true"),
        mutate=gpu_resources_off,
    ),
    Case(
        "nvidia-controller-affinity-default",
        "dev",
        "nvidia",
        names.DRIVER_VALUES,
        ("controller.affinity is not set", "null"),
        mutate=controller_affinity_default,
    ),
    Case(
        "gpu-class-selects-mig",
        "dev",
        "python",
        names.DEVICE_CLASSES,
        (facts.DEVICE_CLASS_GPU.name, "also select a MIG device", "device.attributes"),
        mutate=gpu_class_selects_everything,
    ),
    Case(
        "unpinned-driver-image-on-prod",
        "prod",
        "python",
        names.DRIVER_IMAGE_DIGEST,
        ("dra-driver-release", f"{PROD_IMAGE}:0.1.0", "not pinned by digest", "image.digest"),
        overrides={"driver.image": f"{PROD_IMAGE}:0.1.0"},
    ),
    Case(
        "driver-image-from-the-chart-placeholder",
        "dev",
        "python",
        names.DRIVER_IMAGE_REGISTRY,
        ("registry.example.com", "placeholder domain", "driver.registry.name"),
        mutate=image_from_chart_default,
    ),
    Case(
        "driver-image-on-localhost-in-vke",
        "prod",
        "python",
        names.DRIVER_IMAGE_REGISTRY,
        ("localhost:5000/vke-gpu-dra/driver", "local machine"),
        mutate=image_on_localhost,
    ),
    Case(
        "mig-class-does-not-compile",
        "prod",
        "python",
        names.DEVICE_CLASSES,
        (facts.DEVICE_CLASS_MIG.name, "does not compile", "Syntax error"),
        mutate=mig_class_does_not_compile,
    ),
]


@pytest.mark.parametrize("case", [pytest.param(case, id=case.id) for case in BROKEN])
def test_broken_stack_fails_exactly_one_policy(analyzer: PackProcess, case: Case) -> None:
    diags = mandatory(analyzer.run(case.build()))
    assert [d.policy for d in diags] == [case.policy], [d.message for d in diags]
    for word in case.words:
        assert word in diags[0].message


def test_unpinned_driver_image_is_advisory_outside_production(analyzer: PackProcess) -> None:
    image = "vke-gpu-dra-dev-cn-beijing.cr.volces.com/vke-gpu-dra/dra-gpu-kubelet-plugin:0.1.0"
    diags = analyzer.run(
        program_stack("dev", "python", {"driver.image": image}, remove=("driver.registry.create",))
    )
    assert mandatory(diags) == []
    advisory = [d for d in diags if d.policy.startswith("driver-image")]
    assert [(d.policy, d.level) for d in advisory] == [(names.DRIVER_IMAGE_DIGEST_ADVISORY, "advisory")]
    assert image in advisory[0].message


def test_local_stack_may_use_its_localhost_image_unpinned_advisory_only(analyzer: PackProcess) -> None:
    diags = analyzer.run(program_stack("local", "python"))
    assert mandatory(diags) == []
    assert [d.policy for d in diags if d.policy.startswith("driver-image")] == [
        names.DRIVER_IMAGE_DIGEST_ADVISORY
    ]


def test_production_from_policy_config_makes_the_digest_mandatory(analyzer: PackProcess) -> None:
    image = "vke-gpu-dra-dev-cn-beijing.cr.volces.com/vke-gpu-dra/dra-gpu-kubelet-plugin:0.1.0"
    stack = program_stack("dev", "python", {"driver.image": image}, remove=("driver.registry.create",))
    analyzer.configure(
        {
            names.DRIVER_IMAGE_DIGEST: {"production": True},
            names.DRIVER_IMAGE_DIGEST_ADVISORY: {"production": True},
        }
    )
    assert [d.policy for d in mandatory(analyzer.run(stack))] == [names.DRIVER_IMAGE_DIGEST]


def test_broken_resource_is_named_by_urn(analyzer: PackProcess) -> None:
    broken = program_stack("dev", "python").mutated(k8s_133)
    (diag,) = mandatory(analyzer.run(broken))
    assert diag.urn == broken.one(CLUSTER).urn


def test_password_secret_in_the_program_passes(analyzer: PackProcess) -> None:
    stack = program_stack(
        "prod", "python", secrets={"nodePool.password": PASSWORD}, remove=("nodePool.keyPairName",)
    )
    assert mandatory(analyzer.run(stack)) == []


def _preview(s: Stack) -> None:
    """What a first preview sends: ids, computed names and the kubeconfig are not known yet."""
    unknown = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
    s.one(POOL).props["clusterId"] = unknown
    for res in s:
        if res.type == RUNTIME or res.type.endswith(":NodeReadinessGate"):
            res.props["node_pool_id"] = unknown
            res.props["cluster_id"] = unknown
        if res.type == pt.K8S_PROVIDER:
            res.props["kubeconfig"] = secret(unknown)
    s.one(RELEASE).props["namespace"] = unknown
    s.one(pt.STACK).props.update(clusterId=unknown, nodePoolId=unknown, kubeconfig=secret(unknown))


@pytest.mark.parametrize("implementation", ["python", "nvidia"])
def test_first_preview_with_unknowns_passes_without_notes(analyzer: PackProcess, implementation: str) -> None:
    diags = analyzer.run(program_stack("prod", implementation).mutated(_preview))
    assert mandatory(diags) == []
    assert not [d for d in diags if "during preview" in d.message]


def _engine_preview_outputs(res: SimRes) -> dict[str, object]:
    """What the real engine hands AnalyzeStack in a first preview of a stack that creates its cluster: no
    properties for the Kubernetes objects (their provider's kubeconfig is not known yet, and the engine
    answers their Create preview with an empty map), the inputs of the rest."""
    return {} if res.type.startswith("kubernetes:") and res.type != pt.K8S_PROVIDER else res.props


def test_first_preview_stack_policies_check_the_inputs_of_objects_without_outputs(
    analyzer: PackProcess,
) -> None:
    diags = analyzer.run(program_stack("prod", "python").mutated(_preview), outputs=_engine_preview_outputs)
    assert mandatory(diags) == []


def test_first_preview_without_outputs_still_finds_a_bad_device_class(analyzer: PackProcess) -> None:
    def broken(s: Stack) -> None:
        _preview(s)
        gpu_class_selects_everything(s)

    stack = program_stack("dev", "python").mutated(broken)
    diags = mandatory(analyzer.run(stack, outputs=_engine_preview_outputs))
    assert [d.policy for d in diags] == [names.DEVICE_CLASSES]
    assert "also select a MIG device" in diags[0].message


def test_unknown_version_in_preview_hides_nothing_else(analyzer: PackProcess) -> None:
    def broken(s: Stack) -> None:
        _preview(s)
        s.one(CLUSTER).props["kubernetesVersion"] = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
        s.one(RUNTIME).props["runtime_version"] = "2.0"

    diags = mandatory(analyzer.run(program_stack("dev", "python").mutated(broken)))
    assert [d.policy for d in diags] == [names.NODE_POOL_RUNTIME]


def test_after_up_the_cluster_keeps_its_kubeconfig_outputs_secret(analyzer: PackProcess) -> None:
    diags = analyzer.run(program_stack("dev", "python").mutated(after_up))
    assert mandatory(diags) == []


def test_after_up_a_plaintext_cluster_kubeconfig_is_the_only_violation(analyzer: PackProcess) -> None:
    def plain_outputs(s: Stack) -> None:
        s.one(CLUSTER).additional_secret_outputs = []
        after_up(s)

    diags = mandatory(analyzer.run(program_stack("prod", "nvidia").mutated(plain_outputs)))
    cluster_secret = [d for d in diags if "kubeconfigPublic" in d.message or "kubeconfigPrivate" in d.message]
    assert [d.policy for d in diags] == [names.SECRETS, names.SECRETS]
    assert len(cluster_secret) == 2 and all("additional_secret_outputs" in d.message for d in diags)


# --- policy config over the Analyzer API ---


def test_policies_publish_their_config_schema(analyzer: PackProcess) -> None:
    schemas = {p.name: set(p.configSchema.properties.keys()) for p in analyzer.info().policies}
    assert schemas[names.NODE_POOL_INSTANCE_TYPES] == {"extraGpuInstanceTypes"}
    assert schemas[names.NO_DEVICE_PLUGIN] == {"forbiddenAddons"}
    assert schemas[names.PRODUCTION_PROTECTION] == {"production"}


def test_extra_gpu_instance_types_from_config(analyzer: PackProcess) -> None:
    stack = program_stack("dev", "python", {"nodePool.instanceTypes": json.dumps(["ecs.g3i.2xlarge"])})
    extra = {"extraGpuInstanceTypes": ["ecs.g3i.*"]}
    analyzer.configure({names.NODE_POOL_INSTANCE_TYPES: extra})
    assert mandatory(analyzer.run(stack)) == []


def test_gpu_instance_types_from_the_stack_configs_catalog_rows(analyzer: PackProcess) -> None:
    rows = {"ecs.newgpu.8xlarge": {"product": "NVIDIA A10", "gpus": 1, "source": "console"}}
    config = {
        "nodePool.instanceTypes": json.dumps(["ecs.newgpu.8xlarge"]),
        "gpuInstanceTypes": json.dumps(rows),
    }
    assert mandatory(analyzer.run(program_stack("dev", "python", config))) == []
    without_rows = program_stack(
        "dev", "python", {"nodePool.instanceTypes": config["nodePool.instanceTypes"]}
    )
    found = mandatory(analyzer.run(without_rows))
    assert names.NODE_POOL_INSTANCE_TYPES in {d.policy for d in found}


def test_forbidden_add_ons_from_config(analyzer: PackProcess) -> None:
    def volcano_addon(s: Stack) -> None:
        device_plugin_addon(s)
        s[-1].props["name"] = "volcano-gpu-share"

    stack = program_stack("dev", "python").mutated(volcano_addon)
    assert mandatory(analyzer.run(stack)) == []
    analyzer.configure({names.NO_DEVICE_PLUGIN: {"forbiddenAddons": ["volcano-gpu-share"]}})
    assert [d.policy for d in mandatory(analyzer.run(stack))] == [names.NO_DEVICE_PLUGIN]


def test_production_from_policy_config_and_enforcement_levels(analyzer: PackProcess) -> None:
    dev = program_stack("dev", "python")
    analyzer.configure({names.PRODUCTION_PROTECTION: {"production": True}})
    found = mandatory(analyzer.run(dev))
    assert {d.policy for d in found} == {names.PRODUCTION_PROTECTION} and len(found) == 2  # cluster and pool
    for d in found:  # the remedy is the stack setting a user sets, not code
        assert "pulumi config set --stack dev production true" in d.message, d.message
        assert "ResourceOptions" not in d.message
    analyzer.configure({names.PRODUCTION_PROTECTION: {"production": True, "enforcementLevel": "advisory"}})
    assert mandatory(analyzer.run(dev)) == []
    analyzer.configure({names.KUBERNETES_VERSION: {"enforcementLevel": "disabled"}})
    assert mandatory(analyzer.run(dev.mutated(k8s_133))) == []


@pytest.mark.parametrize("value", ["yes", "1", "on", "treu", "TRUE"])
def test_production_value_pulumi_does_not_read_as_a_boolean_is_a_violation(
    analyzer: PackProcess, value: str
) -> None:
    # The program rejects these values (vke_gpu_dra_core.config); the pack reads them with the same parser
    # instead of its own truthiness, which took "yes" for false and let an unprotected cluster through.
    dev = program_stack("dev", "python")
    dev.config[f"{PROJECT}:production"] = value
    found = mandatory(analyzer.run(dev))
    assert {d.policy for d in found} == {names.PRODUCTION_PROTECTION} and len(found) == 2  # cluster and pool
    for d in found:
        assert f"{PROJECT}:production = {value!r}: allowed: true or false" in d.message


@pytest.mark.parametrize(("value", "violations"), [("true", 2), ("True", 2), ("false", 0), ("False", 0)])
def test_production_values_pulumi_accepts(analyzer: PackProcess, value: str, violations: int) -> None:
    dev = program_stack("dev", "python")  # cluster and pool unprotected
    dev.config[f"{PROJECT}:production"] = value
    assert len(mandatory(analyzer.run(dev))) == violations
