"""Simulated GPUs for nodes without GPUs: same Device model, values from a product profile."""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Sequence
from typing import Final

from ..profiles import get_profile
from ..simulated_gpus import (
    MAX_SIMULATED_GPUS,
    NO_NUMA_NODE,
    NUMA_NODES_FORMAT,
    numa_layout,
    parse_numa_nodes,
)
from .base import DiscoveryResult
from .devices import GpuFacts, gpu_device
from .normalize import compute_capability, cuda_driver_version, normalize_version

__all__ = [
    "MAX_SIMULATED_GPUS",
    "NO_NUMA_NODE",
    "NUMA_NODES_FORMAT",
    "SIMULATED_CUDA_DRIVER_VERSION",
    "SIMULATED_DRIVER_VERSION",
    "SimulatedSource",
    "numa_layout",
    "parse_numa_nodes",
]

#: Driver reported by simulated GPUs (NVML form, normalised on publication like a real one).
SIMULATED_DRIVER_VERSION: Final = "570.124.06"
SIMULATED_CUDA_DRIVER_VERSION: Final = 12080

#: PCI buses of the GPUs in an 8-GPU server; each hangs off a root bus one below its own.
_BUSES: Final = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def _seed(node_name: str) -> int:
    """A seed stable across processes (Python's hash() is randomised per process)."""
    return int.from_bytes(hashlib.sha256(node_name.encode()).digest()[:8], "big")


def _pci_location(index: int) -> tuple[int, int]:
    """(domain, bus) of the index-th GPU: the 8-GPU server layout, one PCI domain per 8 GPUs."""
    return index // len(_BUSES), _BUSES[index % len(_BUSES)]


class SimulatedSource:
    """`count` simulated GPUs of `product`, named gpu-0..gpu-<count-1>, with UUIDs stable per node, on the
    NUMA nodes `numa_nodes` (see `numa_layout`; none by default: no numaNode attribute)."""

    def __init__(
        self, count: int, product: str, node_name: str, numa_nodes: Sequence[int | None] = ()
    ) -> None:
        if not 0 <= count <= MAX_SIMULATED_GPUS:
            raise ValueError(f"simulated GPU count must be between 0 and {MAX_SIMULATED_GPUS}, got {count}")
        if not node_name:
            raise ValueError("simulated GPUs need a node name (it seeds their UUIDs)")
        self.count = count
        self.profile = get_profile(product)
        self.node_name = node_name
        self.numa_nodes = numa_layout(count, numa_nodes)

    def discover(self) -> DiscoveryResult:
        rng = random.Random(_seed(self.node_name))
        cc_major, cc_minor = self.profile.compute_capability
        devices = []
        for index in range(self.count):
            domain, bus = _pci_location(index)
            gpu = GpuFacts(
                minor=index,
                uuid=f"GPU-{uuid.UUID(int=rng.getrandbits(128), version=4)}",
                product_name=self.profile.product_name,
                brand=self.profile.brand,
                architecture=self.profile.architecture,
                cuda_compute_capability=compute_capability(cc_major, cc_minor),
                driver_version=normalize_version(SIMULATED_DRIVER_VERSION),
                cuda_driver_version=cuda_driver_version(SIMULATED_CUDA_DRIVER_VERSION),
                pcie_bus_id=f"{domain:04x}:{bus:02x}:00.0",
                pcie_root=f"pci{domain:04x}:{bus - 1:02x}",
                memory_bytes=self.profile.memory_bytes,
                numa_node=self.numa_nodes[index],
            )
            devices.append(gpu_device(gpu, simulated=True))
        return DiscoveryResult(devices=devices, problems=[], driver_version=SIMULATED_DRIVER_VERSION)
