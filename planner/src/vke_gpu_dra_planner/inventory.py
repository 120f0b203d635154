"""The devices a GPU node pool will publish: per node, the catalog product's GPUs via the simulated source.

Devices are built by the driver's own `SimulatedSource`, so the planner sees exactly the attributes and
capacities the driver publishes (names gpu-0.., product name, architecture, compute capability, memory,
PCIe bus and root, driver versions).

With the driver gate `ConsumableShares` (`GpuPool.consumable_shares`) every GPU is also published as
NVIDIA's plugin publishes it with `--consumable-shares=memory` (its `consumable_shares.go`):
`allowMultipleAllocations: true`, and its `memory` capacity rounded down to a whole MiB with the
request policy default = the whole memory, validRange {min: 1Mi, max: the memory, step: 1Mi}. Several
claims then share one GPU, each consuming the memory it asks for (Kubernetes 1.36, DRAConsumableCapacity).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Device, binary_si
from vke_gpu_dra_core.discovery.simulated import SimulatedSource

#: NVIDIA's step (and smallest share) of a GPU's memory with consumable shares
SHARE_STEP: Final = 2**20


@dataclass(frozen=True)
class RequestPolicy:
    """A capacity's `requestPolicy`: `default`, and `validRange` {min, max, step} or `validValues`."""

    default: int | None = None
    minimum: int | None = None
    maximum: int | None = None
    step: int | None = None
    valid_values: tuple[int, ...] = ()

    def render(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.default is not None:
            out["default"] = binary_si(self.default)
        if self.minimum is not None:
            bounds = {"min": self.minimum, "max": self.maximum, "step": self.step}
            out["validRange"] = {k: binary_si(v) for k, v in bounds.items() if v is not None}
        elif self.valid_values:
            out["validValues"] = [binary_si(v) for v in self.valid_values]
        return out


@dataclass(frozen=True)
class Sharing:
    """How a device takes several allocations: `allowMultipleAllocations` and its capacities' policies
    (capacities as published, which may differ from the discovered ones by rounding)."""

    #: (name, value) and (name, policy), by name: hashable, as nodes are compared and cached
    capacities: tuple[tuple[str, int], ...]
    request_policies: tuple[tuple[str, RequestPolicy], ...]

    @property
    def capacity(self) -> Mapping[str, int]:
        return dict(self.capacities)

    @property
    def policies(self) -> Mapping[str, RequestPolicy]:
        return dict(self.request_policies)


def memory_shares(device: Device) -> Sharing:
    """NVIDIA's `--consumable-shares=memory` form of `device` (see the module docstring)."""
    capacity = dict(device.capacity)
    memory = capacity.get(facts.CAPACITY_MEMORY)
    if memory is None:
        return Sharing(tuple(sorted(capacity.items())), ())
    memory = memory // SHARE_STEP * SHARE_STEP
    capacity[facts.CAPACITY_MEMORY] = memory
    policy = RequestPolicy(default=memory, minimum=SHARE_STEP, maximum=memory, step=SHARE_STEP)
    return Sharing(tuple(sorted(capacity.items())), ((facts.CAPACITY_MEMORY, policy),))


def slice_device(device: Device, sharing: Sharing | None) -> dict[str, object]:
    """The ResourceSlice entry of `device` as the driver publishes it (with its sharing, when it has one)."""
    entry = device.slice_entry()
    if sharing is None:
        return entry
    capacity: dict[str, Any] = {}
    for name, value in sharing.capacity.items():
        capacity[name] = {"value": binary_si(value)}
        if name in sharing.policies:
            capacity[name]["requestPolicy"] = sharing.policies[name].render()
    return {**entry, "allowMultipleAllocations": True, "capacity": capacity}


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
