"""Stack configuration: defaults, Pulumi.yaml agreement and one test per kind of bad value."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from vke_gpu_dra_core import config, facts, vke_releases
from vke_gpu_dra_core.config import RawConfig, StackConfigError
from vke_gpu_dra_core.versions import format_version

from components import config as program_config
from tests.program import harness

P = config.PROJECT


def raw(values: dict[str, Any], secrets: dict[str, str] | None = None, region: bool = True) -> RawConfig:
    """A minimal valid vke config (key pair login, a CR instance for the driver image) plus `values`."""
    base: dict[str, Any] = {"nodePool.keyPairName": "kp", "driver.registry.name": "cr-test"}
    base.update(values)
    plain = {(k if ":" in k else f"{P}:{k}"): v for k, v in base.items() if v is not None}
    if region:
        plain.setdefault("volcengine:region", "cn-beijing")
    r = config.raw_from_stack_file(plain)
    merged = dict(r.values)
    secret_keys = set(r.secret_keys)
    for k, v in (secrets or {}).items():
        full = k if ":" in k else f"{P}:{k}"
        merged[full] = v
        secret_keys.add(full)
    return RawConfig(values=merged, secret_keys=frozenset(secret_keys))


def problems(values: dict[str, Any], **kwargs: Any) -> list[config.Issue]:
    with pytest.raises(StackConfigError) as info:
        config.load(raw(values, **kwargs))
    return list(info.value.issues)


def only_issue(values: dict[str, Any], key: str, **kwargs: Any) -> config.Issue:
    issues = problems(values, **kwargs)
    assert [i.key for i in issues] == [key], issues
    return issues[0]


def test_defaults_are_valid_and_typed() -> None:
    cfg = config.load(raw({}))
    assert cfg.target == "vke"
    assert cfg.cluster.kubernetes_version == "1.34"
    assert cfg.node_pool.containerd_version == "2.1"
    assert cfg.driver.implementation == "python"
    assert cfg.sample.enabled is True
    assert cfg.sample.namespace == "default"
    assert cfg.node_pool.instance_types == ("ecs.gni2.3xlarge",)
    assert isinstance(cfg.node_pool.min_replicas, int)
    with pytest.raises(AttributeError):
        cfg.target = "other"  # type: ignore[misc]


def test_pulumi_yaml_declares_every_key_with_python_defaults() -> None:
    project = yaml.safe_load((harness.ROOT / "Pulumi.yaml").read_text())
    assert project["name"] == "vke-gpu-dra"
    assert project["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": ".venv"}}
    assert project["config"] == config.pulumi_yaml_config()
    for key, entry in project["config"].items():
        assert entry["type"] in ("string", "integer", "boolean", "array"), key
        assert entry["description"], key
        assert entry["default"] == config.KEYS_BY_NAME[key].default


def test_pulumi_yaml_defaults_load_to_the_same_config_as_python_defaults() -> None:
    """The CLI passes Pulumi.yaml defaults as config; they must mean what the Python defaults mean."""
    project = yaml.safe_load((harness.ROOT / "Pulumi.yaml").read_text())
    from_yaml = config.raw_from_stack_file(
        {f"{P}:{k}": v["default"] for k, v in project["config"].items()}
        | {
            f"{P}:nodePool.keyPairName": "kp",
            f"{P}:driver.registry.name": "cr-test",
            "volcengine:region": "cn-beijing",
        }
    )
    assert config.load(from_yaml) == config.load(raw({}))


def test_errors_are_collected_into_one_exception() -> None:
    issues = problems(
        {
            "cluster.kubernetesVersion": "1.33",
            "nodePool.containerdVersion": "1.7",
            "driver.implementation": "rust",
        }
    )
    assert {i.key for i in issues} == {
        "cluster.kubernetesVersion",
        "nodePool.containerdVersion",
        "driver.implementation",
    }
    with pytest.raises(StackConfigError) as info:
        config.load(raw({"cluster.kubernetesVersion": "1.33", "driver.implementation": "rust"}))
    message = str(info.value)
    assert "2 problem(s)" in message
    assert f"{P}:cluster.kubernetesVersion = '1.33': allowed: " in message
    assert f"{P}:driver.implementation = 'rust': allowed: one of python, nvidia" in message


def test_accepts_the_kubernetes_line_vke_documents() -> None:
    assert config.load(raw({"cluster.kubernetesVersion": "1.34"})).cluster.kubernetes_version == "1.34"


def test_the_default_line_is_documented_and_the_documented_lines_run_dra() -> None:
    assert vke_releases.DEFAULT in vke_releases.OFFERED
    assert vke_releases.NEWEST == (1, 34)
    assert all(line >= facts.MIN_KUBERNETES_VERSION for line in vke_releases.OFFERED)
    assert config.KEYS_BY_NAME["cluster.kubernetesVersion"].default == format_version(vke_releases.DEFAULT)
    assert config.KEYS_BY_NAME["cluster.forceKubernetesVersion"].default is False


@pytest.mark.parametrize("version", ["1.37", "1.38", "1.35"])
def test_a_line_vke_does_not_document_is_taken_when_forced(version: str) -> None:
    cfg = config.load(raw({"cluster.kubernetesVersion": version, "cluster.forceKubernetesVersion": True}))
    assert (cfg.cluster.kubernetes_version, cfg.cluster.force_kubernetes_version) == (version, True)


@pytest.mark.parametrize(
    ("version", "says"),
    [
        # older than DRA's minimum: refused, forced or not
        ("1.33", "(1.33 cannot run DRA, which needs 1.34 or later)"),
        ("1.4", "(1.4 cannot run DRA, which needs 1.34 or later)"),
        # a line written otherwise: the line is what to write, forced or not
        ("v1.37", "1.37, without the 'v'"),
        ("1.37.2", "1.37 exactly, the line alone: VKE runs the newest 1.37 build itself"),
        ("v1.37.2-vke.1", "1.37 exactly, the line alone"),
        (" 1.37", "1.37, without blanks around it"),
        # no version at all
        ("latest", "(e.g. 1.34)"),
    ],
)
def test_forcing_still_refuses_a_line_too_old_or_written_otherwise(version: str, says: str) -> None:
    issue = only_issue(
        {"cluster.kubernetesVersion": version, "cluster.forceKubernetesVersion": True},
        "cluster.kubernetesVersion",
    )
    assert (issue.value, says in issue.allowed) == (repr(version), True)


@pytest.mark.parametrize(
    ("version", "says"),
    [
        # lines VKE's docs do not list: older than DRA's minimum, listed but too old, newer
        ("1.33", "(1.33 cannot run DRA, which needs 1.34 or later)"),
        ("1.30", "(1.30 cannot run DRA, which needs 1.34 or later)"),
        ("1.4", "(1.4 cannot run DRA, which needs 1.34 or later)"),
        ("1.36", "(1.36 is not in VKE's docs, "),
        ("1.35", "(1.35 is not in VKE's docs, "),
        ("1.37", "(1.37 is not in VKE's docs, "),
        ("1.38", "(1.38 is not in VKE's docs, "),
        ("2.0", "(2.0 is not in VKE's docs, "),
        # a line written otherwise is told its form first (one issue at a time for the one key)
        ("v1.37", "1.37, without the 'v'"),
        ("1.37.2", "1.37 exactly, the line alone"),
        # the documented line written otherwise: the line is what to write
        ("v1.34", "1.34, without the 'v'"),
        ("1.34.2", "1.34 exactly, the line alone: VKE runs the newest 1.34 build itself"),
        ("v1.34.2-vke.3", "1.34 exactly, the line alone"),
        (" 1.34", "1.34, without blanks around it"),
        # no version at all
        ("latest", "(e.g. 1.34)"),
        ("", "(e.g. 1.34)"),
    ],
)
def test_refuses_lines_vke_does_not_document_with_one_issue(version: str, says: str) -> None:
    issue = only_issue({"cluster.kubernetesVersion": version}, "cluster.kubernetesVersion")
    assert issue.value == repr(version)
    assert says in issue.allowed


def test_a_refused_line_is_one_message_naming_key_value_the_documented_lines_and_the_force_key() -> None:
    with pytest.raises(StackConfigError) as info:
        config.load(raw({"cluster.kubernetesVersion": "1.37"}))
    assert "1 problem(s)" in str(info.value)
    assert str(info.value).endswith(
        f"{P}:cluster.kubernetesVersion = '1.37': allowed: one of the Kubernetes lines VKE documents for "
        f"DRA, major.minor: 1.34 (1.37 is not in VKE's docs, {vke_releases.VKE_DOCS.source}, checked "
        f"{vke_releases.VKE_DOCS.checked}; cluster.forceKubernetesVersion=true asks VKE for it anyway; a "
        "cluster of our own takes target=existing-cluster)"
    )


@pytest.mark.parametrize("line", [*(format_version(v) for v in vke_releases.OWN_CLUSTERS), "1.36"])
def test_an_existing_cluster_may_run_another_line(line: str) -> None:
    """target=existing-cluster creates no VKE cluster: the key names the cluster's line (our own clusters'
    1.37 and 1.38, kind's 1.36), with no force key."""
    cfg = config.load(harness.stack_raw_config("local", {"cluster.kubernetesVersion": line}))
    assert (cfg.cluster.kubernetes_version, cfg.cluster.force_kubernetes_version) == (line, False)


