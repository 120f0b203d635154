from __future__ import annotations

from typing import Any

from vke_dra_policies.checks import sharing
from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r

from .helpers import res


def release(gates: Any = None, chart: str = "./driver/chart") -> r.Res:
    values: dict[str, Any] = {} if gates is None else {"featureGates": gates}
    return res(pt.HELM_RELEASE, "dra-driver-release", {"chart": chart, "values": values})


def config(strategy: Any, driver: str = facts.DRIVER_NAME) -> list[dict[str, Any]]:
    params = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": strategy},
    }
    return [{"opaque": {"driver": driver, "parameters": params}, "requests": ["gpu"]}]


def template(strategy: Any, **kw: Any) -> r.Res:
    return res(
        pt.RESOURCE_CLAIM_TEMPLATE,
        "shared",
        {"spec": {"spec": {"devices": {"config": config(strategy, **kw)}}}},
    )


def messages(*resources: r.Res) -> list[str]:
    return [v.message for v in sharing.sharing_gates(list(resources))]


def test_sharing_without_its_gate_is_refused() -> None:
    (message,) = messages(release(), template("TimeSlicing"))
    assert "spec.spec.devices.config[0].opaque.parameters.sharing.strategy is TimeSlicing" in message
    assert "feature gate TimeSlicingSettings" in message and "driver.featureGates" in message
    (message,) = messages(release({"TimeSlicingSettings": True}), template("MPS"))
    assert "MPSSupport" in message


def test_sharing_with_its_gate_passes_on_either_chart() -> None:
    assert messages(release({"TimeSlicingSettings": True}), template("TimeSlicing")) == []
    assert messages(release({"MPSSupport": True}, chart=facts.NVIDIA_CHART), template("MPS")) == []


def test_claims_and_device_classes_are_checked_too() -> None:
    claim = res(pt.RESOURCE_CLAIM, "c", {"spec": {"devices": {"config": config("MPS")}}})
    device_class = res(pt.DEVICE_CLASS, "d", {"spec": {"config": config("TimeSlicing")}})
    assert len(messages(release({"MPSSupport": False}), claim, device_class)) == 2


def test_other_drivers_unknown_values_and_stacks_without_driver_are_left_alone() -> None:
    assert messages(release(), template("MPS", driver="other.example.com")) == []
    assert messages(release(r.UNKNOWN), template("MPS")) == []
    assert messages(release(), template(r.UNKNOWN)) == []
    assert messages(template("MPS")) == []


def test_unknown_strategy_is_named() -> None:
    (message,) = messages(release(), template("Exclusive"))
    assert "'Exclusive'" in message
