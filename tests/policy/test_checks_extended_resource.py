"""no-device-plugin-on-dra-nodes: NVIDIA's device plugin deployed by the stack onto the DRA GPU nodes."""

from __future__ import annotations

from typing import Any

import pytest
from vke_dra_policies.checks import extended_resource as er
from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r

from .helpers import pool, res

NOT_DRA = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {
                            "key": facts.LABEL_GPU_SCHEDULE,
                            "operator": "NotIn",
                            "values": [facts.LABEL_GPU_SCHEDULE_DRA],
                        }
                    ]
                }
            ]
        }
    }
}


def release(chart: str, values: Any = None, name: str = "plugin", **props: Any) -> r.Res:
    return res(pt.HELM_RELEASE, name, {"chart": chart, "values": {} if values is None else values, **props})


def project_driver(**values: Any) -> r.Res:
    return release("./driver/chart", {"deviceClasses": {"enabled": True, **values}}, name="dra-driver")


def gpu_class(mapped: bool) -> r.Res:
    return res(pt.DEVICE_CLASS, "gpu", dict(facts.DEVICE_CLASS_GPU.manifest(extended_resource=mapped)))


def daemon_set(image: str, **pod: Any) -> r.Res:
    spec = {"template": {"spec": {"containers": [{"name": "p", "image": image}], **pod}}}
    return res(pt.DAEMON_SET, "ds", {"spec": spec})


@pytest.mark.parametrize(
    "chart",
    ["nvidia-device-plugin", "nvdp/nvidia-device-plugin", "oci://ghcr.io/nvidia/nvidia-device-plugin"],
)
def test_device_plugin_chart_on_dra_nodes_is_refused(chart: str) -> None:
    (v,) = er.device_plugin_on_dra_nodes([pool(), release(chart)])
    assert v.urn is not None and v.urn.endswith("::plugin")
    assert "NVIDIA's nvidia-device-plugin chart" in v.message
    assert f"{facts.LABEL_GPU_PRESENT}=true" in v.message
    assert "the VKE DRA procedure forbids" in v.message  # no mapping in this stack
    assert "devicePlugin.enabled=false" in v.message


def test_with_the_mapping_the_message_names_it_and_kep_5004() -> None:
    (v,) = er.device_plugin_on_dra_nodes([pool(), gpu_class(True), release("nvidia-device-plugin")])
    assert "maps nvidia.com/gpu (extendedResourceName)" in v.message and "KEP-5004" in v.message


@pytest.mark.parametrize(
    ("resources", "where"),
    [
        ([gpu_class(True)], "DeviceClass"),
        ([project_driver(gpuExtendedResourceName="nvidia.com/gpu")], "deviceClasses.gpuExtendedResourceName"),
        ([release("nvidia-dra-driver-gpu", name="nv", version="25.12.0")], "NVIDIA's chart 25.12.0"),
    ],
)
def test_where_the_mapping_comes_from(resources: list[r.Res], where: str) -> None:
    mapping = er.gpu_mapping(resources)
    assert mapping is not None and where in mapping


@pytest.mark.parametrize(
    "resources",
    [
        [gpu_class(False)],
        [project_driver(gpuExtendedResourceName="")],
        [release("./driver/chart", {"deviceClasses": {"enabled": False}}, name="dra-driver")],
        [release("nvidia-dra-driver-gpu", name="nv", version="25.8.1")],
    ],
)
def test_no_mapping(resources: list[r.Res]) -> None:
    assert er.gpu_mapping(resources) is None


def test_project_chart_maps_by_default() -> None:
    """The chart's default gpuExtendedResourceName applies when the release does not set it."""
    assert er.gpu_mapping([project_driver()]) is not None


@pytest.mark.parametrize(
    "values",
    [
        {"devicePlugin": {"enabled": False}},
        {"nodeSelector": {facts.LABEL_GPU_SCHEDULE: "nvidia"}},
        {"affinity": NOT_DRA},
    ],
)
def test_device_plugin_kept_off_dra_nodes_passes(values: dict) -> None:
    assert er.device_plugin_on_dra_nodes([pool(), release("nvidia-device-plugin", values)]) == []


def test_gpu_operator_with_its_device_plugin_is_refused_and_without_passes() -> None:
    (v,) = er.device_plugin_on_dra_nodes([pool(), release("nvidia/gpu-operator")])
    assert "gpu-operator chart with devicePlugin.enabled" in v.message
    off = release("nvidia/gpu-operator", {"devicePlugin": {"enabled": False}})
    assert er.device_plugin_on_dra_nodes([pool(), off]) == []


def test_device_plugin_daemon_set() -> None:
    image = "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"
    (v,) = er.device_plugin_on_dra_nodes([pool(), daemon_set(image)])
    assert "DaemonSet running the k8s-device-plugin image" in v.message
    assert er.device_plugin_on_dra_nodes([pool(), daemon_set(image, affinity=NOT_DRA)]) == []
    assert er.device_plugin_on_dra_nodes([pool(), daemon_set("busybox:1.36")]) == []


def test_no_dra_in_the_stack_no_violation() -> None:
    plugin_pool = pool(labels=[{"key": facts.LABEL_GPU_SCHEDULE, "value": "nvidia"}])
    assert er.device_plugin_on_dra_nodes([plugin_pool, release("nvidia-device-plugin")]) == []


def test_unknown_values_are_not_judged() -> None:
    assert er.device_plugin_on_dra_nodes([pool(), release("nvidia-device-plugin", r.UNKNOWN)]) == []
    other = release("ingress-nginx")
    assert er.device_plugin_on_dra_nodes([pool(), other]) == []