@pytest.mark.parametrize("version", ["2.0", "1.7.27", "1.6", "containerd-2.1", ""])
def test_rejects_containerd_below_2_1(version: str) -> None:
    issue = only_issue({"nodePool.containerdVersion": version}, "nodePool.containerdVersion")
    assert f"{format_version(facts.MIN_CONTAINERD_VERSION)} or later" in issue.allowed


def test_accepts_containerd_2_1_patch_and_later() -> None:
    assert config.load(raw({"nodePool.containerdVersion": "2.1.4"})).node_pool.containerd_version == "2.1.4"
    assert config.load(raw({"nodePool.containerdVersion": "2.2"})).node_pool.containerd_version == "2.2"


def test_rejects_empty_instance_types() -> None:
    issue = only_issue({"nodePool.instanceTypes": []}, "nodePool.instanceTypes")
    assert "at least one GPU ECS instance type" in issue.allowed


def test_rejects_empty_instance_type_entry() -> None:
    issue = only_issue({"nodePool.instanceTypes": [""]}, "nodePool.instanceTypes")
    assert issue.value == "''"
    assert "non-empty ECS instance type" in issue.allowed


def test_rejects_min_above_max() -> None:
    issue = only_issue(
        {"nodePool.minReplicas": 3, "nodePool.maxReplicas": 2, "nodePool.desiredReplicas": 2},
        "nodePool.minReplicas",
    )
    assert issue.value == "3"
    assert "at most nodePool.maxReplicas (2)" in issue.allowed


