"""The devices a GPU node pool will publish: per node, the catalog product's GPUs via the simulated source.

Devices are built by the driver's own `SimulatedSource`, so the planner sees exactly the attributes and
capacities the driver publishes (names gpu-0.., product name, architecture, compute capability, memory,
PCIe bus and root, driver versions).

With the driver gate `ConsumableShares` (`GpuPool.consumable_shares`) every GPU is also published as
NVIDIA's plugin publishes it with `--consumable-shares=memory` (its `consumable_shares.go`):
`allowMultipleAllocations: true`, and its `memory` capacity rounded down to a whole MiB with the
request policy default = the whole memory, validRange {min: 1Mi, max: the memory, step: 1Mi}. Several
claims then share one GPU, each consuming the memory it asks for (Kubernetes 1.36, DRAConsumableCapacity).
The shape is core's (`vke_gpu_dra_core.consumable_shares`), the one the driver publishes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.consumable_shares import (
    SHARE_STEP,
    RequestPolicy,
    Sharing,
    memory_shares,
    slice_device,
)
from vke_gpu_dra_core.device_model import Device
from vke_gpu_dra_core.discovery.simulated import SimulatedSource

#: The shape of consumable shares is core's; the planner's modules and tests read it from here too.
__all__ = ["SHARE_STEP", "GpuPool", "Node", "RequestPolicy", "Sharing", "memory_shares", "slice_device"]


@dataclass(frozen=True)
class Node:
    name: str
    pool: str
    devices: tuple[Device, ...]
    driver: str = facts.DRIVER_NAME
    #: per device (same order): how it is shared (None: one allocation at a time)
    sharing: tuple[Sharing | None, ...] = ()

    def sharing_of(self, index: int) -> Sharing | None:
        return self.sharing[index] if self.sharing else None


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
    #: the driver gate ConsumableShares: GPUs published for several claims each (`memory_shares`)
    consumable_shares: bool = False

    @property
    def label(self) -> str:
        return f"{self.name} ({self.instance_type}: {self.gpus_per_node}x {self.product})"

    def node(self, index: int) -> Node:
        return _node(self.name, self.product, self.gpus_per_node, index, self.consumable_shares)

    def nodes(self, count: int) -> list[Node]:
        return [self.node(i) for i in range(count)]


@lru_cache(maxsize=65536)
def _node(pool: str, product: str, gpus: int, index: int, shares: bool = False) -> Node:
    name = f"{pool}-node-{index}"
    devices = tuple(SimulatedSource(gpus, product, name).discover().devices)
    sharing = tuple(memory_shares(d) for d in devices) if shares else ()
    return Node(name, pool, devices, sharing=sharing)
