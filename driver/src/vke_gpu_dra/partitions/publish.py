"""What a dynamic-MIG GPU publishes, and how its devices are laid out in ResourceSlices (pure).

A MIG-capable GPU with MIG mode on publishes its counter set (`gpu-<minor>-counter-set`), the whole GPU
consuming every counter and one device per MIG placement consuming its profile's counters and memory
slices (`vke_gpu_dra_core.mig_partitions`). A placement device carries the attributes and capacities a
static MIG device of the same placement has (type `mig`, `profile`, `parentUUID`, the parent's product,
architecture, versions, PCI attributes; capacities with `memorySlice<i>`), but no `uuid`: the MIG device
and its UUID exist only once a claim's prepare creates it.

Slice layout (`slice_layout`), by what the server keeps (`CounterLayout`):

* `inline` (1.34, DRAPartitionableDevices alpha): counter sets sit in the slice of the devices that
  consume them; as many GPUs per slice as `check_slice_limits` allows (two: 32 shared counters per slice);
* `split` (1.35 and later): the counter sets in slices of their own (at most 8 per slice), the devices of
  each GPU in a slice of their own, as NVIDIA's `generateSplitResourceSlices` does.

Devices of GPUs without dynamic MIG are chunked as before, in slices without counters.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import AttributeValue, Device
from vke_gpu_dra_core.discovery import normalize as norm
from vke_gpu_dra_core.mig_partitions import (
    CounterSet,
    GpuPartitions,
    MigProfile,
    Partition,
    SliceLimits,
    check_slice_limits,
    gpu_partitions,
    slice_limits,
)

#: Where the server keeps shared counters: beside the devices (1.34) or in slices of their own (1.35+).
CounterLayout = Literal["inline", "split"]

#: Counter sets per slice from 1.35 (ResourceSliceMaxCounterSets).
MAX_COUNTER_SETS_PER_SLICE: Final = 8

#: Attributes a placement does not copy from its parent GPU device.
_OWN_ATTRIBUTES: Final = frozenset({facts.ATTR_TYPE, facts.ATTR_UUID})


@dataclass(frozen=True)
class PartitionedGpu:
    """A GPU published under dynamic MIG: its whole device, its partitions and its placement devices."""

    whole: Device
    partitions: GpuPartitions
    #: Placement device name -> Device (no UUID; prepare creates the MIG device).
    placements: Mapping[str, Device]
    #: The MIG profiles the partitions come from.
    profiles: tuple[MigProfile, ...] = ()

    @property
    def parent_uuid(self) -> str:
        return self.whole.uuid

    @property
    def minor(self) -> int:
        minor = self.whole.minor
        if minor is not None:
            return minor
        return int(self.whole.name.rsplit("-", 1)[1])

    def partition(self, name: str) -> Partition | None:
        return next((p for p in self.partitions.devices if p.name == name), None)

    @property
    def devices(self) -> list[Device]:
        return [self.whole, *self.placements.values()]


def placement_device(whole: Device, minor: int, partition: Partition) -> Device:
    """The device of one MIG placement of GPU `whole`, attributes and capacities as a static MIG device's."""
    profile, placement = partition.profile, partition.placement
    assert profile is not None and placement is not None
    attributes: dict[str, AttributeValue] = {
        facts.ATTR_TYPE: facts.DEVICE_TYPE_MIG,
        facts.ATTR_PARENT_UUID: whole.uuid,
        facts.ATTR_PROFILE: profile.name,
    }
    attributes.update({k: v for k, v in whole.attributes.items() if k not in _OWN_ATTRIBUTES})
    return Device(
        name=partition.name,
        device_type=facts.DEVICE_TYPE_MIG,
        uuid="",
        attributes=attributes,
        capacity=norm.mig_capacity(
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
        minor=whole.minor,
        device_nodes=whole.device_nodes[:1],
        simulated=whole.simulated,
        extra={"parentUUID": whole.uuid},
    )


def partitioned_gpu(whole: Device, minor: int, profiles: Sequence[MigProfile]) -> PartitionedGpu:
    """GPU `whole` (minor `minor`) with the MIG `profiles` NVML (or the catalog) reports for it."""
    partitions = gpu_partitions(minor, profiles)
    placements = {p.name: placement_device(whole, minor, p) for p in partitions.placements}
    return PartitionedGpu(whole=whole, partitions=partitions, placements=placements, profiles=tuple(profiles))


# ------------------------------------------------------------------------------------------ slices

#: A slice's content: {"devices": [...]} and, where it carries them, {"sharedCounters": [...]}.
SliceContent = dict[str, Any]
#: Entries (health-filtered device entries) -> the slices' contents.
Layout = Callable[[Sequence[Mapping[str, Any]]], list[SliceContent]]


def _chunks(items: Sequence[Any], size: int) -> list[list[Any]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def slice_layout(
    gpus: Sequence[PartitionedGpu], counters: CounterLayout, *, kubernetes_minor: int, max_per_slice: int
) -> Layout:
    """The layout function the slice controller uses for `gpus` on a server keeping counters `counters`."""
    limits = slice_limits(kubernetes_minor)
    by_device: dict[str, tuple[int, Partition]] = {}
    for index, gpu in enumerate(gpus):
        for partition in gpu.partitions.devices:
            by_device[partition.name] = (index, partition)

    def layout(entries: Sequence[Mapping[str, Any]]) -> list[SliceContent]:
        per_gpu: list[list[dict[str, Any]]] = [[] for _ in gpus]
        plain: list[dict[str, Any]] = []
        for entry in entries:
            found = by_device.get(str(entry.get("name")))
            if found is None:
                plain.append(copy.deepcopy(dict(entry)))
                continue
            index, partition = found
            device = copy.deepcopy(dict(entry))
            device["consumesCounters"] = partition.consumes_counters()
            per_gpu[index].append(device)
        sets = [gpu.partitions.counter_set for gpu in gpus]
        contents: list[SliceContent] = []
        if counters == "split":
            contents += [
                {"sharedCounters": [s.to_api() for s in chunk]}
                for chunk in _chunks(sets, limits.max_counter_sets or MAX_COUNTER_SETS_PER_SLICE)
            ]
            contents += [{"devices": devices} for devices in per_gpu if devices]
        else:
            contents += _inline(gpus, per_gpu, limits)
        contents += [{"devices": chunk} for chunk in _chunks(plain, max_per_slice)]
        return contents or [{"devices": []}]

    return layout


def _inline(
    gpus: Sequence[PartitionedGpu], per_gpu: Sequence[list[dict[str, Any]]], limits: SliceLimits
) -> list[SliceContent]:
    """1.34: GPUs with their counter sets, as many per slice as the limits allow."""
    contents: list[SliceContent] = []
    group: list[int] = []

    def fits(indexes: list[int]) -> bool:
        counter_sets: list[CounterSet] = [gpus[i].partitions.counter_set for i in indexes]
        devices = [p for i in indexes for p in gpus[i].partitions.devices]
        return not check_slice_limits(counter_sets, devices, limits)

    def flush() -> None:
        if group:
            contents.append(
                {
                    "sharedCounters": [gpus[i].partitions.counter_set.to_api() for i in group],
                    "devices": [d for i in group for d in per_gpu[i]],
                }
            )

    for index in range(len(gpus)):
        if group and not fits([*group, index]):
            flush()
            group = []
        group.append(index)
    flush()
    return contents