@pytest.mark.parametrize("desired", [0, 5])
def test_rejects_desired_outside_min_max(desired: int) -> None:
    issue = only_issue(
        {"nodePool.minReplicas": 1, "nodePool.maxReplicas": 4, "nodePool.desiredReplicas": desired},
        "nodePool.desiredReplicas",
    )
    assert issue.value == str(desired)
    assert "between nodePool.minReplicas (1) and nodePool.maxReplicas (4)" in issue.allowed


@pytest.mark.parametrize("name", ["gpu-dra-", "gpu-池", "g" * 64])
def test_rejects_pool_names_that_are_not_label_values(name: str) -> None:
    """The pool's name is the value of the node label the readiness gate selects on (63 chars, ASCII)."""
    issue = only_issue({"nodePool.name": name}, "nodePool.name")
    assert "Kubernetes label value" in issue.allowed


def test_rejects_unknown_implementation() -> None:
    issue = only_issue({"driver.implementation": "rust"}, "driver.implementation")
    assert issue.allowed == "one of python, nvidia"


def test_rejects_schedule_label_other_than_nvidia_dra() -> None:
    issue = only_issue({"nodePool.labels": ["vke.node.gpu.schedule=nvidia"]}, "nodePool.labels")
    assert issue.value == "'vke.node.gpu.schedule=nvidia'"
    assert f"{facts.LABEL_GPU_SCHEDULE}={facts.LABEL_GPU_SCHEDULE_DRA}" in issue.allowed


