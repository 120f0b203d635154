"""The kubelet plugin DaemonSet: scheduling, command-line contract through env, mounts, privileges, probes."""

from __future__ import annotations

from typing import Any

import pytest
from vke_gpu_dra_core import facts

from tests.chart.chartlib import RELEASE, SIMULATED, chart_metadata, default_values, find, plugin_container

#: Env var of every plugin flag that the chart sets (KUBECONFIG is left unset: in-cluster config).
NVML_ENV = {
    "DRIVER_NAME": facts.DRIVER_NAME,
    "PLUGIN_DATA_DIR": f"/var/lib/kubelet/plugins/{facts.DRIVER_NAME}",
    "REGISTRAR_DIR": "/var/lib/kubelet/plugins_registry",
    "CDI_ROOT": "/var/run/cdi",
    "DEVICE_SOURCE": "nvml",
    "NVIDIA_DRIVER_ROOT": "/",
    "DRIVER_ROOT_CTR_PATH": "/driver-root",
    "HEALTH_RECOVERY_WINDOW": "300",
    "HEALTHCHECK_PORT": "51516",
    "METRICS_PORT": "8080",
    "CLAIM_RECONCILE_INTERVAL": "600",
    "POD_RESOURCES_SOCKET": "/var/lib/kubelet/pod-resources/kubelet.sock",
    "LOG_FORMAT": "json",
    "LOG_LEVEL": "info",
    "ROLLING_UPDATE_ID": {"fieldRef": {"fieldPath": "metadata.uid"}},
    "NVIDIA_VISIBLE_DEVICES": "void",
}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    env = container["env"]
    names = [e["name"] for e in env]
    assert len(names) == len(set(names)), f"duplicate env vars: {names}"
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in env}


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return find(objects, "DaemonSet")["spec"]["template"]["spec"]


def mounts_by_name(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in container["volumeMounts"]}


def volumes_by_name(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in spec["volumes"]}


# ---------------------------------------------------------------- scheduling


def test_default_node_affinity_is_the_dra_label(render: Any) -> None:
    spec = pod_spec(render({}))
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {
            "matchExpressions": [
                {"key": facts.LABEL_GPU_SCHEDULE, "operator": "In", "values": [facts.LABEL_GPU_SCHEDULE_DRA]}
            ]
        }
    ]
    assert "nodeSelector" not in spec


def test_gpu_taint_is_tolerated_by_default(render: Any) -> None:
    assert pod_spec(render({}))["tolerations"] == [GPU_TOLERATION]
    assert "tolerations" not in pod_spec(render({"kubeletPlugin": {"tolerations": []}}))


def test_scheduling_values_are_passed_through(render: Any) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "Exists"}]}]
            }
        }
    }
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    spec = pod_spec(
        render(
            {
                "kubeletPlugin": {
                    "affinity": affinity,
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                    "tolerations": tolerations,
                    "priorityClassName": "gpu-critical",
                }
            }
        )
    )
    assert spec["affinity"] == affinity  # replaced, not merged
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["tolerations"] == tolerations
    assert spec["priorityClassName"] == "gpu-critical"


def test_priority_and_grace_period(render: Any) -> None:
    spec = pod_spec(render({}))
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert "hostNetwork" not in spec and "hostPID" not in spec and "hostIPC" not in spec


def test_seamless_upgrades_surge_one_pod_and_name_sockets_after_the_pod(render: Any) -> None:
    daemonset = find(render({}), "DaemonSet")
    assert daemonset["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    env = env_of(plugin_container(render({})))
    assert env["ROLLING_UPDATE_ID"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    # a maxUnavailable from the values cannot turn the surge into an outage
    custom = {
        "kubeletPlugin": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 3}}}
    }
    assert find(render(custom), "DaemonSet")["spec"]["updateStrategy"]["rollingUpdate"] == {
        "maxSurge": 1,
        "maxUnavailable": 0,
    }


