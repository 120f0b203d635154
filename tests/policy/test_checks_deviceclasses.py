from __future__ import annotations

from typing import Any

import pytest
from vke_dra_policies import selectors
from vke_dra_policies.checks import deviceclasses
from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r

from .helpers import pool, res


def device_class(name: str, *expressions: Any) -> r.Res:
    return res(
        pt.DEVICE_CLASS,
        f"dc-{name}",
        {
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
        },
    )


def shipped() -> list[r.Res]:
    return [device_class(dc.name, dc.cel_expression) for dc in facts.DEVICE_CLASSES]


def test_shipped_classes_select_their_own_device_kind_only() -> None:
    samples = selectors.sample_devices()
    assert (
        samples.gpu.device_type == facts.DEVICE_TYPE_GPU and samples.mig.device_type == facts.DEVICE_TYPE_MIG
    )
    gpu, mig = facts.DEVICE_CLASS_GPU.cel_expression, facts.DEVICE_CLASS_MIG.cel_expression
    assert (selectors.matches(gpu, samples.gpu), selectors.matches(gpu, samples.mig)) == (True, False)
    assert (selectors.matches(mig, samples.mig), selectors.matches(mig, samples.gpu)) == (True, False)
    assert deviceclasses.device_classes([*shipped(), pool()]) == []


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("device.driver ==", "Syntax error"),
        ("device.driver == 'x'", None),
        ("'gpu'", "must evaluate to bool"),
        ("gpu.type == 'gpu'", "undeclared reference"),
        ("1 + 'a' == 2", "no matching overload"),
        # typed like the apiserver's DRADevice: driver is a string, no other top-level fields
        ("device.driver == 1", "found no matching overload for '_==_' applied to '(string, int)'"),
        ("device.nosuch == 'x'", "undefined field 'nosuch'"),
        (f"device.attributes['{facts.DRIVER_NAME}'].productName == 1", None),  # attributes are dyn
        ("", "empty expression"),
    ],
)
def test_compile_errors(expression: str, error: str | None) -> None:
    found = selectors.compile_error(expression)
    assert (found is None) if error is None else (error in (found or ""))


def test_kubernetes_semver_and_quantity_functions() -> None:
    gpu = selectors.sample_devices().gpu
    memory = f"device.capacity['{facts.DRIVER_NAME}'].memory"
    assert selectors.matches(f"{memory}.compareTo(quantity('40Gi')) >= 0", gpu) is True
    assert selectors.matches(f"{memory}.isGreaterThan(quantity('80Gi'))", gpu) is False
    version = f"device.attributes['{facts.DRIVER_NAME}'].driverVersion"
    assert selectors.matches(f"{version}.isGreaterThan(semver('550.0.0'))", gpu) is True
    assert selectors.compile_error(f"{version}.compareTo(semver('550.0.0')) >= 0") is None


def test_missing_attribute_is_an_evaluation_error_like_kubernetes() -> None:
    result = selectors.matches(
        f"device.attributes['{facts.DRIVER_NAME}'].nosuch == 'x'", selectors.sample_devices().gpu
    )
    assert result == "evaluation error: no such key: nosuch"


def test_compile_error_names_the_expression_and_the_engines_error_on_one_line() -> None:
    fast = device_class("fast.example.com", "device.driver == 1")
    (v,) = deviceclasses.device_classes([fast, *shipped()])
    assert v.urn == fast.urn
    assert v.message.startswith(
        f'{fast.label}: spec.selectors[0].cel.expression "device.driver == 1" does not compile: '
    )
    assert "found no matching overload for '_==_' applied to '(string, int)'" in v.message
    assert "\n" not in v.message and "fix the expression" in v.message


def test_gpu_class_that_selects_nothing() -> None:
    broken = device_class(facts.DEVICE_CLASS_GPU.name, "device.driver == 'other.example.com'")
    (v,) = deviceclasses.device_classes([broken, shipped()[1]])
    assert "do not select a full GPU" in v.message and "does not match" in v.message


def test_mig_class_with_a_missing_attribute_reports_the_evaluation_error() -> None:
    broken = device_class(
        facts.DEVICE_CLASS_MIG.name, f"device.attributes['{facts.DRIVER_NAME}'].nosuch == 'x'"
    )
    (v,) = deviceclasses.device_classes([shipped()[0], broken])
    assert "evaluation error" in v.message and "select a MIG device" in v.message


def test_class_without_selectors_and_other_classes() -> None:
    empty = res(pt.DEVICE_CLASS, "dc-empty", {"metadata": {"name": "empty.example.com"}, "spec": {}})
    (v,) = deviceclasses.device_classes([*shipped(), empty])
    assert "has no CEL selector" in v.message
    other = device_class("fast.example.com", f"device.driver == '{facts.DRIVER_NAME}'")
    assert deviceclasses.device_classes([*shipped(), other]) == []  # not one of the two: compile check only


def test_missing_classes_in_a_dra_stack() -> None:
    found = deviceclasses.device_classes([shipped()[0], pool()])
    assert [v.message.split('"')[1] for v in found] == [facts.DEVICE_CLASS_MIG.name]
    assert deviceclasses.device_classes([]) == []  # no DRA in the stack: nothing required


def test_nvidia_chart_provides_the_classes() -> None:
    chart = res(pt.HELM_RELEASE, "rel", {"chart": facts.NVIDIA_CHART, "values": {}})
    assert deviceclasses.device_classes([chart, pool()]) == []
    assert deviceclasses.class_names([chart]) == {dc.name for dc in facts.DEVICE_CLASSES}


def test_unknown_names_or_expressions_are_not_judged() -> None:
    unknown = res(pt.DEVICE_CLASS, "dc", {"metadata": {"name": r.UNKNOWN}, "spec": {"selectors": []}})
    assert deviceclasses.device_classes([unknown, pool()]) == []
    assert (
        deviceclasses.device_classes([device_class(facts.DEVICE_CLASS_GPU.name, r.UNKNOWN), shipped()[1]])
        == []
    )


def test_project_chart_with_its_classes_on() -> None:
    chart = res(pt.HELM_RELEASE, "rel", {"chart": "./driver/chart", "values": {}})
    assert deviceclasses.device_classes([chart, pool()]) == []
    renamed = res(
        pt.HELM_RELEASE, "rel", {"chart": "./driver/chart", "values": {"driverName": "gpu.example.com"}}
    )
    found = deviceclasses.device_classes([renamed, pool()])
    assert len(found) == 2 and all("do not select" in v.message for v in found)


def test_a_class_rendered_by_the_chart_and_created_by_the_program() -> None:
    chart = res(pt.HELM_RELEASE, "rel", {"chart": "./driver/chart", "values": {}})
    (v,) = deviceclasses.device_classes([chart, shipped()[0], pool()])
    assert "also rendered by" in v.message and "deviceClasses.enabled=false" in v.message
    off = res(
        pt.HELM_RELEASE, "rel", {"chart": "./driver/chart", "values": {"deviceClasses": {"enabled": False}}}
    )
    assert deviceclasses.device_classes([off, *shipped(), pool()]) == []
