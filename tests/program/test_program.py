"""The whole program under mocks, for every example stack and the important variants."""

from __future__ import annotations

import base64
import re
import shlex
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core.versions import format_version

from components import config as config_mod
from components import driver as driver_mod
from components import manifests
from components.node_pool import POOL_LABEL_KEY
from tests.program import harness

STACKS = ("dev", "prod", "local")
PROCEDURE_INSTALL = Path(__file__).parent / "data" / "procedure-helm-install.txt"

CLUSTER = pt.CLUSTER
NODE_POOL = pt.NODE_POOL
KUBECONFIG = pt.KUBECONFIG
RUNTIME = pt.NODE_POOL_RUNTIME
GATE = pt.NODE_READINESS_GATE
RELEASE = pt.HELM_RELEASE
NAMESPACE = pt.NAMESPACE
DEVICE_CLASS = pt.DEVICE_CLASS
CLAIM_TEMPLATE = pt.RESOURCE_CLAIM_TEMPLATE
DEPLOYMENT = pt.DEPLOYMENT
K8S_PROVIDER = pt.K8S_PROVIDER
VOLC_PROVIDER = "pulumi:providers:volcengine"


class StackRuns(dict):
    """Runs an example stack the first time a test asks for it (inside that test)."""

    def __missing__(self, stack: str) -> harness.ProgramRun:
        self[stack] = harness.run_stack(stack)
        return self[stack]


@pytest.fixture
def runs() -> StackRuns:
    """Per test: each run calls set_mocks itself and builds the program inside the test."""
    return StackRuns()


# --- helpers -------------------------------------------------------------------------------


def helm_set(values: dict[str, Any], path: str, raw: str) -> None:
    """Helm's --set for the forms the procedure uses (a.b[0].c=v; null/true/false typed)."""
    value: Any = {"null": None, "true": True, "false": False}.get(raw, raw)
    tokens = [(m.group(1), m.group(2)) for m in re.finditer(r"([^.\[\]]+)(?:\[(\d+)\])?", path)]
    node: Any = values
    for i, (key, index) in enumerate(tokens):
        last = i == len(tokens) - 1
        if index is None:
            if last:
                node[key] = value
            else:
                node = node.setdefault(key, {})
            continue
        items = node.setdefault(key, [])
        idx = int(index)
        while len(items) <= idx:
            items.append({} if not last else None)
        if last:
            items[idx] = value
        else:
            node = items[idx]


