from __future__ import annotations

from typing import Any

import pulumi
import yaml
from vke_dra_policies.checks import driver
from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r

from components.manifests import dra_node_affinity

from .helpers import pool, res

AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {
                            "key": facts.LABEL_GPU_SCHEDULE,
                            "operator": "In",
                            "values": [facts.LABEL_GPU_SCHEDULE_DRA],
                        }
                    ]
                }
            ]
        }
    }
}
NULL_CONTROLLER = {
    "4dabf18193072939515e22adb298388d": "c44067f5952c0a294b673a41bacd8c17",
    "text": yaml.safe_dump({"controller": {"affinity": None}}),
}


def release(chart: str, values: Any, files: Any = None) -> r.Res:
    props: dict[str, Any] = {"chart": chart, "values": values}
    if files is not None:
        props["valueYamlFiles"] = files
    return res(pt.HELM_RELEASE, "dra-driver-release", props)


def nvidia_values(**changes: Any) -> dict[str, Any]:
    values = {
        "gpuResourcesEnabledOverride": True,
        "resources": {"computeDomains": {"enabled": False}},
        "kubeletPlugin": {"affinity": AFFINITY},
    }
    values.update(changes)
    return values


def messages(rel: r.Res, kind: driver.DriverKind = "nvidia", **kw: Any) -> list[str]:
    return [v.message for v in driver.values(rel, kind, **kw)]


def test_driver_kind_from_the_chart_reference() -> None:
    assert driver.driver_kind(release(facts.NVIDIA_CHART, {})) == "nvidia"
    assert driver.driver_kind(release(f"oci://ghcr.io/nvidia/{facts.NVIDIA_CHART}", {})) == "nvidia"
    assert driver.driver_kind(release("./driver/chart", {})) == "python"
    assert driver.driver_kind(release("ingress-nginx", {})) is None
    assert driver.driver_kind(res(pt.NAMESPACE, "ns", {"chart": "./driver/chart"})) is None


def test_procedure_values_pass_with_the_null_in_a_values_file() -> None:
    assert messages(release(facts.NVIDIA_CHART, nvidia_values(), [NULL_CONTROLLER])) == []


def test_a_string_asset_object_is_read_like_its_wire_form() -> None:
    asset = pulumi.StringAsset(NULL_CONTROLLER["text"])
    assert messages(release(facts.NVIDIA_CHART, nvidia_values(), [asset])) == []


def test_values_override_values_files() -> None:
    rel = release(
        facts.NVIDIA_CHART,
        nvidia_values(controller={"affinity": {"podAffinity": {}}}),
        [NULL_CONTROLLER],
    )
    (message,) = messages(rel)
    assert "controller.affinity is {'podAffinity': {}}" in message


def test_each_missing_procedure_value_is_its_own_violation() -> None:
    values = nvidia_values(gpuResourcesEnabledOverride="false", resources={})
    found = messages(release(facts.NVIDIA_CHART, values))
    assert len(found) == 3
    assert "gpuResourcesEnabledOverride is 'false'" in found[0]
    assert "computeDomains.enabled is None" in found[1]
    assert "controller.affinity is not set" in found[2]


def test_kubelet_plugin_placement() -> None:
    anywhere = release("./driver/chart", {"kubeletPlugin": {"affinity": None}})
    (message,) = messages(anywhere, "python")
    assert "may run on nodes without DRA" in message
    assert messages(anywhere, "python", dra_nodes=False) == []
    by_selector = release(
        "./driver/chart",
        {
            "kubeletPlugin": {
                "affinity": None,
                "nodeSelector": {facts.LABEL_GPU_SCHEDULE: facts.LABEL_GPU_SCHEDULE_DRA},
            }
        },
    )
    assert messages(by_selector, "python") == []
    # The program's affinity with one more label value: the plugin could land on non-DRA GPU nodes.
    wider = dra_node_affinity()
    terms = wider["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    terms[0]["matchExpressions"][0]["values"] = [
        facts.LABEL_GPU_SCHEDULE_DRA,
        facts.LABEL_GPU_SCHEDULE_CONFLICTING[0],
    ]
    assert len(messages(release("./driver/chart", {"kubeletPlugin": {"affinity": wider}}), "python")) == 1


def test_the_project_charts_defaults_count_nvidias_do_not() -> None:
    """driver/chart's values.yaml restricts the plugin by default; NVIDIA's chart needs the value set."""
    assert driver.project_chart_defaults()["kubeletPlugin"]["affinity"]
    assert messages(release("./driver/chart", {}), "python") == []
    nvidia = release(
        facts.NVIDIA_CHART,
        {k: v for k, v in nvidia_values().items() if k != "kubeletPlugin"},
        [NULL_CONTROLLER],
    )
    (message,) = messages(nvidia)
    assert "kubeletPlugin node affinity is None" in message


def test_which_release_renders_the_device_classes() -> None:
    assert driver.chart_creates_device_classes(release(facts.NVIDIA_CHART, {}), "nvidia") is True
    assert (
        driver.chart_creates_device_classes(release("./driver/chart", {}), "python") is True
    )  # chart default
    off = release("./driver/chart", {"deviceClasses": {"enabled": False}})
    assert driver.chart_creates_device_classes(off, "python") is False
    unknown = release("./driver/chart", {"deviceClasses": {"enabled": r.UNKNOWN}})
    assert driver.chart_creates_device_classes(unknown, "python") is None


def test_unknown_values_during_preview_are_not_judged() -> None:
    assert messages(release(facts.NVIDIA_CHART, r.UNKNOWN)) == []
    assert (
        messages(
            release(
                facts.NVIDIA_CHART,
                nvidia_values(gpuResourcesEnabledOverride=r.UNKNOWN),
                [NULL_CONTROLLER],
            )
        )
        == []
    )


def test_stack_scope_of_the_placement_rule() -> None:
    anywhere = release("./driver/chart", {"kubeletPlugin": {"affinity": None}})
    assert driver.driver_values([anywhere]) == []  # an existing cluster: no DRA nodes made by the stack
    assert len(driver.driver_values([anywhere, pool()])) == 1
