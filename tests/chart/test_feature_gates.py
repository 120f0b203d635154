"""featureGates: passed to the plugin as NVIDIA's chart does; MPSSupport adds the daemons' env and a Role."""

from __future__ import annotations

from typing import Any

from vke_gpu_dra.config import parse_config
from vke_gpu_dra_core import featuregates

from tests.chart.chartlib import NAMESPACE, find, find_all, plugin_container


def env_of(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in plugin_container(objects)["env"]}


def test_no_gates_no_env_no_role(render: Any) -> None:
    objects = render({})
    assert "FEATURE_GATES" not in env_of(objects) and "IMAGE_NAME" not in env_of(objects)
    assert find_all(objects, "Role") == [] and find_all(objects, "RoleBinding") == []


def test_gates_reach_the_plugin_in_nvidias_form_and_parse(render: Any) -> None:
    env = env_of(render({"featureGates": {"TimeSlicingSettings": True, "MPSSupport": False}}))
    assert env["FEATURE_GATES"] == "MPSSupport=false,TimeSlicingSettings=true,"
    gates = parse_config(["--node-name", "n"], {"FEATURE_GATES": env["FEATURE_GATES"]}).feature_gates
    assert gates.time_slicing and not gates.mps


def test_mps_adds_namespace_image_and_a_role_for_deployments_in_the_namespace(render: Any) -> None:
    objects = render({"featureGates": {"MPSSupport": True}, "image": {"tag": "9.9"}})
    env = env_of(objects)
    assert env["NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["IMAGE_NAME"] == plugin_container(objects)["image"]
    assert env["NVIDIA_DRIVER_ROOT"] == "/"  # the host path the daemons mount
    role = find(objects, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "create", "delete"]}
    ]
    binding = find(objects, "RoleBinding")
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert (
        binding["subjects"][0]["name"]
        == find(objects, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"]
    )
    config = parse_config(["--node-name", "n"], {k: v for k, v in env.items() if isinstance(v, str)})
    assert config.feature_gates.mps and config.image_name == env["IMAGE_NAME"]


def test_device_metadata_reaches_the_plugin_and_grants_nothing(render: Any) -> None:
    objects = render({"featureGates": {"DeviceMetadata": True}})
    env = env_of(objects)
    assert env["FEATURE_GATES"] == "DeviceMetadata=true,"
    assert parse_config(
        ["--node-name", "n"], {"FEATURE_GATES": env["FEATURE_GATES"]}
    ).feature_gates.device_metadata
    assert find_all(objects, "Role") == []  # files on the node only: no API access


def test_unknown_gates_and_non_booleans_are_refused(helm: Any) -> None:
    assert "featureGates" in helm.template_error({"featureGates": {"Sharing": True}})
    assert "featureGates" in helm.template_error({"featureGates": {"MPSSupport": "yes"}})


def test_schema_knows_exactly_the_plugins_gates() -> None:
    import json

    from tests.chart.chartlib import CHART_DIR

    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    assert set(schema["properties"]["featureGates"]["properties"]) == set(featuregates.DEFAULTS)


def test_gates_the_plugin_refuses_together_are_refused_by_the_chart_with_the_plugins_words(
    helm: Any,
) -> None:
    for pair in ({"ConsumableShares": True, "MPSSupport": True}, {"DynamicMIG": True, "MPSSupport": True}):
        error = helm.template_error({"featureGates": pair})
        reason = featuregates.conflicts(pair)
        assert reason is not None and f"featureGates: {reason}" in error
    # one of each pair, or the pair with one off, renders
    helm.template({"featureGates": {"DynamicMIG": True, "MPSSupport": False}})
    helm.template({"featureGates": {"ConsumableShares": True, "DynamicMIG": True}})
