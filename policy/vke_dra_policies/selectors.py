"""DeviceClass selectors against the driver's own devices, in the DRA CEL environment of the operator tools.

Compiling and evaluating is the capacity planner's CEL environment (`vke_gpu_dra_planner`: type-checked
like the apiserver, with Kubernetes' quantity() and semver() libraries); this module only supplies the sample
devices (a full GPU from the driver's simulated discovery, a MIG device from its MIG builder) and words the
results for the policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Final

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Device, Version
from vke_gpu_dra_core.discovery.devices import GpuFacts, mig_device
from vke_gpu_dra_core.discovery.simulated import SimulatedSource
from vke_gpu_dra_planner import (
    DeviceContext,
    SelectorCompileError,
    SelectorError,
    compile_selector,
)

SAMPLE_NODE: Final = "policy-sample-node"


def _one_line(detail: str) -> str:
    """The engine's issues without their source excerpt and caret lines, joined by "; "."""
    return "; ".join(line for line in detail.split("\n") if line.strip() and not line.startswith(" |"))


def compile_error(expression: str) -> str | None:
    """None when `expression` compiles as the apiserver would compile it; else the engine's error."""
    try:
        compile_selector(expression)
    except SelectorCompileError as err:
        return _one_line(err.detail)
    return None


def matches(expression: str, device: Device) -> bool | str:
    """True/False, or the evaluation error (a missing attribute is an error, as in Kubernetes)."""
    try:
        return compile_selector(expression).evaluate(DeviceContext(facts.DRIVER_NAME, device))
    except SelectorError as err:
        return f"evaluation error: {_one_line(err.detail)}"


@dataclass(frozen=True)
class Samples:
    gpu: Device
    mig: Device


@cache
def sample_devices() -> Samples:
    """A full GPU from the driver's simulated discovery and a MIG device built by its MIG builder."""
    gpu = (
        SimulatedSource(count=1, product="NVIDIA A100-SXM4-40GB", node_name=SAMPLE_NODE).discover().devices[0]
    )
    parent = GpuFacts(
        minor=0,
        uuid=gpu.uuid,
        product_name=str(gpu.attributes[facts.ATTR_PRODUCT_NAME]),
        brand=str(gpu.attributes[facts.ATTR_BRAND]),
        architecture=str(gpu.attributes[facts.ATTR_ARCHITECTURE]),
        cuda_compute_capability=_version(gpu, facts.ATTR_CUDA_COMPUTE_CAPABILITY),
        driver_version=_version(gpu, facts.ATTR_DRIVER_VERSION),
        cuda_driver_version=_version(gpu, facts.ATTR_CUDA_DRIVER_VERSION),
        pcie_bus_id=str(gpu.attributes[facts.ATTR_PCIE_BUS_ID]),
        pcie_root=str(gpu.attributes.get(facts.ATTR_PCIE_ROOT, "")) or None,
        memory_bytes=gpu.capacity[facts.CAPACITY_MEMORY],
    )
    mig = mig_device(
        parent,
        name="gpu-0-mig-1g5gb-0",
        uuid="MIG-00000000-0000-4000-8000-000000000001",
        profile="1g.5gb",
        capacity={facts.CAPACITY_MEMORY: 5 * 2**30, facts.CAPACITY_MULTIPROCESSORS: 14},
        caps_nodes=(),
    )
    return Samples(gpu=gpu, mig=mig)


def _version(device: Device, name: str) -> Version:
    value = device.attributes[name]
    if not isinstance(value, Version):
        raise TypeError(f"sample attribute {name} is {value!r}, expected a version")
    return value