def test_without_seamless_upgrades_the_rollout_never_surges(render: Any) -> None:
    off = {"seamlessUpgrades": {"enabled": False}}
    strategy = find(render(off), "DaemonSet")["spec"]["updateStrategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    assert "ROLLING_UPDATE_ID" not in env_of(plugin_container(render(off)))  # the fixed socket names
    custom = {
        **off,
        "kubeletPlugin": {
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%"}}
        },
    }
    strategy = find(render(custom), "DaemonSet")["spec"]["updateStrategy"]
    assert strategy["rollingUpdate"] == {"maxUnavailable": "25%", "maxSurge": 0}
    on_delete = {"kubeletPlugin": {"updateStrategy": {"type": "OnDelete"}}}
    assert find(render(on_delete), "DaemonSet")["spec"]["updateStrategy"] == {"type": "OnDelete"}


def test_log_level_and_extra_env(render: Any) -> None:
    extra = [
        {"name": "GRPC_VERBOSITY", "value": "debug"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    env = env_of(plugin_container(render({"logLevel": "debug", "kubeletPlugin": {"extraEnv": extra}})))
    assert env["LOG_LEVEL"] == "debug"
    assert env["GRPC_VERBOSITY"] == "debug"
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}


@pytest.mark.parametrize(
    "name",
    ["LOG_LEVEL", "ROLLING_UPDATE_ID", "NODE_NAME", "NVIDIA_VISIBLE_DEVICES", "CLAIM_RECONCILE_INTERVAL"],
)
def test_extra_env_cannot_override_the_charts_own(helm: Any, name: str) -> None:
    message = helm.template_error({"kubeletPlugin": {"extraEnv": [{"name": name, "value": "x"}]}})
    assert f"kubeletPlugin.extraEnv: {name} is set by the chart" in message


def test_image_digest_wins_over_the_tag(render: Any) -> None:
    digest = "sha256:" + "0123456789abcdef" * 4
    image = {
        "repository": "cr.example/x/plugin",
        "tag": "dev",
        "digest": digest,
        "pullPolicy": "IfNotPresent",
    }
    container = plugin_container(render({"image": image}))
    assert container["image"] == f"cr.example/x/plugin@{digest}"


def test_image_defaults_to_app_version(render: Any) -> None:
    container = plugin_container(render({}))
    repository = default_values()["image"]["repository"]
    assert container["image"] == f"{repository}:{chart_metadata()['appVersion']}"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["command"] == ["dra-gpu-kubelet-plugin"]
    objects = render(
        {
            "image": {"repository": "cr.example/x/plugin", "tag": "dev", "pullPolicy": "Always"},
            "imagePullSecrets": [{"name": "cr-pull"}],
        }
    )
    container = plugin_container(objects)
    assert container["image"] == "cr.example/x/plugin:dev"
    assert container["imagePullPolicy"] == "Always"
    assert pod_spec(objects)["imagePullSecrets"] == [{"name": "cr-pull"}]


# ---------------------------------------------------------------- command line through env


def test_nvml_env_sets_every_flag_from_values(render: Any) -> None:
    env = env_of(plugin_container(render({})))
    assert env.pop("NODE_NAME") == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env == NVML_ENV
    assert "KUBECONFIG" not in env  # in-cluster configuration with the pod's ServiceAccount


def test_simulated_env(render: Any) -> None:
    env = env_of(plugin_container(render(SIMULATED)))
    env.pop("NODE_NAME")
    expected = {k: v for k, v in NVML_ENV.items() if k not in ("NVIDIA_DRIVER_ROOT", "DRIVER_ROOT_CTR_PATH")}
    expected |= {"DEVICE_SOURCE": "simulated", "SIMULATED_GPUS": "4", "SIMULATED_PRODUCT": "NVIDIA A30"}
    assert env == expected


def test_env_follows_values(render: Any) -> None:
    values = {
        "driverName": "gpu.example.com",
        "deviceSource": {
            "type": "simulated",
            "simulatedGpus": 2,
            "simulatedProduct": "NVIDIA H200",
            "simulatedNumaNodes": "0,1",
        },
        "logFormat": "text",
        "healthcheckPort": 9443,
        "metricsPort": 9100,
        "claimReconcileIntervalSeconds": 1800,
        "kubeletPluginsDir": "/data/kubelet/plugins/",
        "kubeletRegistrarDir": "/data/kubelet/plugins_registry",
        "cdiRoot": "/etc/cdi",
        "health": {"additionalXidsToIgnore": "74,79", "recoveryWindowSeconds": 60},
    }
    env = env_of(plugin_container(render(values)))
    assert env["DRIVER_NAME"] == "gpu.example.com"
    assert env["PLUGIN_DATA_DIR"] == "/data/kubelet/plugins/gpu.example.com"
    assert env["REGISTRAR_DIR"] == "/data/kubelet/plugins_registry"
    assert env["CDI_ROOT"] == "/etc/cdi"
    assert env["SIMULATED_GPUS"] == "2"
    assert env["SIMULATED_PRODUCT"] == "NVIDIA H200"
    assert env["SIMULATED_NUMA_NODES"] == "0,1"  # unset (the default "") in test_simulated_env
    assert env["LOG_FORMAT"] == "text"
    assert env["HEALTHCHECK_PORT"] == "9443"
    assert env["METRICS_PORT"] == "9100"
    assert env["CLAIM_RECONCILE_INTERVAL"] == "1800"
    assert env["ADDITIONAL_XIDS_TO_IGNORE"] == "74,79"
    assert env["HEALTH_RECOVERY_WINDOW"] == "60"


@pytest.mark.parametrize("root", ["/", "/run/nvidia/driver"])
def test_driver_root_mounted_read_only_at_driver_root(render: Any, root: str) -> None:
    objects = render({"nvidiaDriverRoot": root})
    container = plugin_container(objects)
    env = env_of(container)
    assert (env["NVIDIA_DRIVER_ROOT"], env["DRIVER_ROOT_CTR_PATH"]) == (root, "/driver-root")
    assert "NVIDIA_CDI_HOOK_PATH" not in env  # the plugin copies the driver root's hook
    mount = mounts_by_name(container)["driver-root"]
    assert mount == {
        "name": "driver-root",
        "mountPath": "/driver-root",
        "readOnly": True,
        "mountPropagation": "HostToContainer",
    }
    assert volumes_by_name(pod_spec(objects))["driver-root"]["hostPath"] == {
        "path": root,
        "type": "Directory",
    }


def test_cdi_hook_path_is_passed_and_mounted_at_its_host_path(render: Any) -> None:
    objects = render({"nvidiaCDIHookPath": "/usr/local/bin/nvidia-cdi-hook"})
    container = plugin_container(objects)
    assert env_of(container)["NVIDIA_CDI_HOOK_PATH"] == "/usr/local/bin/nvidia-cdi-hook"
    assert mounts_by_name(container)["nvidia-cdi-hook"] == {
        "name": "nvidia-cdi-hook",
        "mountPath": "/usr/local/bin/nvidia-cdi-hook",
        "readOnly": True,
    }
    assert volumes_by_name(pod_spec(objects))["nvidia-cdi-hook"]["hostPath"] == {
        "path": "/usr/local/bin/nvidia-cdi-hook",
        "type": "File",
    }
    simulated = plugin_container(render({**SIMULATED, "nvidiaCDIHookPath": "/usr/bin/nvidia-cdi-hook"}))
    assert "nvidia-cdi-hook" not in mounts_by_name(simulated)


# ---------------------------------------------------------------- mounts


@pytest.mark.parametrize(
    "values",
    [
        {},
        {
            "kubeletPluginsDir": "/data/plugins",
            "kubeletRegistrarDir": "/data/reg",
            "cdiRoot": "/etc/cdi",
            "driverName": "gpu.example.com",
        },
    ],
    ids=["default", "custom-paths"],
)
def test_socket_and_state_paths_are_identical_on_host_and_in_container(
    render: Any, values: dict[str, Any]
) -> None:
    objects = render(values)
    container = plugin_container(objects)
    env = env_of(container)
    mounts = mounts_by_name(container)
    volumes = volumes_by_name(pod_spec(objects))
    for volume, env_name in (
        ("plugins-registry", "REGISTRAR_DIR"),
        ("plugin-data", "PLUGIN_DATA_DIR"),
        ("cdi", "CDI_ROOT"),
    ):
        host_path = volumes[volume]["hostPath"]
        assert host_path["type"] == "DirectoryOrCreate"
        assert mounts[volume]["mountPath"] == host_path["path"] == env[env_name], volume
        assert not mounts[volume].get("readOnly", False), volume
    assert env["PLUGIN_DATA_DIR"].endswith("/" + env["DRIVER_NAME"])


MPS = {"featureGates": {"MPSSupport": True}}


@pytest.mark.parametrize(
    "values",
    [{}, SIMULATED, {"featureGates": {"TimeSlicingSettings": True}}, {**SIMULATED, **MPS}],
    ids=["default", "simulated", "time-slicing", "simulated-mps"],
)
def test_no_bidirectional_propagation_without_mps_mounts(render: Any, values: dict[str, Any]) -> None:
    """The plugin mounts nothing unless it runs MPS daemons for real GPUs (simulated GPUs get none)."""
    for mount in plugin_container(render(values))["volumeMounts"]:
        assert mount.get("mountPropagation", "None") in {"None", "HostToContainer"}, mount


def test_mps_propagates_the_data_dir_both_ways_and_changes_nothing_else(render: Any) -> None:
    """With MPSSupport the shm tmpfs the plugin mounts under its data dir reaches the host (where the daemon
    pod and the workloads bind it): Bidirectional on that mount only, in a privileged container."""
    default, mps = plugin_container(render({})), plugin_container(render(MPS))
    data_dir = f"/var/lib/kubelet/plugins/{facts.DRIVER_NAME}"
    assert mounts_by_name(mps)["plugin-data"] == {
        "name": "plugin-data",
        "mountPath": data_dir,
        "mountPropagation": "Bidirectional",
    }
    assert mounts_by_name(default)["plugin-data"] == {"name": "plugin-data", "mountPath": data_dir}
    others = {name: m for name, m in mounts_by_name(mps).items() if name != "plugin-data"}
    assert others == {name: m for name, m in mounts_by_name(default).items() if name != "plugin-data"}
    assert mps["securityContext"] == default["securityContext"]
    assert mps["securityContext"]["privileged"] is True


def test_mps_refuses_an_unprivileged_plugin(helm: Any, render: Any) -> None:
    unprivileged = {"kubeletPlugin": {"containerSecurityContext": {"privileged": False}}}
    error = helm.template_error({**MPS, **unprivileged})
    key = "kubeletPlugin.containerSecurityContext.privileged=false"
    assert f"{key} with featureGates.MPSSupport=true" in error
    assert "Bidirectional" in error and "only to privileged containers" in error
    # without MPS, or with simulated GPUs (no daemons, no mounts), the override stands
    assert plugin_container(render(unprivileged))["securityContext"]["privileged"] is False
    simulated = plugin_container(render({**SIMULATED, **MPS, **unprivileged}))
    assert simulated["securityContext"]["privileged"] is False


def test_nvml_mode_mounts_dev_and_driver_root(render: Any) -> None:
    objects = render({})
    mounts = mounts_by_name(plugin_container(objects))
    assert set(mounts) == {
        "plugins-registry",
        "plugin-data",
        "cdi",
        "tmp",
        "pod-resources",
        "dev",
        "driver-root",
    }
    assert mounts["dev"] == {"name": "dev", "mountPath": "/dev", "mountPropagation": "HostToContainer"}
    volumes = volumes_by_name(pod_spec(objects))
    assert volumes["dev"]["hostPath"] == {"path": "/dev", "type": "Directory"}
    assert volumes["tmp"]["emptyDir"]["medium"] == "Memory"


def test_simulated_mode_mounts_no_devices_and_no_driver(render: Any) -> None:
    objects = render(SIMULATED)
    kept = {"plugins-registry", "plugin-data", "cdi", "tmp", "pod-resources"}
    assert set(mounts_by_name(plugin_container(objects))) == kept
    assert set(volumes_by_name(pod_spec(objects))) == kept


@pytest.mark.parametrize(
    ("values", "directory"),
    [
        ({}, "/var/lib/kubelet/pod-resources"),
        ({"kubeletPodResourcesDir": "/data/kubelet/pod-resources/"}, None),
    ],
    ids=["default", "custom"],
)
def test_kubelets_pod_resources_socket_is_mounted_read_only(
    render: Any, values: dict[str, Any], directory: str | None
) -> None:
    """Where the plugin asks kubelet which claims the node's containers use: the host directory at the same
    path, read only, in both device modes, and the socket in it passed to the plugin."""
    directory = directory or values["kubeletPodResourcesDir"]
    for mode in ({}, SIMULATED):
        objects = render({**values, **mode})
        container = plugin_container(objects)
        mount = mounts_by_name(container)["pod-resources"]
        assert mount == {"name": "pod-resources", "mountPath": directory, "readOnly": True}
        host = volumes_by_name(pod_spec(objects))["pod-resources"]["hostPath"]
        assert host == {"path": directory, "type": "DirectoryOrCreate"}
        assert env_of(container)["POD_RESOURCES_SOCKET"] == directory.rstrip("/") + "/kubelet.sock"


def test_termination_message_is_not_written_into_host_dev(render: Any) -> None:
    container = plugin_container(render({}))
    assert container["terminationMessagePath"] == "/tmp/termination-log"
    assert mounts_by_name(container)["tmp"]["mountPath"] == "/tmp"


# ---------------------------------------------------------------- privileges


def test_nvml_mode_is_privileged_for_device_access(render: Any) -> None:
    security = plugin_container(render({}))["securityContext"]
    assert security == {"privileged": True, "runAsUser": 0, "runAsGroup": 0, "readOnlyRootFilesystem": True}


def test_security_context_values_merge_over_the_mode_default(render: Any) -> None:
    values = {
        "kubeletPlugin": {
            "podSecurityContext": {"fsGroup": 0, "seLinuxOptions": {"type": "spc_t"}},
            "containerSecurityContext": {"seLinuxOptions": {"level": "s0"}, "readOnlyRootFilesystem": False},
        }
    }
    objects = render(values)
    assert pod_spec(objects)["securityContext"] == {"fsGroup": 0, "seLinuxOptions": {"type": "spc_t"}}
    assert plugin_container(objects)["securityContext"] == {
        "privileged": True,
        "runAsUser": 0,
        "runAsGroup": 0,
        "readOnlyRootFilesystem": False,
        "seLinuxOptions": {"level": "s0"},
    }
    simulated = plugin_container(
        render({**SIMULATED, "kubeletPlugin": {"containerSecurityContext": {"runAsGroup": 7}}})
    )
    assert simulated["securityContext"]["runAsGroup"] == 7
    assert simulated["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "securityContext" not in pod_spec(render({}))


def test_simulated_mode_runs_without_privileges_or_capabilities(render: Any) -> None:
    security = plugin_container(render(SIMULATED))["securityContext"]
    assert security["privileged"] is False
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert security["runAsUser"] == 0  # root-owned host directories; owner rights, no capabilities


# ---------------------------------------------------------------- probes, ports, resources


@pytest.mark.parametrize("port", [51516, 6000])
def test_grpc_probes_on_the_health_port(render: Any, port: int) -> None:
    container = plugin_container(render({"healthcheckPort": port}))
    for probe_name in ("startupProbe", "livenessProbe", "readinessProbe"):
        probe = container[probe_name]
        assert probe["grpc"] == {"port": port, "service": "liveness"}, probe_name
        assert set(probe) == {"grpc", "periodSeconds", "timeoutSeconds", "failureThreshold"}, probe_name
    assert container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"] == 600
    assert container["livenessProbe"]["failureThreshold"] == 3


def test_ports_and_scrape_annotations(render: Any) -> None:
    objects = render({"metricsPort": 9400, "podAnnotations": {"example.com/owner": "gpu-team"}})
    container = plugin_container(objects)
    assert container["ports"] == [
        {"name": "healthcheck", "containerPort": 51516, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 9400, "protocol": "TCP"},
    ]
    annotations = find(objects, "DaemonSet")["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9400",
        "prometheus.io/path": "/metrics",
        "example.com/owner": "gpu-team",
    }


def test_health_and_metrics_ports_must_differ(helm: Any) -> None:
    assert "healthcheckPort and metricsPort must differ" in helm.template_error({"metricsPort": 51516})


def test_resources_have_requests_and_limits(render: Any) -> None:
    resources = plugin_container(render({}))["resources"]
    assert set(resources) == {"requests", "limits"}
    assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}
    # maps merge with the defaults; null removes a default (here: the CPU limit)
    custom = {
        "kubeletPlugin": {
            "resources": {
                "requests": {"cpu": "100m", "memory": "256Mi"},
                "limits": {"cpu": None, "memory": "1Gi"},
            }
        }
    }
    assert plugin_container(render(custom))["resources"] == {
        "requests": {"cpu": "100m", "memory": "256Mi"},
        "limits": {"memory": "1Gi"},
    }


def test_daemonset_runs_as_the_release_service_account(render: Any) -> None:
    objects = render({})
    account = find(objects, "ServiceAccount", f"{RELEASE}-vke-gpu-dra-driver-kubelet-plugin")
    assert pod_spec(objects)["serviceAccountName"] == account["metadata"]["name"]
    assert pod_spec(render({"serviceAccount": {"name": "dra"}}))["serviceAccountName"] == "dra"


def test_values_in_the_shape_the_pulumi_program_passes(render: Any) -> None:
    """The program sets image, pull secrets, driver name, device source, tolerations, DeviceClasses off, and
    deletes the default affinity with a null (plugin on all nodes)."""
    tolerations = [{"key": "vke.node.gpu", "operator": "Exists", "effect": "NoSchedule"}]
    values = {
        "image": {"pullPolicy": "Always", "repository": "cr.example/vke-gpu-dra/dra-gpu-kubelet-plugin"},
        "imagePullSecrets": [{"name": "cr"}],
        "driverName": facts.DRIVER_NAME,
        "deviceSource": {"type": "simulated", "simulatedGpus": 2, "simulatedProduct": "NVIDIA A30"},
        "kubeletPlugin": {"tolerations": tolerations, "affinity": None},
        "deviceClasses": {"enabled": False},
    }
    objects = render(values)
    spec = pod_spec(objects)
    assert "affinity" not in spec
    assert spec["tolerations"] == tolerations
    assert not [o for o in objects if o["kind"] == "DeviceClass"]
    assert plugin_container(objects)["image"] == "cr.example/vke-gpu-dra/dra-gpu-kubelet-plugin:0.1.0"
