"""Assemble `Device`s from normalised facts (shared by the NVML and simulated sources)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .. import facts
from ..device_model import AttributeValue, Device, Version
from .normalize import gpu_device_name, pci_bus_id_attribute


@dataclass(frozen=True)
class GpuFacts:
    """What discovery learnt about one full GPU, already normalised."""

    minor: int
    uuid: str
    product_name: str
    brand: str
    architecture: str
    cuda_compute_capability: Version
    driver_version: Version
    cuda_driver_version: Version
    pcie_bus_id: str
    pcie_root: str | None
    memory_bytes: int
    #: `HMM`, `ATS` or `None` on coherent-memory platforms; None where NVML does not support the query.
    addressing_mode: str | None = None
    #: NUMA node of the GPU's PCI function; None where it has none (sysfs -1) or it is unknown.
    numa_node: int | None = None


def common_attributes(gpu: GpuFacts) -> dict[str, AttributeValue]:
    """Attributes a MIG device copies from its parent (and a full GPU publishes itself)."""
    attrs: dict[str, AttributeValue] = {
        facts.ATTR_PRODUCT_NAME: gpu.product_name,
        facts.ATTR_BRAND: gpu.brand,
        facts.ATTR_ARCHITECTURE: gpu.architecture,
        facts.ATTR_CUDA_COMPUTE_CAPABILITY: gpu.cuda_compute_capability,
        facts.ATTR_DRIVER_VERSION: gpu.driver_version,
        facts.ATTR_CUDA_DRIVER_VERSION: gpu.cuda_driver_version,
        facts.ATTR_PCIE_BUS_ID: gpu.pcie_bus_id,
        facts.ATTR_PCI_BUS_ID: pci_bus_id_attribute(gpu.pcie_bus_id, gpu.uuid),
    }
    if gpu.pcie_root is not None:
        attrs[facts.ATTR_PCIE_ROOT] = gpu.pcie_root
    if gpu.numa_node is not None:
        attrs[facts.ATTR_NUMA_NODE] = gpu.numa_node
    if gpu.addressing_mode is not None:
        attrs[facts.ATTR_ADDRESSING_MODE] = gpu.addressing_mode
    return attrs


def gpu_device(gpu: GpuFacts, *, simulated: bool = False) -> Device:
    attrs: dict[str, AttributeValue] = {facts.ATTR_TYPE: facts.DEVICE_TYPE_GPU, facts.ATTR_UUID: gpu.uuid}
    attrs.update(common_attributes(gpu))
    return Device(
        name=gpu_device_name(gpu.minor),
        device_type=facts.DEVICE_TYPE_GPU,
        uuid=gpu.uuid,
        attributes=attrs,
        capacity={facts.CAPACITY_MEMORY: gpu.memory_bytes},
        minor=None if simulated else gpu.minor,
        device_nodes=() if simulated else (f"/dev/nvidia{gpu.minor}",),
        simulated=simulated,
    )


def mig_device(
    parent: GpuFacts,
    *,
    name: str,
    uuid: str,
    profile: str,
    capacity: Mapping[str, int],
    caps_nodes: tuple[str, ...],
) -> Device:
    attrs: dict[str, AttributeValue] = {
        facts.ATTR_TYPE: facts.DEVICE_TYPE_MIG,
        facts.ATTR_UUID: uuid,
        facts.ATTR_PARENT_UUID: parent.uuid,
        facts.ATTR_PROFILE: profile,
    }
    attrs.update(common_attributes(parent))
    return Device(
        name=name,
        device_type=facts.DEVICE_TYPE_MIG,
        uuid=uuid,
        attributes=attrs,
        capacity=dict(capacity),
        minor=parent.minor,
        device_nodes=(f"/dev/nvidia{parent.minor}", *caps_nodes),
        extra={"parentUUID": parent.uuid},
    )
