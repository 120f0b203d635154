"""The devices a GPU node pool will publish: per node, the catalog product's GPUs via the simulated source.

Devices are built by the driver's own `SimulatedSource`, so the planner sees exactly the attributes and
capacities the driver publishes (names gpu-0.., product name, architecture, compute capability, memory,
PCIe bus and root, driver versions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Device
from vke_gpu_dra_core.discovery.simulated import SimulatedSource


@dataclass(frozen=True)
class Node:
    name: str
    pool: str
    devices: tuple[Device, ...]
    driver: str = facts.DRIVER_NAME


@dataclass(frozen=True)
class GpuPool:
    """One GPU node pool variant: nodes of one instance type (a pool listing several types gives several)."""

    name: str
    instance_type: str
    product: str
    gpus_per_node: int
    min_nodes: int
    max_nodes: int
    #: Notes for the reader (unverified catalog rows, simulated devices, ...).
    notes: tuple[str, ...] = field(default=())
    #: Node labels the pool sets, and its taints as (key, value, effect).
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[tuple[str, str, str], ...] = ()
    #: vCPUs and memory of the instance type (catalog; None when unknown): what the scheduler's
    #: resource scores divide by
    vcpus: int | None = None
    memory_gib: int | None = None

    @property
    def label(self) -> str:
        return f"{self.name} ({self.instance_type}: {self.gpus_per_node}x {self.product})"

    def node(self, index: int) -> Node:
        return _node(self.name, self.product, self.gpus_per_node, index)

    def nodes(self, count: int) -> list[Node]:
        return [self.node(i) for i in range(count)]


@lru_cache(maxsize=65536)
def _node(pool: str, product: str, gpus: int, index: int) -> Node:
    name = f"{pool}-node-{index}"
    devices = SimulatedSource(gpus, product, name).discover().devices
    return Node(name, pool, tuple(devices))