def test_rejects_gpu_present_label_other_than_true() -> None:
    issue = only_issue({"nodePool.labels": ["nvidia.com/gpu.present=false"]}, "nodePool.labels")
    assert f"{facts.LABEL_GPU_PRESENT}={facts.LABEL_GPU_PRESENT_VALUE}" in issue.allowed


def test_rejects_malformed_label_and_taint() -> None:
    issues = problems({"nodePool.labels": ["no-equals-sign"], "nodePool.taints": ["gpu=yes:Sometimes"]})
    assert [(i.key, i.value) for i in issues] == [
        ("nodePool.labels", "'no-equals-sign'"),
        ("nodePool.taints", "'gpu=yes:Sometimes'"),
    ]
    assert "NoSchedule, NoExecute, PreferNoSchedule" in issues[1].allowed


def test_user_labels_and_taints_are_parsed_and_dra_labels_always_present() -> None:
    cfg = config.load(
        raw(
            {
                "nodePool.labels": ["team=ml", "vke.node.gpu.schedule=nvidia-dra"],
                "nodePool.taints": ["gpu=true:NoSchedule", "dedicated:NoExecute"],
            }
        )
    )
    labels = [(lb.key, lb.value) for lb in cfg.node_pool.all_labels]
    assert labels == [*facts.REQUIRED_NODE_LABELS.items(), ("team", "ml")]
    assert cfg.node_pool.taints == (
        config.Taint("gpu", "true", "NoSchedule"),
        config.Taint("dedicated", "", "NoExecute"),
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("network.vpcCidr", "192.168.0.0/33"),
        ("network.vpcCidr", "192.168.1.0/16"),
        ("network.vpcCidr", "not-a-cidr"),
        ("cluster.serviceCidr", "172.30.0.1/18"),
    ],
)
def test_rejects_malformed_cidrs(key: str, value: str) -> None:
    issues = problems({key: value})
    first = issues[0]
    assert (first.key, first.value) == (key, repr(value))
    assert "well-formed" in first.allowed


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("network.vpcCidr", "8.8.0.0/16"),
        ("cluster.serviceCidr", "100.64.0.0/16"),
        ("network.vpcCidr", "10.0.0.0/7"),
    ],
)
def test_rejects_cidrs_outside_private_ranges(key: str, value: str) -> None:
    issues = problems({key: value})
    assert (issues[0].key, issues[0].value) == (key, repr(value))
    assert issues[0].allowed == "a CIDR inside 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16"


def test_rejects_subnet_outside_vpc_and_overlapping_service_cidr() -> None:
    issues = problems({"network.subnetCidrs": ["10.1.0.0/20"], "cluster.serviceCidr": "192.168.128.0/18"})
    assert [(i.key, i.allowed) for i in issues] == [
        ("network.subnetCidrs", "a CIDR inside network.vpcCidr (192.168.0.0/16)"),
        ("cluster.serviceCidr", "a CIDR that does not overlap network.vpcCidr"),
    ]


def test_rejects_subnet_count_not_matching_zones() -> None:
    issue = only_issue({"network.zoneIds": ["cn-beijing-a", "cn-beijing-b"]}, "network.subnetCidrs")
    assert "one CIDR per zone" in issue.allowed


def test_existing_network_needs_all_three_ids() -> None:
    issues = problems({"network.existingVpcId": "vpc-1"})
    assert {i.key for i in issues} == {"network.existingSubnetIds", "network.existingSecurityGroupId"}
    cfg = config.load(
        raw(
            {
                "network.existingVpcId": "vpc-1",
                "network.existingSubnetIds": ["subnet-1"],
                "network.existingSecurityGroupId": "sg-1",
            }
        )
    )
    assert cfg.network.use_existing


