"""DeviceClasses equal the shared facts; the `helm test` pod looks for a ResourceSlice, least privileged."""

from __future__ import annotations

from typing import Any

import pytest
from cel_expr_python import cel
from vke_gpu_dra_core import facts

from tests.chart.chartlib import (
    NAMESPACE,
    RELEASE,
    chart_metadata,
    default_values,
    find,
    find_all,
    is_test_hook,
)


def without_labels(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = {k: v for k, v in obj["metadata"].items() if k != "labels"}
    return {**obj, "metadata": metadata}


def test_device_classes_equal_the_facts(render: Any) -> None:
    classes = find_all(render({}), "DeviceClass")
    assert [without_labels(c) for c in classes] == [
        spec.manifest(extended_resource=True) for spec in facts.DEVICE_CLASSES
    ]
    for rendered in classes:
        assert set(rendered["metadata"]) == {"name", "labels"}


def test_gpu_class_maps_nvidia_gpu_by_default_as_nvidias_chart(render: Any) -> None:
    classes = {c["metadata"]["name"]: c["spec"] for c in find_all(render({}), "DeviceClass")}
    assert classes[facts.DEVICE_CLASS_GPU.name]["extendedResourceName"] == facts.GPU_EXTENDED_RESOURCE
    assert "extendedResourceName" not in classes[facts.DEVICE_CLASS_MIG.name]


def test_extended_resource_mapping_can_be_switched_off(render: Any) -> None:
    classes = find_all(render({"deviceClasses": {"gpuExtendedResourceName": ""}}), "DeviceClass")
    assert [without_labels(c) for c in classes] == [spec.manifest() for spec in facts.DEVICE_CLASSES]


def test_extended_resource_name_follows_the_value(render: Any) -> None:
    classes = find_all(
        render({"deviceClasses": {"gpuExtendedResourceName": "example.com/gpu"}}), "DeviceClass"
    )
    assert classes[0]["spec"]["extendedResourceName"] == "example.com/gpu"


def test_device_class_selectors_follow_the_driver_name(render: Any) -> None:
    classes = find_all(render({"driverName": "gpu.example.com"}), "DeviceClass")
    assert [c["metadata"]["name"] for c in classes] == [spec.name for spec in facts.DEVICE_CLASSES]
    expressions = [c["spec"]["selectors"][0]["cel"]["expression"] for c in classes]
    assert expressions == [
        facts.device_type_selector(spec.device_type, driver="gpu.example.com")
        for spec in facts.DEVICE_CLASSES
    ]


def driver_device(device_type: str) -> dict[str, Any]:
    """A device of the driver, as CEL sees it, whose `type` attribute is `device_type`."""
    return {"driver": facts.DRIVER_NAME, "attributes": {facts.DRIVER_NAME: {facts.ATTR_TYPE: device_type}}}


def test_device_classes_can_be_left_to_someone_else(render: Any) -> None:
    assert find_all(render({"deviceClasses": {"enabled": False}}), "DeviceClass") == []


@pytest.mark.parametrize(
    ("device", "selected"),
    [
        (driver_device(facts.DEVICE_TYPE_GPU), [facts.DEVICE_CLASS_GPU.name]),
        (driver_device(facts.DEVICE_TYPE_MIG), [facts.DEVICE_CLASS_MIG.name]),
        (
            {
                "driver": "gpu.example.com",
                "attributes": {"gpu.example.com": {facts.ATTR_TYPE: facts.DEVICE_TYPE_GPU}},
            },
            [],
        ),
    ],
)
def test_device_class_selectors_compile_and_select(
    render: Any, device: dict[str, Any], selected: list[str]
) -> None:
    env = cel.NewEnv(variables={"device": cel.Type.Map(cel.Type.STRING, cel.Type.DYN)})
    matches = []
    for device_class in find_all(render({}), "DeviceClass"):
        compiled = env.compile(device_class["spec"]["selectors"][0]["cel"]["expression"])
        assert compiled.return_type() == cel.Type.BOOL
        result = compiled.eval(data={"device": device})
        assert result.type() == cel.Type.BOOL, repr(result)
        if result.value():
            matches.append(device_class["metadata"]["name"])
    assert matches == selected


# ---------------------------------------------------------------- helm test


def test_helm_test_objects_are_test_hooks(render: Any) -> None:
    hooks = [o for o in render({}) if is_test_hook(o)]
    assert sorted(o["kind"] for o in hooks) == ["ClusterRole", "ClusterRoleBinding", "Pod", "ServiceAccount"]
    weights = {o["kind"]: int(o["metadata"]["annotations"]["helm.sh/hook-weight"]) for o in hooks}
    assert weights["ServiceAccount"] < weights["ClusterRoleBinding"] < weights["Pod"]
    assert weights["ClusterRole"] < weights["ClusterRoleBinding"]


def test_helm_test_may_only_list_resource_slices(render: Any) -> None:
    objects = render({})
    name = f"{RELEASE}-vke-gpu-dra-driver-test"
    role = find(objects, "ClusterRole", name)
    assert role["rules"] == [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list"]}
    ]
    binding = find(objects, "ClusterRoleBinding", name)
    assert binding["roleRef"]["name"] == name
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
    pod = find(objects, "Pod")
    assert pod["spec"]["serviceAccountName"] == find(objects, "ServiceAccount", name)["metadata"]["name"]


def test_helm_test_pod_checks_this_drivers_slices(render: Any) -> None:
    pod = find(render({"driverName": "gpu.example.com"}), "Pod")
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["python3", "-c"]
    script, driver = container["args"]
    assert driver == "gpu.example.com"
    compile(script, "helm-test", "exec")  # valid Python
    assert '"resource.k8s.io", "v1", "resourceslices"' in script
    assert 'field_selector="spec.driver=" + driver' in script
    assert "sys.exit(" in script  # fails the test when none is found
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}


def test_helm_test_image_defaults_to_the_plugin_image(render: Any) -> None:
    pod = find(render({}), "Pod")
    assert pod["spec"]["containers"][0]["image"] == (
        f"{default_values()['image']['repository']}:{chart_metadata()['appVersion']}"
    )
    pod = find(
        render({"image": {"tag": "dev"}, "helmTest": {"image": {"repository": "cr.example/tools"}}}), "Pod"
    )
    assert pod["spec"]["containers"][0]["image"] == "cr.example/tools:dev"


def test_helm_test_can_be_turned_off(render: Any) -> None:
    assert not [o for o in render({"helmTest": {"enabled": False}}) if is_test_hook(o)]


def test_helm_test_rbac_does_not_outlive_a_successful_test(render: Any) -> None:
    for hook in (o for o in render({}) if is_test_hook(o)):
        policy = hook["metadata"]["annotations"]["helm.sh/hook-delete-policy"].split(",")
        expected = (
            ["before-hook-creation"] if hook["kind"] == "Pod" else ["before-hook-creation", "hook-succeeded"]
        )
        assert policy == expected, hook["kind"]