def procedure_install() -> tuple[dict[str, Any], dict[str, str]]:
    """Values and flags of the procedure's `helm install` command."""
    words = shlex.split(PROCEDURE_INSTALL.read_text().split("\nhelm repo add")[0].replace("\\\n", " "))
    values: dict[str, Any] = {}
    flags: dict[str, str] = {"release": words[2], "chart": words[3]}
    i = 4
    while i < len(words):
        word = words[i]
        if word == "--set":
            path, _, raw = words[i + 1].partition("=")
            helm_set(values, path, raw)
            i += 2
        elif word.startswith("--version="):
            flags["version"] = word.split("=", 1)[1]
            i += 1
        elif word == "--namespace":
            flags["namespace"] = words[i + 1]
            i += 2
        else:
            i += 1
    repo = PROCEDURE_INSTALL.read_text().split("helm repo add ")[1].split()
    flags["repo"] = repo[1]
    return values, flags


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """The provider's merge of values files and `values` (maps recurse, everything else replaces)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def effective_values(release: harness.Registered) -> dict[str, Any]:
    base: dict[str, Any] = {}
    for asset in release.inputs.get("valueYamlFiles") or []:
        base = merge(base, yaml.safe_load(asset.text))
    return merge(base, harness.api_json(release, "", "")["values"])


def k8s_provider_urn(run: harness.ProgramRun) -> str:
    return run.one(K8S_PROVIDER).urn


# --- every stack ----------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_every_kubernetes_resource_uses_the_explicit_provider(runs: dict, stack: str) -> None:
    run = runs[stack]
    provider = k8s_provider_urn(run)
    k8s_resources = run.with_prefix(pt.KUBERNETES_PREFIX)
    assert len(k8s_resources) >= 5
    for r in k8s_resources:
        assert r.provider_urn == provider, (r.type, r.name, r.provider)
    assert "kubeconfig" in run.one(K8S_PROVIDER).secret_inputs or stack == "local"


@pytest.mark.parametrize("stack", ("dev", "prod"))
def test_every_volcengine_resource_uses_the_explicit_provider(runs: dict, stack: str) -> None:
    run = runs[stack]
    provider = run.one(VOLC_PROVIDER)
    assert provider.inputs["region"] == "cn-beijing"
    for r in run.with_prefix("volcengine:"):
        assert r.provider_urn == provider.urn, (r.type, r.name)


@pytest.mark.parametrize("stack", STACKS)
def test_stack_files_disable_default_kubernetes_provider(stack: str) -> None:
    disabled = harness.stack_file_config(stack)["pulumi:disable-default-providers"]
    assert "kubernetes" in disabled
    assert stack == "local" or "volcengine" in disabled


@pytest.mark.parametrize("stack", STACKS)
def test_kubernetes_manifests_pass_strict_schema_validation(runs: dict, stack: str) -> None:
    kinds = {
        NAMESPACE: ("v1", "Namespace"),
        DEVICE_CLASS: ("resource.k8s.io/v1", "DeviceClass"),
        CLAIM_TEMPLATE: ("resource.k8s.io/v1", "ResourceClaimTemplate"),
        DEPLOYMENT: ("apps/v1", "Deployment"),
    }
    checked = 0
    for r in runs[stack].resources:
        if r.type in kinds:
            body = harness.api_json(r, *kinds[r.type])
            kubernetes_validate.validate(body, desired_version="1.34", strict=True)
            checked += 1
    assert checked >= 4


def test_strict_validation_rejects_a_broken_manifest(runs: dict) -> None:
    body = harness.api_json(runs["dev"].one(DEPLOYMENT), "apps/v1", "Deployment")
    body["spec"]["template"]["spec"]["resourceClaims"][0]["templateName"] = "single-gpu"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(body, desired_version="1.34", strict=True)


# --- VKE stacks -----------------------------------------------------------------------------


def test_dev_creates_network_cluster_and_gpu_pool(runs: dict) -> None:
    run = runs["dev"]
    types = {r.type for r in run.resources}
    for t in (
        "volcengine:vpc/vpc:Vpc",
        "volcengine:vpc/subnet:Subnet",
        "volcengine:vpc/securityGroup:SecurityGroup",
        pt.SECURITY_GROUP_RULE,
        "volcengine:nat/gateway:Gateway",
        "volcengine:eip/address:Address",
        "volcengine:eip/associate:Associate",
        "volcengine:nat/snatEntry:SnatEntry",
        CLUSTER,
        KUBECONFIG,
        NODE_POOL,
        RUNTIME,
        GATE,
    ):
        assert t in types, t
    assoc = run.one("volcengine:eip/associate:Associate")
    assert assoc.inputs["instanceType"] == "Nat"
    snat = run.one("volcengine:nat/snatEntry:SnatEntry")
    assert run.depends_on(snat, assoc)
    rules = {(r.inputs["direction"], r.inputs["cidrIp"]) for r in run.by_type(pt.SECURITY_GROUP_RULE)}
    assert rules == {("ingress", "192.168.0.0/16"), ("egress", "0.0.0.0/0")}


def test_cluster_inputs(runs: dict) -> None:
    cluster = runs["dev"].one(CLUSTER).inputs
    assert cluster["name"] == "vke-gpu-dra-dev"
    assert cluster["kubernetesVersion"] == "1.34"
    assert cluster["podsConfig"]["podNetworkMode"] == "VpcCniShared"
    assert cluster["servicesConfig"] == {"serviceCidrsv4s": ["172.30.0.0/18"]}
    assert cluster["clusterConfig"]["apiServerPublicAccessEnabled"] is True
    assert cluster["clusterConfig"]["subnetIds"] == ["network-subnet-cn-beijing-a-id"]
    kubeconfig = runs["dev"].one(KUBECONFIG).inputs
    assert kubeconfig["type"] == "Public"


def test_kubeconfig_comes_from_get_kubeconfigs_decoded_and_secret(runs: dict) -> None:
    run = runs["dev"]
    vke_invokes = [(t, args) for t, args in run.invokes if t.startswith("volcengine:vke/")]
    assert [t for t, _ in vke_invokes] == [harness.KUBECONFIG_INVOKE]
    assert vke_invokes[0][1]["ids"] == [run.one(KUBECONFIG).id]
    assert run.exports["kubeconfig"] == harness.FAKE_KUBECONFIG
    assert "kubeconfig" in run.secret_exports
    assert run.one(K8S_PROVIDER).inputs["kubeconfig"] == harness.FAKE_KUBECONFIG


def test_cluster_kubeconfig_outputs_are_secret_in_state(runs: dict) -> None:
    for stack in ("dev", "prod"):
        cluster = runs[stack].one(CLUSTER)
        assert set(cluster.additional_secret_outputs) == {"kubeconfigPublic", "kubeconfigPrivate"}


def test_node_pool_inputs(runs: dict) -> None:
    pool = runs["dev"].one(NODE_POOL).inputs
    assert pool["name"] == "gpu-dra-dev"
    node = pool["nodeConfig"]
    assert node["instanceTypeIds"] == ["ecs.gni2.3xlarge"]
    assert node["subnetIds"] == ["network-subnet-cn-beijing-a-id"]
    assert node["security"]["securityGroupIds"] == ["network-nodes-id"]
    assert node["security"]["login"] == {"sshKeyPairName": "vke-gpu-dra-dev"}
    assert node["systemVolume"] == {"type": "ESSD_PL0", "size": 100}
    assert node["dataVolumes"] == [{"type": "ESSD_PL0", "size": 200}]
    kc = pool["kubernetesConfig"]
    assert kc["cordon"] is False
    labels = {lb["key"]: lb["value"] for lb in kc["labels"]}
    assert labels == {**facts.REQUIRED_NODE_LABELS, POOL_LABEL_KEY: "gpu-dra-dev"}
    assert pool["autoScaling"] == {"enabled": True, "minReplicas": 0, "desiredReplicas": 0, "maxReplicas": 1}
    # The Terraform provider's UpdateNodePoolConfig sends every autoScaling field (ForceGet) as soon as one
    # changes: a NodePool update for maxReplicas alone would send minReplicas/desiredReplicas 0 (its
    # ignored creation values) and empty the pool. NodePoolRuntime owns all three after creation.
    assert set(runs["dev"].one(NODE_POOL).ignore_changes) == {
        "autoScaling.minReplicas",
        "autoScaling.desiredReplicas",
        "autoScaling.maxReplicas",
    }


def test_runtime_pin_and_scaling(runs: dict) -> None:
    run = runs["prod"]
    runtime = run.one(RUNTIME)
    assert runtime.inputs["runtime_type"] == "containerd"
    assert runtime.inputs["runtime_version"] == "2.1"
    assert (
        runtime.inputs["min_replicas"],
        runtime.inputs["desired_replicas"],
        runtime.inputs["max_replicas"],
    ) == (2, 2, 8)
    assert runtime.inputs["node_pool_id"] == run.one(NODE_POOL).id
    assert run.depends_on(runtime, run.one(NODE_POOL))
    assert "__provider" in runtime.secret_inputs
    gate = run.one(GATE)
    assert gate.inputs["expected_nodes"] == 2
    assert gate.inputs["label_selector"] == (
        f"{facts.LABEL_GPU_SCHEDULE}={facts.LABEL_GPU_SCHEDULE_DRA},{POOL_LABEL_KEY}=gpu-dra-prod"
    )
    assert gate.inputs["min_containerd"] == format_version(facts.MIN_CONTAINERD_VERSION)
    assert "kubeconfig" in gate.secret_inputs
    assert run.depends_on(gate, runtime)


def test_credentials_for_the_runtime_pin_are_secret() -> None:
    run = harness.run_stack(
        "dev", secrets={"volcengine:accessKey": "AKLT-test", "volcengine:secretKey": "sk"}
    )
    runtime = run.one(RUNTIME)
    assert runtime.inputs["access_key"] == "AKLT-test"
    assert {"access_key", "secret_key"} <= runtime.secret_inputs
    assert {"accessKey", "secretKey"} <= run.one(VOLC_PROVIDER).secret_inputs


def test_credentials_from_the_environment_are_secret_in_the_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """VOLCENGINE_ACCESS_KEY / VOLCENGINE_SECRET_KEY instead of config: the program reads them and hands
    them to the provider as secrets. Left unset, pulumi_volcengine's Provider would read them itself and
    keep them in the state in plaintext (the pack's secrets policy then fails the real preview)."""
    env = {"VOLCENGINE_ACCESS_KEY": "AKLT-env", "VOLCENGINE_SECRET_KEY": "sk-env"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    raw = harness.stack_raw_config("dev")
    run = harness.run_program(config_mod.RawConfig(raw.values, raw.secret_keys, environ=env), stack="dev")
    provider = run.one(VOLC_PROVIDER)
    assert (provider.inputs["accessKey"], provider.inputs["secretKey"]) == ("AKLT-env", "sk-env")
    assert {"accessKey", "secretKey"} <= provider.secret_inputs
    assert {"access_key", "secret_key"} <= run.one(RUNTIME).secret_inputs


def test_password_login_is_base64_and_secret() -> None:
    run = harness.run_stack(
        "dev", remove=["nodePool.keyPairName"], secrets={"nodePool.password": "S3cret!pass"}
    )
    pool = run.one(NODE_POOL)
    login = pool.inputs["nodeConfig"]["security"]["login"]
    assert login == {"password": base64.b64encode(b"S3cret!pass").decode()}
    assert "nodeConfig" in pool.secret_inputs


def test_ordering_driver_after_pool_and_gate_workload_after_driver(runs: dict) -> None:
    run = runs["dev"]
    release = run.one(RELEASE)
    for dep in (run.one(NODE_POOL), run.one(RUNTIME), run.one(GATE), run.one(NAMESPACE, "dra-driver")):
        assert run.depends_on(release, dep), dep.name
    for r in (run.one(CLAIM_TEMPLATE), run.one(DEPLOYMENT)):
        assert run.depends_on(r, release), r.name
    assert run.depends_on(run.one(DEPLOYMENT), run.one(CLAIM_TEMPLATE))
    for dc in run.by_type(DEVICE_CLASS):
        assert run.depends_on(dc, run.one(GATE))
        assert run.depends_on(run.one(DEPLOYMENT), dc)


def test_prod_protects_cluster_and_node_pool(runs: dict) -> None:
    for stack, expected in (("prod", True), ("dev", False)):
        run = runs[stack]
        assert run.one(CLUSTER).protect is expected
        assert run.one(NODE_POOL).protect is expected
    prod = runs["prod"]
    assert prod.one(CLUSTER).inputs["deleteProtectionEnabled"] is True
    assert len(prod.by_type("volcengine:nat/snatEntry:SnatEntry")) == 3


def test_existing_network_creates_no_network_resources() -> None:
    run = harness.run_stack(
        "dev",
        {
            "network.existingVpcId": "vpc-1",
            "network.existingSubnetIds": ["subnet-1"],
            "network.existingSecurityGroupId": "sg-1",
        },
    )
    assert not [
        r
        for r in run.resources
        if r.type.startswith(("volcengine:vpc/", "volcengine:nat/", "volcengine:eip/"))
    ]
    node = run.one(NODE_POOL).inputs["nodeConfig"]
    assert node["subnetIds"] == ["subnet-1"]
    assert node["security"]["securityGroupIds"] == ["sg-1"]
    assert run.one(CLUSTER).inputs["podsConfig"]["vpcCniConfig"] == {
        "subnetIds": ["subnet-1"],
        "vpcId": "vpc-1",
    }


def test_flannel_pods_and_their_security_group_rule() -> None:
    run = harness.run_stack("dev", {"cluster.podNetworkMode": "Flannel"})
    pods = run.one(CLUSTER).inputs["podsConfig"]
    assert pods == {
        "podNetworkMode": "Flannel",
        "flannelConfig": {"podCidrs": ["172.20.0.0/16"], "maxPodsPerNode": 64},
    }
    cidrs = {r.inputs["cidrIp"] for r in run.by_type(pt.SECURITY_GROUP_RULE)}
    assert "172.20.0.0/16" in cidrs


# --- driver ---------------------------------------------------------------------------------


def test_python_driver_uses_local_chart_and_program_device_classes(runs: dict) -> None:
    run = runs["dev"]
    release = run.one(RELEASE)
    assert release.inputs["chart"] == "./driver/chart"
    assert release.inputs["name"] == facts.NVIDIA_CHART
    assert release.inputs["namespace"] == facts.DRIVER_NAMESPACE
    values = effective_values(release)
    assert values["deviceClasses"] == {"enabled": False}
    assert values["driverName"] == facts.DRIVER_NAME
    assert values["deviceSource"]["type"] == "nvml"
    assert values["nvidiaDriverRoot"] == "/"
    assert values["kubeletPlugin"]["affinity"] == procedure_install()[0]["kubeletPlugin"]["affinity"]
    classes = {r.inputs["metadata"]["name"]: r.inputs["spec"] for r in run.by_type(DEVICE_CLASS)}
    assert classes == {
        spec.name: {"selectors": [{"cel": {"expression": spec.cel_expression}}]}
        for spec in facts.DEVICE_CLASSES
    }
    assert run.exports["deviceClassNames"] == [spec.name for spec in facts.DEVICE_CLASSES]


def test_nvidia_driver_values_equal_the_procedure() -> None:
    run = harness.run_stack("dev", {"driver.implementation": "nvidia"})
    release = run.one(RELEASE)
    expected_values, flags = procedure_install()
    assert expected_values["controller"] == {"affinity": None}
    assert effective_values(release) == expected_values
    # the null travels in a values file: the Python SDK drops None from inline values
    assert "controller" not in harness.api_json(release, "", "")["values"]
    assert "allowNullValues" not in release.inputs  # deprecated: nulls in values files are kept
    assert flags["chart"] == f"nvidia/{release.inputs['chart']}"
    assert release.inputs["version"] == flags["version"] == "25.8.1"
    assert release.inputs["repositoryOpts"] == {"repo": flags["repo"]}
    assert release.inputs["name"] == flags["release"]
    assert release.inputs["namespace"] == flags["namespace"] == facts.DRIVER_NAMESPACE
    # NVIDIA's chart renders the DeviceClasses itself
    assert run.by_type(DEVICE_CLASS) == []
    assert run.exports["deviceClassNames"] == [spec.name for spec in facts.DEVICE_CLASSES]
    assert run.depends_on(run.one(DEPLOYMENT), release)


def test_helm_set_parser_reads_nulls_and_lists() -> None:
    values: dict[str, Any] = {}
    helm_set(values, ["a.b[0].c[0]", "x"][0], "x")
    helm_set(values, "d", "null")
    assert values == {"a": {"b": [{"c": ["x"]}]}, "d": None}


def test_driver_values_from_config_and_taints() -> None:
    run = harness.run_stack(
        "dev",
        {
            "driver.image": "mycr-cn-beijing.cr.volces.com/vke/dra-driver:0.1.0",
            "driver.imagePullSecrets": ["regcred"],
            "nodePool.taints": ["nvidia.com/gpu=present:NoSchedule"],
        },
    )
    values = effective_values(run.one(RELEASE))
    assert values["image"] == {
        "repository": "mycr-cn-beijing.cr.volces.com/vke/dra-driver",
        "tag": "0.1.0",
        "pullPolicy": "IfNotPresent",
    }
    assert values["imagePullSecrets"] == [{"name": "regcred"}]
    toleration = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
    assert values["kubeletPlugin"]["tolerations"] == [toleration]
    pod = run.one(DEPLOYMENT).inputs["spec"]["template"]["spec"]
    assert pod["tolerations"] == [toleration]
    taints = run.one(NODE_POOL).inputs["kubernetesConfig"]["taints"]
    assert taints == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


def test_driver_namespace(runs: dict) -> None:
    ns = runs["dev"].one(NAMESPACE, "dra-driver").inputs["metadata"]
    assert ns["name"] == facts.DRIVER_NAMESPACE
    assert ns["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert runs["dev"].exports["driverNamespace"] == facts.DRIVER_NAMESPACE


# --- sample -----------------------------------------------------------------------------------


def test_sample_matches_the_procedure(runs: dict) -> None:
    run = runs["dev"]
    rct = harness.api_json(run.one(CLAIM_TEMPLATE), "resource.k8s.io/v1", "ResourceClaimTemplate")
    assert rct["metadata"] == {"name": "single-gpu", "namespace": "default"}
    assert rct["spec"]["spec"]["devices"]["requests"] == [
        {
            "name": "gpu",
            "exactly": {
                "deviceClassName": facts.DEVICE_CLASS_GPU.name,
                "allocationMode": "ExactCount",
                "count": 1,
            },
        }
    ]
    dep = harness.api_json(run.one(DEPLOYMENT), "apps/v1", "Deployment")
    assert dep["metadata"] == {"name": "gpu-test", "namespace": "default"}
    assert dep["spec"]["replicas"] == 1
    pod = dep["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 3
    assert pod["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]
    (container,) = pod["containers"]
    assert container["image"] == "doc-cn-beijing.cr.volces.com/vke/gpu-burn:1.0"
    assert container["command"] == ["sh"]
    assert container["args"] == ["-c", "nvidia-smi -L; sleep 600"]
    assert container["resources"] == {"claims": [{"name": "gpu"}]}
    assert run.exports["sample"] == {
        "namespace": "default",
        "resourceClaimTemplate": "single-gpu",
        "deployment": "gpu-test",
    }


def test_sample_in_its_own_namespace(runs: dict) -> None:
    run = runs["prod"]
    ns = run.one(NAMESPACE, "sample")
    assert ns.inputs["metadata"]["name"] == "gpu-samples"
    assert run.depends_on(run.one(CLAIM_TEMPLATE), ns)
    assert run.one(DEPLOYMENT).inputs["metadata"]["namespace"] == "gpu-samples"


def test_driver_root_reaches_the_chart() -> None:
    run = harness.run_stack("dev", {"driver.nvidiaDriverRoot": "/run/nvidia/driver"})
    assert effective_values(run.one(RELEASE))["nvidiaDriverRoot"] == "/run/nvidia/driver"


def test_health_settings_reach_the_chart() -> None:
    assert effective_values(harness.run_stack("dev").one(RELEASE))["health"] == {
        "additionalXidsToIgnore": "",
        "recoveryWindowSeconds": 300,
    }
    run = harness.run_stack(
        "dev", {"driver.additionalXidsToIgnore": "74,79", "driver.healthRecoveryWindowSeconds": 60}
    )
    assert effective_values(run.one(RELEASE))["health"] == {
        "additionalXidsToIgnore": "74,79",
        "recoveryWindowSeconds": 60,
    }


def test_sample_can_be_switched_off() -> None:
    run = harness.run_stack("dev", {"sample.enabled": False})
    assert run.by_type(DEPLOYMENT) == []
    assert run.by_type(CLAIM_TEMPLATE) == []
    assert "sample" not in run.exports


# --- local --------------------------------------------------------------------------------------


def test_local_creates_no_volcengine_resources(runs: dict) -> None:
    run = runs["local"]
    assert [r.type for r in run.resources if "volcengine" in r.type] == []
    assert run.invokes == []
    assert run.by_type(GATE) == []
    assert run.one(K8S_PROVIDER).inputs["kubeconfig"] == str(Path("~/.kube/config").expanduser())
    values = effective_values(run.one(RELEASE))
    assert values["deviceSource"] == {
        "type": "simulated",
        "simulatedGpus": 4,
        "simulatedProduct": "NVIDIA A30",
    }
    assert values["kubeletPlugin"]["affinity"] == manifests.any_node_affinity()
    assert "valueYamlFiles" not in run.one(RELEASE).inputs
    assert len(run.by_type(DEVICE_CLASS)) == 2
    assert "clusterId" not in run.exports
    assert "kubeconfig" not in run.exports


def test_local_with_secret_kubeconfig_text() -> None:
    run = harness.run_stack(
        "local", remove=["kubeconfigPath"], secrets={"kubeconfig": harness.FAKE_KUBECONFIG}
    )
    provider = run.one(K8S_PROVIDER)
    assert provider.inputs["kubeconfig"] == harness.FAKE_KUBECONFIG
    assert "kubeconfig" in provider.secret_inputs


# --- outputs ------------------------------------------------------------------------------------


def test_outputs(runs: dict) -> None:
    run = runs["dev"]
    assert run.exports["clusterId"] == run.one(CLUSTER).id
    assert run.exports["nodePoolId"] == run.one(NODE_POOL).id
    assert run.exports["driverImplementation"] == "python"
    commands = run.exports["verifyCommands"]
    for expected in (
        "kubectl api-resources | grep resource.k8s.io",
        f"kubectl get pods -n {facts.DRIVER_NAMESPACE} -o wide",
        "kubectl get deviceclass,resourceslice",
        "kubectl get resourceslice -o yaml",
        "kubectl get resourceclaimtemplates -n default",
        "kubectl get resourceclaims -n default",
        "kubectl describe resourceclaims -n default",
        "kubectl logs deployment/gpu-test -n default --all-pods=true",
    ):
        assert expected in commands


def test_chart_values_helpers_agree_with_the_release(runs: dict) -> None:
    chart = driver_mod.nvidia_values()
    assert chart.null_file() == "controller:\n  affinity: null\n"
    assert (
        effective_values(runs["dev"].one(RELEASE))["kubeletPlugin"]["affinity"]
        == chart.values["kubeletPlugin"]["affinity"]
    )


def test_harness_feeds_policy_resources(runs: dict) -> None:
    run = runs["dev"]
    resources = {r.urn: r for r in harness.to_policy_resources(run)}
    release = resources[run.one(RELEASE).urn]
    assert release.resource_type == RELEASE
    assert release.provider is not None and release.provider.urn == k8s_provider_urn(run)
    assert run.one(GATE).urn in {d.urn for d in release.dependencies}
    assert release.parent is not None and release.parent.resource_type == "vke-gpu-dra:index:DraDriver"
    assert resources[run.one(CLUSTER).urn].opts.protect is False