def test_accepts_the_capacity_catalog_key_the_policy_pack_reads() -> None:
    config.load(raw({"gpuInstanceTypes": '{"ecs.gni2.8xlarge": {"product": "NVIDIA A10", "gpus": 2}}'}))


def test_rejects_unknown_keys() -> None:
    # Dotted keys are not declared in Pulumi.yaml (the CLI would read their dots as a path): the list
    # of every key is docs/configuration.md.
    issue = only_issue({"nodePool.instanceType": "ecs.gni2.3xlarge"}, "nodePool.instanceType")
    assert issue.allowed == "a key listed in docs/configuration.md (did you mean nodePool.instanceTypes?)"
    issue = only_issue({"nothingLikeAKey": "x"}, "nothingLikeAKey")
    assert issue.allowed == "a key listed in docs/configuration.md"


def test_an_object_set_with_path_is_refused_with_the_commands_that_set_the_dotted_keys() -> None:
    # What `pulumi config set --path 'nodePool.instanceTypes[0]' ecs.gni2.3xlarge` writes (the engine
    # hands an object over as JSON text).
    issue = only_issue({"nodePool": '{"instanceTypes":["ecs.gni2.3xlarge"]}'}, "nodePool")
    assert issue.value == '{"instanceTypes": ["ecs.gni2.3xlarge"]} (set with --path)'
    assert issue.allowed == (
        "the keys under nodePool. are whole dotted keys, set without --path: pulumi config rm nodePool, "
        """then pulumi config set nodePool.instanceTypes '["ecs.gni2.3xlarge"]'"""
    )
    issue = only_issue({"driver": '{"image": {"build": "kind:x"}, "simulatedGpu": 2}'}, "driver")
    assert "pulumi config set driver.image.build kind:x" in issue.allowed
    assert "(driver.simulatedGpu is no key; did you mean driver.simulatedGpus?)" in issue.allowed


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("nodePool.minReplicas", "one", "an integer"),
        ("sample.enabled", "yes", "true or false"),
        (
            "nodePool.instanceTypes",
            "ecs.gni2.3xlarge",
            """a list of strings, as JSON: pulumi config set nodePool.instanceTypes '["ecs.gni2.3xlarge"]'""",
        ),
        (
            "network.zoneIds",
            "cn-beijing-a, cn-beijing-b",
            "a list of strings, as JSON: pulumi config set network.zoneIds "
            """'["cn-beijing-a", "cn-beijing-b"]'""",
        ),
    ],
)
def test_rejects_wrongly_typed_values(key: str, value: str, allowed: str) -> None:
    issue = only_issue({key: value}, key)
    assert issue.allowed == allowed


def test_login_needs_exactly_one_of_key_pair_and_password() -> None:
    issue = only_issue({"nodePool.keyPairName": None}, "nodePool.keyPairName")
    assert "exactly one of nodePool.keyPairName and nodePool.password" in issue.allowed
    issues = problems({}, secrets={"nodePool.password": "S3cret!pass"})
    assert [i.key for i in issues] == ["nodePool.keyPairName"]


def test_password_must_be_a_secret_and_is_never_shown() -> None:
    with pytest.raises(StackConfigError) as info:
        config.load(raw({"nodePool.keyPairName": None, "nodePool.password": "S3cret!pass"}))
    assert [i.key for i in info.value.issues] == ["nodePool.password"]
    assert "S3cret!pass" not in str(info.value)
    assert "--secret" in info.value.issues[0].allowed
    cfg = config.load(raw({"nodePool.keyPairName": None}, secrets={"nodePool.password": "S3cret!pass"}))
    assert cfg.node_pool.password is not None
    assert cfg.node_pool.password.reveal() == "S3cret!pass"
    assert "S3cret" not in repr(cfg)


def test_vke_target_needs_a_region() -> None:
    issue = only_issue({}, "(volcengine:region)", region=False)
    assert "volcengine:region" in issue.allowed


