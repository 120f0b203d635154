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

With the driver gate `DynamicMIG` (`GpuPool.dynamic_mig`) a MIG-capable GPU is published as the whole GPU
and every MIG placement, each consuming its counters (`mig_devices`); a placement carries a static MIG
device's capacities, `memorySlice<i>` included. With both gates every one of those devices, placements
included, is also shared by memory as above, while still consuming its counters: the driver publishes
each device with `consumable_shares.shared_entry` and then adds `consumesCounters`. A shared device
charges its counters once, whatever number of shares it serves (the allocator).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.consumable_shares import (
    SHARE_STEP,
    RequestPolicy,
    Sharing,
    memory_shares,
    slice_device,
)
from vke_gpu_dra_core.device_model import AttributeValue, Device
from vke_gpu_dra_core.discovery import normalize
from vke_gpu_dra_core.discovery.simulated import SimulatedSource
from vke_gpu_dra_core.mig_partitions import (
    MigCatalogError,
    Partition,
    builtin_mig_catalog,
    gpu_partitions,
)
from vke_gpu_dra_core.quantity import format_quantity

#: The shape of consumable shares is core's; the planner's modules and tests read it from here too.
__all__ = [
    "SHARE_STEP",
    "GpuPool",
    "Node",
    "RequestPolicy",
    "Sharing",
    "memory_shares",
    "slice_device",
    "slice_entries",
]


@dataclass(frozen=True)
class Counters:
    """A node's shared counters (KEP-4815) and what each device consumes of them; hashable."""

    #: counter set name -> (counter name, value), as `spec.sharedCounters` publishes them
    sets: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]
    #: per device (node order): (counter set, counter, amount) it consumes; () for none
    consumes: tuple[tuple[tuple[str, str, int], ...], ...]

    def available(self) -> dict[tuple[str, str], int]:
        return {(name, counter): value for name, counters in self.sets for counter, value in counters}


@dataclass(frozen=True)
class Node:
    name: str
    pool: str
    devices: tuple[Device, ...]
    driver: str = facts.DRIVER_NAME
    #: per device (same order): how it is shared (None: one allocation at a time)
    sharing: tuple[Sharing | None, ...] = ()
    #: partitionable devices (the driver gate DynamicMIG): counter sets and consumption per device
    counters: Counters | None = None

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
    #: the driver gate DynamicMIG: MIG-capable GPUs published as partitionable devices (`mig_devices`)
    dynamic_mig: bool = False

    @property
    def label(self) -> str:
        return f"{self.name} ({self.instance_type}: {self.gpus_per_node}x {self.product})"

    def node(self, index: int) -> Node:
        return _node(
            self.name,
            self.product,
            self.gpus_per_node,
            index,
            shares=self.consumable_shares,
            mig=self.dynamic_mig,
        )

    @property
    def partitionable(self) -> bool:
        """Whether the pool's GPUs are published as MIG partitions (the gate on and MIG in the catalog)."""
        return self.dynamic_mig and mig_capable(self.product)

    def nodes(self, count: int) -> list[Node]:
        return [self.node(i) for i in range(count)]


def mig_capable(product: str) -> bool:
    """Whether core's MIG catalog has profiles for `product` (NVML product name)."""
    return product in builtin_mig_catalog()


def mig_placement_device(parent: Device, partition: Partition) -> Device:
    """A MIG placement of `parent` as a device: MIG attributes, the parent's common ones, its capacities."""
    profile = partition.profile
    if profile is None:
        raise MigCatalogError(f"{partition.name}: the whole GPU is not a MIG placement")
    attributes: dict[str, AttributeValue] = {
        k: v for k, v in parent.attributes.items() if k not in (facts.ATTR_TYPE, facts.ATTR_UUID)
    }
    attributes.update(
        {
            facts.ATTR_TYPE: facts.DEVICE_TYPE_MIG,
            facts.ATTR_PARENT_UUID: parent.uuid,
            facts.ATTR_PROFILE: profile.name,
        }
    )
    placement = partition.placement
    if placement is None:
        raise MigCatalogError(f"{partition.name}: a MIG placement without its memory slices")
    return Device(
        name=partition.name,
        device_type=facts.DEVICE_TYPE_MIG,
        uuid="",
        attributes=attributes,
        # the driver's capacities (a static MIG device's): the profile's engines and memory, and
        # `memorySlice<i>` = 1 for each memory slice the placement holds
        capacity=normalize.mig_capacity(
            multiprocessors=profile.multiprocessors,
            copy_engines=profile.copy_engines,
            decoders=profile.decoders,
            encoders=profile.encoders,
            jpeg_engines=profile.jpeg_engines,
            ofa_engines=profile.ofa_engines,
            memory_mib=profile.memory_mib,
            placement_start=placement.start,
            placement_size=placement.size,
        ),
        simulated=parent.simulated,
        extra={"parentUUID": parent.uuid},
    )


def mig_devices(gpus: tuple[Device, ...], product: str) -> tuple[tuple[Device, ...], Counters]:
    """`gpus` (gpu-0.., of `product`) as DynamicMIG publishes them: per GPU the whole GPU, then every
    placement (core's `gpu_partitions` order), with the counter sets and each device's consumption."""
    profiles = builtin_mig_catalog()[product].profiles
    devices: list[Device] = []
    consumes: list[tuple[tuple[str, str, int], ...]] = []
    sets: list[tuple[str, tuple[tuple[str, int], ...]]] = []
    for minor, gpu in enumerate(gpus):
        partitions = gpu_partitions(minor, profiles)
        sets.append((partitions.counter_set.name, tuple(partitions.counter_set.counters.items())))
        for partition in partitions.devices:
            devices.append(gpu if partition.profile is None else mig_placement_device(gpu, partition))
            consumes.append(tuple((partition.counter_set, k, v) for k, v in partition.consumes.items()))
    return tuple(devices), Counters(tuple(sets), tuple(consumes))


@lru_cache(maxsize=65536)
def _node(pool: str, product: str, gpus: int, index: int, *, shares: bool = False, mig: bool = False) -> Node:
    name = f"{pool}-node-{index}"
    devices = tuple(SimulatedSource(gpus, product, name).discover().devices)
    counters = None
    if mig and mig_capable(product):
        devices, counters = mig_devices(devices, product)
    # with both driver gates every device, the whole GPU and each placement, is also shared by memory
    # while it consumes its counters (the driver's shared_entry, then the partition layout)
    sharing = tuple(memory_shares(d) for d in devices) if shares else ()
    return Node(name, pool, devices, sharing=sharing, counters=counters)


def slice_entries(node: Node, *, shares_kept: bool, counters_kept: bool) -> list[dict[str, Any]]:
    """The node's devices as the ResourceSlice entries the planner models, on a server that keeps (or
    drops) `allowMultipleAllocations` and `requestPolicy` (DRAConsumableCapacity: `shares_kept`) and
    `consumesCounters` (DRAPartitionableDevices: `counters_kept`): what the tests compare with what the
    driver publishes."""
    entries: list[dict[str, Any]] = []
    for index, device in enumerate(node.devices):
        entry = slice_device(device, node.sharing_of(index) if shares_kept else None)
        if counters_kept and node.counters is not None and node.counters.consumes[index]:
            by_set: dict[str, dict[str, Any]] = {}
            for counter_set, counter, amount in node.counters.consumes[index]:
                by_set.setdefault(counter_set, {})[counter] = {"value": format_quantity(amount)}
            entry["consumesCounters"] = [{"counterSet": s, "counters": c} for s, c in by_set.items()]
        entries.append(entry)
    return entries
