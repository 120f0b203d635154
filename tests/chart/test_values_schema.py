"""values.yaml keeps the Pulumi program's contract; values.schema.json rejects typos and wrong types."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from vke_gpu_dra_core import facts

from tests.chart.chartlib import CHART_DIR, Helm, default_values

SCHEMA_PATH = CHART_DIR / "values.schema.json"


def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


def object_levels(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every sub-schema that declares `properties`, with its path."""
    if "properties" in schema:
        yield path or "/", schema
        for key, sub in schema["properties"].items():
            yield from object_levels(sub, f"{path}/{key}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from object_levels(schema[key], f"{path}/{key}")


def test_schema_is_draft_07_and_closed_at_every_level() -> None:
    schema = load_schema()
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(schema)
    levels = dict(object_levels(schema))
    assert set(levels) == {
        "/",
        "/image",
        "/imagePullSecrets/items",
        "/deviceSource",
        "/health",
        "/featureGates",
        "/kubeletPlugin",
        "/kubeletPlugin/resources",
        "/kubeletPlugin/updateStrategy",
        "/kubeletPlugin/updateStrategy/rollingUpdate",
        "/kubeletPlugin/extraEnv/items",
        "/seamlessUpgrades",
        "/metrics",
        "/metrics/service",
        "/metrics/serviceMonitor",
        "/serviceAccount",
        "/rbac",
        "/takeover",
        "/admissionPolicy",
        "/deviceClasses",
        "/helmTest",
        "/helmTest/image",
    }
    for path, level in levels.items():
        assert level.get("additionalProperties") is False, f"{path} accepts unknown keys"


def test_default_values_satisfy_the_schema() -> None:
    jsonschema.Draft7Validator(load_schema()).validate(default_values())


def test_every_default_value_is_described_by_the_schema() -> None:
    def keys(values: dict[str, Any], schema: dict[str, Any], path: str) -> None:
        for key, value in values.items():
            assert key in schema.get("properties", {}), f"{path}/{key} missing from the schema"
            sub = schema["properties"][key]
            if isinstance(value, dict) and "properties" in sub:
                keys(value, sub, f"{path}/{key}")

    keys(default_values(), load_schema(), "")


def test_values_contract() -> None:
    """Keys and defaults the Pulumi program relies on (may grow, must not be renamed)."""
    values = default_values()
    assert values["image"]["repository"].endswith("/vke-gpu-dra/dra-gpu-kubelet-plugin")
    assert values["image"]["tag"] == ""
    assert values["image"]["pullPolicy"] == "IfNotPresent"
    assert values["imagePullSecrets"] == []
    assert values["driverName"] == facts.DRIVER_NAME
    assert values["deviceSource"] == {
        "type": "nvml",
        "simulatedGpus": 8,
        "simulatedProduct": "NVIDIA A30",
        "simulatedNumaNodes": "",
    }
    assert values["logFormat"] == "json"
    assert values["health"] == {"additionalXidsToIgnore": "", "recoveryWindowSeconds": 300}
    assert values["healthcheckPort"] == 51516
    assert values["metricsPort"] == 8080
    assert values["claimReconcileIntervalSeconds"] == 600
    assert values["nvidiaDriverRoot"] == "/"
    assert values["nvidiaCDIHookPath"] == ""
    assert values["kubeletPluginsDir"] == "/var/lib/kubelet/plugins"
    assert values["kubeletRegistrarDir"] == "/var/lib/kubelet/plugins_registry"
    assert values["cdiRoot"] == "/var/run/cdi"
    plugin = values["kubeletPlugin"]
    assert set(plugin) >= {
        "affinity",
        "nodeSelector",
        "tolerations",
        "resources",
        "priorityClassName",
        "updateStrategy",
    }
    assert plugin["nodeSelector"] == {}
    assert plugin["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert values["seamlessUpgrades"] == {"enabled": True}
    assert values["logLevel"] == "info"
    assert plugin["priorityClassName"] == "system-node-critical"
    assert values["deviceClasses"] == {
        "enabled": True,
        "gpuExtendedResourceName": facts.GPU_EXTENDED_RESOURCE,
    }
    for key in ("nameOverride", "fullnameOverride", "serviceAccount", "podAnnotations"):
        assert key in values


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"healthcheckPort": "51516"}, "at '/healthcheckPort': got string, want integer"),
        (
            {"deviceSource": {"type": "simulated", "simulatedNumaNodes": "0;1"}},
            "at '/deviceSource/simulatedNumaNodes': '0;1' does not match",
        ),
        (
            {"health": {"additionalXidsToIgnore": "74;79"}},
            "at '/health/additionalXidsToIgnore': '74;79' does not match",
        ),
        (  # the plugin refuses an XID above 4294967295 and would not start
            {"health": {"additionalXidsToIgnore": "79,99999999999"}},
            "at '/health/additionalXidsToIgnore': '79,99999999999' does not match",
        ),
        (
            {"health": {"recoveryWindowSeconds": -1}},
            "at '/health/recoveryWindowSeconds': minimum: got -1, want 0",
        ),
        (
            {"deviceSource": {"simulatedGpus": "8"}},
            "at '/deviceSource/simulatedGpus': got string, want integer",
        ),
        ({"deviceClasses": {"enabled": "yes"}}, "at '/deviceClasses/enabled': got string, want boolean"),
        ({"kubeletPlugin": {"tolerations": {}}}, "at '/kubeletPlugin/tolerations': got object, want array"),
        ({"imagePullSecrets": ["cr-pull"]}, "at '/imagePullSecrets/0': got string, want object"),
        ({"driverNmae": "gpu.nvidia.com"}, "additional properties 'driverNmae' not allowed"),
        (
            {"kubeletPlugin": {"nodeSelectors": {}}},
            "at '/kubeletPlugin': additional properties 'nodeSelectors'",
        ),
        ({"image": {"registry": "cr"}}, "at '/image': additional properties 'registry' not allowed"),
        ({"image": {"digest": "sha256:0"}}, "at '/image/digest': 'sha256:0' does not match pattern"),
        (
            {
                "kubeletPlugin": {
                    "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}
                }
            },
            "at '/kubeletPlugin/updateStrategy/rollingUpdate': additional properties 'maxSurge' not allowed",
        ),
        (
            {"deviceSource": {"type": "gpu"}},
            "at '/deviceSource/type': value must be one of 'nvml', 'simulated'",
        ),
        ({"logFormat": "xml"}, "at '/logFormat': value must be one of 'json', 'text'"),
        ({"image": {"pullPolicy": "Sometimes"}}, "at '/image/pullPolicy': value must be one of"),
        ({"metricsPort": 70000}, "at '/metricsPort': maximum"),
        ({"healthcheckPort": 0}, "at '/healthcheckPort': minimum"),
        ({"claimReconcileIntervalSeconds": 5}, "at '/claimReconcileIntervalSeconds': minimum"),
        (
            {"claimReconcileIntervalSeconds": "600"},
            "at '/claimReconcileIntervalSeconds': got string, want integer",
        ),
        ({"deviceSource": {"simulatedGpus": 0}}, "at '/deviceSource/simulatedGpus': minimum"),
        ({"driverName": "GPU_NVIDIA"}, "at '/driverName'"),
        ({"cdiRoot": "var/run/cdi"}, "at '/cdiRoot'"),
        ({"logLevel": "trace"}, "at '/logLevel': value must be one of 'debug', 'info', 'warning', 'error'"),
        (
            {"seamlessUpgrades": {"enabled": "true"}},
            "at '/seamlessUpgrades/enabled': got string, want boolean",
        ),
        (
            {"kubeletPlugin": {"extraEnv": [{"value": "x"}]}},
            "at '/kubeletPlugin/extraEnv/0': missing property 'name'",
        ),
        ({"kubeletPlugin": {"extraEnv": {"A": "b"}}}, "at '/kubeletPlugin/extraEnv': got object, want array"),
        (
            {"kubeletPlugin": {"podSecurityContext": []}},
            "at '/kubeletPlugin/podSecurityContext': got array, want object",
        ),
        ({"metrics": {"serviceMonitor": {"interval": "30"}}}, "at '/metrics/serviceMonitor/interval'"),
        (
            {"metrics": {"serviceMonitor": {"labels": {"release": 1}}}},
            "at '/metrics/serviceMonitor/labels/release'",
        ),
        (
            {"metrics": {"servicemonitor": {}}},
            "at '/metrics': additional properties 'servicemonitor' not allowed",
        ),
        ({"nvidiaDriverRoot": "run/nvidia/driver"}, "at '/nvidiaDriverRoot'"),
        (
            {"deviceClasses": {"gpuExtendedResourceName": "gpu"}},
            "at '/deviceClasses/gpuExtendedResourceName'",
        ),
        (
            {"deviceClasses": {"gpuExtendedResourceName": "nvidia.com/GPU one"}},
            "at '/deviceClasses/gpuExtendedResourceName'",
        ),
        (
            {"deviceClasses": {"gpuExtendedResourceName": "deviceclass.resource.kubernetes.io/gpu"}},
            "at '/deviceClasses/gpuExtendedResourceName'",
        ),
        (  # Kubernetes keeps requests.<name> for quota: such a name is no extended resource
            {"deviceClasses": {"gpuExtendedResourceName": "requests.nvidia.com/gpu"}},
            "at '/deviceClasses/gpuExtendedResourceName'",
        ),
        ({"nvidiaCDIHookPath": "bin/nvidia-cdi-hook"}, "at '/nvidiaCDIHookPath'"),
    ],
)
def test_helm_rejects_invalid_values_naming_the_key(helm: Helm, values: dict[str, Any], message: str) -> None:
    error = helm.template_error(values)
    assert "values don't meet the specifications of the schema" in error
    assert message in error