def test_existing_cluster_needs_exactly_one_kubeconfig_source() -> None:
    kind = {"driver.image.build": "kind:dev"}
    issue = only_issue({"target": "existing-cluster", **kind}, "kubeconfig", region=False)
    assert "exactly one of kubeconfig (secret) and kubeconfigPath" in issue.allowed
    cfg = config.load(
        raw({"target": "existing-cluster", "kubeconfigPath": "~/.kube/config", **kind}, region=False)
    )
    assert not cfg.provisions_vke
    assert cfg.volcengine is None


def test_rejects_unknown_target_and_bad_sample_namespace() -> None:
    issues = problems({"target": "gke", "sample.namespace": "Bad_NS"})
    assert [(i.key, i.value) for i in issues] == [("target", "'gke'"), ("sample.namespace", "'Bad_NS'")]


def test_nvidia_rejects_the_python_drivers_health_and_reconcile_settings() -> None:
    issues = problems(
        {
            "driver.implementation": "nvidia",
            "driver.claimReconcileIntervalSeconds": 60,
            "driver.additionalXidsToIgnore": "79",
            "driver.healthRecoveryWindowSeconds": 30,
        }
    )
    assert [(i.key, i.value, i.allowed) for i in issues] == [
        (key, value, "unset with driver.implementation=nvidia (a setting of the python driver)")
        for key, value in (
            ("driver.claimReconcileIntervalSeconds", "60"),
            ("driver.additionalXidsToIgnore", "'79'"),
            ("driver.healthRecoveryWindowSeconds", "30"),
        )
    ]
    default = config.load(raw({"driver.implementation": "nvidia", "driver.healthRecoveryWindowSeconds": 300}))
    assert default.driver.health_recovery_window_seconds == 300


def test_nvidia_rejects_simulated_devices_and_taints() -> None:
    issues = problems(
        {
            "driver.implementation": "nvidia",
            "driver.deviceSource": "simulated",
            "nodePool.taints": ["gpu:NoSchedule"],
        }
    )
    assert [i.key for i in issues] == ["driver.deviceSource", "nodePool.taints"]


def test_an_xid_the_plugin_would_refuse_is_one_issue() -> None:
    issue = only_issue({"driver.additionalXidsToIgnore": "79,99999999999"}, "driver.additionalXidsToIgnore")
    assert (issue.value, issue.allowed) == (
        "'79,99999999999'",
        "XID numbers of at most 9 digits each (NVIDIA's are such as 79)",
    )


def test_health_keys_are_checked() -> None:
    issue = only_issue({"driver.additionalXidsToIgnore": "74;79"}, "driver.additionalXidsToIgnore")
    assert issue.allowed == "a comma-separated list of XID numbers such as 74,79"
    issue = only_issue({"driver.healthRecoveryWindowSeconds": -1}, "driver.healthRecoveryWindowSeconds")
    assert issue.value == "-1"
    loaded = config.load(raw({"driver.additionalXidsToIgnore": "74, 79"})).driver
    assert (loaded.additional_xids_to_ignore, loaded.health_recovery_window_seconds) == ("74, 79", 300)


def test_driver_root_must_be_an_absolute_host_path() -> None:
    issue = only_issue({"driver.nvidiaDriverRoot": "run/nvidia/driver"}, "driver.nvidiaDriverRoot")
    assert issue.value == "'run/nvidia/driver'"
    assert issue.allowed == "an absolute host path such as / or /run/nvidia/driver"
    assert config.load(raw({"driver.nvidiaDriverRoot": "/run/nvidia/driver"})).driver.nvidia_driver_root == (
        "/run/nvidia/driver"
    )


@pytest.mark.parametrize("stack", ["dev", "prod", "local"])
def test_example_stack_files_are_valid(stack: str) -> None:
    cfg = config.load(harness.stack_raw_config(stack))
    assert cfg.production is (stack == "prod")
    assert cfg.provisions_vke is (stack != "local")


@pytest.mark.parametrize("stack", ["dev", "prod", "local"])
def test_example_stack_files_hold_scalars_as_the_cli_writes_them_back(stack: str) -> None:
    # `pulumi stack init` and `pulumi config set` save every top-level scalar as a string: a number or
    # boolean written bare would show up as a changed line of the tracked file after the first scripts/up.
    from vke_gpu_dra_core.config import load_pulumi_yaml

    values = load_pulumi_yaml((harness.ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    bare = {k: v for k, v in values.items() if not isinstance(v, str | list | dict)}
    assert bare == {}


def test_reads_config_the_way_the_engine_passes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The language host hands config over as PULUMI_CONFIG (JSON strings) and PULUMI_CONFIG_SECRET_KEYS."""
    import json

    from pulumi.runtime import config as runtime_config

    monkeypatch.setattr(runtime_config, "CONFIG", runtime_config.CONFIG)
    runtime_config.set_all_config({}, secret_keys=[])
    monkeypatch.setenv(
        "PULUMI_CONFIG",
        json.dumps(
            {
                f"{P}:nodePool.password": "S3cret!pass",
                f"{P}:nodePool.instanceTypes": '["ecs.gni2.3xlarge"]',
                f"{P}:production": "true",
                f"{P}:driver.registry.name": "vke-gpu-dra-prod",
                "volcengine:region": "cn-shanghai",
                "pulumi:disable-default-providers": '["kubernetes"]',
            }
        ),
    )
    monkeypatch.setenv("PULUMI_CONFIG_SECRET_KEYS", json.dumps([f"{P}:nodePool.password"]))
    cfg = program_config.load()
    assert cfg.production is True
    assert cfg.volcengine is not None and cfg.volcengine.region == "cn-shanghai"
    assert cfg.node_pool.password is not None and cfg.node_pool.password.reveal() == "S3cret!pass"


def test_main_reports_config_errors_as_one_message(monkeypatch: pytest.MonkeyPatch) -> None:
    from components import stack

    logged: list[str] = []
    monkeypatch.setattr(stack.pulumi.log, "error", lambda message, *a, **k: logged.append(message))
    bad = raw({"nodePool.minReplicas": 5})
    load = config.load
    monkeypatch.setattr(stack.config_mod, "load", lambda: load(bad))
    with pytest.raises(SystemExit):
        stack.main()
    assert len(logged) == 1
    assert f"{P}:nodePool.minReplicas = 5: allowed: at most nodePool.maxReplicas (1)" in logged[0]


BOOLEAN_KEYS = [k.name for k in config.KEYS if k.type == "boolean"]
#: Exactly what pulumi.Config.get_bool accepts (the Python SDK compares with "true"/"True" and
#: "false"/"False" and raises ConfigTypeError otherwise); YAML booleans arrive as "true"/"false".
BOOLEAN_ACCEPTED = [
    ("true", True),
    ("True", True),
    ("false", False),
    ("False", False),
    (True, True),
    (False, False),
]
BOOLEAN_REJECTED = ["yes", "no", "1", "0", "on", "off", "treu", "TRUE", "FALSE", "tRuE", "y", "", " true"]


def _bool_field(cfg: config.StackConfig, key: str) -> bool:
    assert cfg.driver_image is not None
    fields = {
        "production": cfg.production,
        "cluster.apiServerPublicAccess": cfg.cluster.api_server_public_access,
        "cluster.deleteProtection": cfg.cluster.delete_protection,
        "cluster.forceKubernetesVersion": cfg.cluster.force_kubernetes_version,
        "driver.kubeletPluginOnAllNodes": cfg.driver.kubelet_plugin_on_all_nodes,
        "driver.registry.create": cfg.driver_image.registry_create,
        "sample.enabled": cfg.sample.enabled,
    }
    return fields[key]


def test_boolean_keys_are_the_ones_this_test_reads() -> None:
    assert sorted(BOOLEAN_KEYS) == sorted(
        [
            "production",
            "cluster.apiServerPublicAccess",
            "cluster.deleteProtection",
            "cluster.forceKubernetesVersion",
            "driver.kubeletPluginOnAllNodes",
            "driver.registry.create",
            "sample.enabled",
        ]
    )


@pytest.mark.parametrize("key", BOOLEAN_KEYS)
@pytest.mark.parametrize(("value", "expected"), BOOLEAN_ACCEPTED)
def test_boolean_keys_accept_what_pulumi_config_accepts(key: str, value: Any, expected: bool) -> None:
    assert _bool_field(config.load(raw({key: value})), key) is expected


@pytest.mark.parametrize("key", BOOLEAN_KEYS)
@pytest.mark.parametrize("value", BOOLEAN_REJECTED)
def test_boolean_keys_reject_anything_else_naming_key_value_and_allowed(key: str, value: str) -> None:
    issue = only_issue({key: value}, key)
    assert issue.value == repr(value)
    assert issue.allowed == "true or false"
    assert str(issue).startswith(f"{P}:{key} = {value!r}: allowed: true or false")


@pytest.mark.parametrize("value", ["yes", "1", "on", "treu"])
def test_production_typo_is_reported_with_the_other_problems(value: str) -> None:
    # `production` used to be read after the collected problems were raised: alone it came out False.
    issues = problems({"production": value, "namePrefix": "Bad_Prefix"})
    assert {i.key for i in issues} == {"production", "namePrefix"}


@pytest.mark.parametrize("value", ["yes", "1", "on", "treu"])
def test_production_typo_is_an_error_with_an_existing_cluster_too(value: str) -> None:
    issue = only_issue(
        {
            "target": "existing-cluster",
            "kubeconfigPath": "/tmp/kc",
            "nodePool.keyPairName": None,
            "driver.image": "registry.k8s.io/vke-gpu-dra/plugin:1",
            "production": value,
        },
        "production",
        region=False,
    )
    assert issue.value == repr(value)


def test_parse_bool_is_the_one_boolean_reader() -> None:
    assert [config.parse_bool(v) for v in ("true", "True", "false", "False", True, False)] == [
        True,
        True,
        False,
        False,
        True,
        False,
    ]
    assert [config.parse_bool(v) for v in ("TRUE", "yes", "1", 1, 0, None, "treu")] == [None] * 7


# --- driver.featureGates ---


def test_driver_feature_gates_default_off_and_parse() -> None:
    assert config.load(raw({})).driver.feature_gates == {}
    cfg = config.load(raw({"driver.featureGates": "TimeSlicingSettings=true,MPSSupport=false"}))
    assert cfg.driver.feature_gates == {"TimeSlicingSettings": True, "MPSSupport": False}


def test_driver_feature_gates_unknown_gate_is_one_issue() -> None:
    issue = only_issue({"driver.featureGates": "Sharing=true"}, "driver.featureGates")
    assert "unrecognized feature gate: Sharing" in str(issue)


def test_driver_feature_gates_as_a_map_is_one_issue_naming_the_string_to_write() -> None:
    issue = only_issue(
        {"driver.featureGates": {"DynamicMIG": True, "MPSSupport": False}}, "driver.featureGates"
    )
    assert issue.value == '\'{"DynamicMIG": true, "MPSSupport": false}\''
    assert (
        issue.allowed == "a string Name=true|false,..., not a map: write 'DynamicMIG=true,MPSSupport=false'"
    )


def test_driver_feature_gates_reach_both_charts() -> None:
    from components import driver

    for implementation in ("python", "nvidia"):
        values = {"driver.featureGates": "MPSSupport=true", "driver.implementation": implementation}
        cfg = config.load(raw(values))
        assert driver.chart_values(cfg.driver).values["featureGates"] == {"MPSSupport": True}
    assert "featureGates" not in driver.chart_values(config.load(raw({})).driver).values


def test_claim_reconcile_interval_default_and_range() -> None:
    assert config.load(raw({})).driver.claim_reconcile_interval_seconds == 600
    assert (
        config.load(
            raw({"driver.claimReconcileIntervalSeconds": 1800})
        ).driver.claim_reconcile_interval_seconds
        == 1800
    )
    issue = only_issue({"driver.claimReconcileIntervalSeconds": 5}, "driver.claimReconcileIntervalSeconds")
    assert issue.value == "5"
    assert "10" in issue.allowed and "86400" in issue.allowed
