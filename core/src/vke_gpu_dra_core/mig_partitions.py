"""MIG partitions as KEP-4815 partitionable devices: one definition for the driver's slices and the planner.

A MIG-capable GPU publishes one counter set, `gpu-<minor>-counter-set`, and every possible MIG placement
as a device that consumes from it, the way NVIDIA's DynamicMIG does (kubernetes-sigs/dra-driver-nvidia-gpu,
cmd/gpu-kubelet-plugin/partitions.go, mig.go, nvlib.go's inspectMigProfilesAndPlacements):

* counters: one per capacity of a GPU-instance profile, named as NVIDIA derives them from the capacity
  names (camelCase to DNS label): `multiprocessors`, `copy-engines`, `decoders`, `encoders`,
  `jpeg-engines`, `ofa-engines`, `memory` (bytes); each counter's value in the set is the largest over all
  profiles and placements. Plus one counter per memory slice, `memory-slice-<i>` = 1 for i below the
  largest placement size, so two placements sharing a memory slice exclude each other;
* a placement device `gpu-<minor>-mig-<profile without dots, '+' as '-'>-<giProfileId>-<placementStart>`
  consumes its profile's capacities and `memory-slice-<start>` .. `memory-slice-<start+size-1>`;
* the whole GPU `gpu-<minor>` consumes every counter of the set, so it excludes every placement.

Only profiles whose compute instance spans the whole GPU instance are published (NVIDIA skips the others).
The profiles come from the catalog (`mig_catalog.yaml`, per product, with sources) or from what NVML
reports on a node (`MigProfile` rows built by the driver); both go through the same functions.

`check_slice_limits` checks one ResourceSlice's share of this against KEP-4815's validation limits of the
server version (`pkg/apis/resource/types.go`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Final

import yaml

from .quantity import format_quantity

_MIB: Final = 2**20

#: Counter names, in NVIDIA's order of capacities (CommonCapacitiesMig), as NVIDIA derives them.
COUNTER_MULTIPROCESSORS: Final = "multiprocessors"
COUNTER_COPY_ENGINES: Final = "copy-engines"
COUNTER_DECODERS: Final = "decoders"
COUNTER_ENCODERS: Final = "encoders"
COUNTER_JPEG_ENGINES: Final = "jpeg-engines"
COUNTER_OFA_ENGINES: Final = "ofa-engines"
COUNTER_MEMORY: Final = "memory"
MEMORY_SLICE_COUNTER_PREFIX: Final = "memory-slice-"

_PROFILE_FIELDS: Final = (
    "id",
    "index",
    "slices",
    "multiprocessors",
    "copyEngines",
    "decoders",
    "encoders",
    "jpegEngines",
    "ofaEngines",
    "memoryMiB",
    "placements",
    "size",
)
_PROFILE_NAME_RE: Final = re.compile(r"^[1-8]g\.[0-9]+gb([+-][a-z.]+)?$")


class MigCatalogError(ValueError):
    """A MIG catalog entry or NVML-reported profile that is not valid; the message names it and the field."""


@dataclass(frozen=True)
class MigPlacement:
    """A GPU-instance placement as NVML reports it (nvmlGpuInstancePlacement_t): slices start..start+size."""

    start: int
    size: int

    @property
    def memory_slices(self) -> range:
        return range(self.start, self.start + self.size)

    def overlaps(self, other: MigPlacement) -> bool:
        return self.start < other.start + other.size and other.start < self.start + self.size


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile of a GPU (nvmlGpuInstanceProfileInfo_v2_t) and its possible placements."""

    #: Profile name as nvidia-smi and go-nvlib print it, e.g. "1g.10gb" or "1g.10gb+me".
    name: str
    #: NVML GPU-instance profile id (info.id), used in device names and for creation.
    profile_id: int
    #: NVML profile index (NVML_GPU_INSTANCE_PROFILE_*), the argument of nvmlDeviceGetGpuInstanceProfileInfoV.
    index: int
    #: Compute slices (info.sliceCount).
    slices: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    memory_mib: int
    placements: tuple[MigPlacement, ...]

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * _MIB

    def capacity_counters(self) -> dict[str, int]:
        """This profile's counters without the memory slices (NVIDIA's CommonCapacitiesMig, as counters)."""
        return {
            COUNTER_MULTIPROCESSORS: self.multiprocessors,
            COUNTER_COPY_ENGINES: self.copy_engines,
            COUNTER_DECODERS: self.decoders,
            COUNTER_ENCODERS: self.encoders,
            COUNTER_JPEG_ENGINES: self.jpeg_engines,
            COUNTER_OFA_ENGINES: self.ofa_engines,
            COUNTER_MEMORY: self.memory_bytes,
        }


@dataclass(frozen=True)
class MigProduct:
    """The MIG profiles of one GPU product (catalog row)."""

    product_name: str
    memory_slices: int
    source: str
    profiles: tuple[MigProfile, ...]

    def profile(self, name: str) -> MigProfile:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        raise MigCatalogError(
            f"{self.product_name}: no MIG profile {name!r}; allowed: "
            f"{', '.join(p.name for p in self.profiles)}"
        )


# ------------------------------------------------------------------------------------------- catalog


def _count(at: str, field: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise MigCatalogError(f"{at}.{field}: {value!r}; allowed: a whole number >= {minimum}")
    return value


def _profile(at: str, name: Any, raw: Any, memory_slices: int) -> MigProfile:
    if not isinstance(name, str) or not _PROFILE_NAME_RE.match(name):
        raise MigCatalogError(
            f"{at}: profile name {name!r}; allowed: <G>g.<GB>gb with an optional attribute, e.g. 1g.10gb+me"
        )
    at = f"{at}[{name!r}]"
    if not isinstance(raw, Mapping):
        raise MigCatalogError(f"{at}: must be a map with {', '.join(_PROFILE_FIELDS)}, got {raw!r}")
    missing = [f for f in _PROFILE_FIELDS if f not in raw]
    unknown = sorted(set(raw) - set(_PROFILE_FIELDS))
    if missing or unknown:
        raise MigCatalogError(
            f"{at}: missing field(s) {', '.join(missing) or '-'}, unknown field(s) "
            f"{', '.join(map(str, unknown)) or '-'}; allowed: {', '.join(_PROFILE_FIELDS)}"
        )
    size = _count(at, "size", raw["size"], 1)
    starts = raw["placements"]
    if not isinstance(starts, list) or not starts:
        raise MigCatalogError(f"{at}.placements: {starts!r}; allowed: a non-empty list of placement starts")
    placements = []
    for raw_start in starts:
        start = _count(at, "placements", raw_start)
        if start + size > memory_slices:
            raise MigCatalogError(
                f"{at}.placements: start {start} with size {size} passes the GPU's {memory_slices} memory "
                f"slices; allowed: start + size <= {memory_slices}"
            )
        placements.append(MigPlacement(start, size))
    return MigProfile(
        name=name,
        profile_id=_count(at, "id", raw["id"]),
        index=_count(at, "index", raw["index"]),
        slices=_count(at, "slices", raw["slices"], 1),
        multiprocessors=_count(at, "multiprocessors", raw["multiprocessors"], 1),
        copy_engines=_count(at, "copyEngines", raw["copyEngines"]),
        decoders=_count(at, "decoders", raw["decoders"]),
        encoders=_count(at, "encoders", raw["encoders"]),
        jpeg_engines=_count(at, "jpegEngines", raw["jpegEngines"]),
        ofa_engines=_count(at, "ofaEngines", raw["ofaEngines"]),
        memory_mib=_count(at, "memoryMiB", raw["memoryMiB"], 1),
        placements=tuple(placements),
    )


def parse_catalog(data: Any, where: str = "mig_catalog.yaml") -> dict[str, MigProduct]:
    """The `products:` map of mig_catalog.yaml, checked (ids unique per product, placements in range)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("products"), Mapping):
        raise MigCatalogError(f"{where}: must be a map with a `products` map, got {data!r}")
    products = {}
    for product, raw in data["products"].items():
        at = f"{where} products[{product!r}]"
        if not isinstance(raw, Mapping):
            raise MigCatalogError(f"{at}: must be a map with memorySlices, source and profiles, got {raw!r}")
        memory_slices = _count(at, "memorySlices", raw.get("memorySlices"), 1)
        source = raw.get("source")
        if not isinstance(source, str) or not source.strip():
            raise MigCatalogError(f"{at}.source: {source!r}; allowed: a text naming where the rows come from")
        rows = raw.get("profiles")
        if not isinstance(rows, Mapping) or not rows:
            raise MigCatalogError(f"{at}.profiles: {rows!r}; allowed: a non-empty map of profile name to row")
        profiles = tuple(_profile(f"{at}.profiles", n, r, memory_slices) for n, r in rows.items())
        for field in ("profile_id", "index"):
            values = [getattr(p, field) for p in profiles]
            if len(set(values)) != len(values):
                raise MigCatalogError(
                    f"{at}.profiles: {field} values {values} repeat; allowed: unique values"
                )
        if max(p.placements[-1].start + p.placements[-1].size for p in profiles) != memory_slices:
            raise MigCatalogError(
                f"{at}.memorySlices: {memory_slices} but no placement ends there; allowed: the largest "
                "placement end (NVML's full-GPU profile spans every memory slice)"
            )
        products[str(product)] = MigProduct(str(product), memory_slices, source.strip(), profiles)
    return products


@lru_cache(maxsize=1)
def builtin_mig_catalog() -> dict[str, MigProduct]:
    text = resources.files(__package__).joinpath("mig_catalog.yaml").read_text(encoding="utf-8")
    return parse_catalog(yaml.safe_load(text))


def mig_product(product_name: str) -> MigProduct:
    """The catalog row of `product_name` (NVML name); MigCatalogError naming the catalogued products."""
    catalog = builtin_mig_catalog()
    try:
        return catalog[product_name]
    except KeyError:
        raise MigCatalogError(
            f"no MIG profiles catalogued for GPU product {product_name!r}; catalogued: "
            f"{', '.join(sorted(catalog))}"
        ) from None


# ------------------------------------------------------------------------------ counters and devices


def counter_set_name(minor: int) -> str:
    return f"gpu-{minor}-counter-set"


def memory_slice_counter(index: int) -> str:
    return f"{MEMORY_SLICE_COUNTER_PREFIX}{index}"


def placement_device_name(minor: int, profile_name: str, profile_id: int, start: int) -> str:
    """NVIDIA's canonical name (MigSpecTuple.ToCanonicalName): dots dropped, RFC 1123 (`+` becomes `-`)."""
    part = re.sub(r"[^a-z0-9-.]", "-", profile_name.replace(".", "").lower()).strip("-")
    return f"gpu-{minor}-mig-{part}-{profile_id}-{start}"


@dataclass(frozen=True)
class CounterSet:
    name: str
    #: Counter name -> integer value (memory in bytes).
    counters: Mapping[str, int]

    def to_api(self) -> dict[str, Any]:
        """As `spec.sharedCounters[]` of a ResourceSlice (resource.k8s.io/v1)."""
        return {
            "name": self.name,
            "counters": {k: {"value": format_quantity(v)} for k, v in self.counters.items()},
        }


@dataclass(frozen=True)
class Partition:
    """A device of a partitionable GPU: a MIG placement, or the whole GPU (profile None)."""

    name: str
    counter_set: str
    #: Counter name -> amount consumed.
    consumes: Mapping[str, int]
    profile: MigProfile | None = None
    placement: MigPlacement | None = None

    def consumes_counters(self) -> list[dict[str, Any]]:
        """As `devices[].consumesCounters` of a ResourceSlice (resource.k8s.io/v1)."""
        return [
            {
                "counterSet": self.counter_set,
                "counters": {k: {"value": format_quantity(v)} for k, v in self.consumes.items()},
            }
        ]

    def excludes(self, other: Partition) -> bool:
        """True when both cannot be allocated together (they share a memory slice, or one is the GPU)."""
        if self.counter_set != other.counter_set:
            return False
        shared = {k for k in self.consumes if k.startswith(MEMORY_SLICE_COUNTER_PREFIX)}
        return bool(shared & set(other.consumes))


@dataclass(frozen=True)
class GpuPartitions:
    """Everything one MIG-capable GPU publishes under dynamic MIG."""

    counter_set: CounterSet
    whole_gpu: Partition
    placements: tuple[Partition, ...]

    @property
    def devices(self) -> tuple[Partition, ...]:
        return (self.whole_gpu, *self.placements)


def published_profiles(profiles: Iterable[MigProfile]) -> list[MigProfile]:
    """Profiles published as devices, in NVML profile-index order (what NVIDIA's walk visits)."""
    return sorted(profiles, key=lambda p: p.index)


def _memory_slices(start: int, size: int) -> dict[str, int]:
    return {memory_slice_counter(i): 1 for i in range(start, start + size)}


def gpu_partitions(minor: int, profiles: Sequence[MigProfile]) -> GpuPartitions:
    """The counter set, the whole GPU and every possible placement of GPU `minor` with `profiles`."""
    if minor < 0:
        raise MigCatalogError(f"GPU minor {minor}; allowed: a whole number >= 0")
    chosen = published_profiles(profiles)
    if not chosen or not any(p.placements for p in chosen):
        raise MigCatalogError(f"GPU {minor}: no MIG profile with a placement; nothing to partition")
    maxima: dict[str, int] = {}
    memory_slices = 0
    for profile in chosen:
        for placement in profile.placements:
            memory_slices = max(memory_slices, placement.size)
            for name, value in profile.capacity_counters().items():
                maxima[name] = max(maxima.get(name, 0), value)
    set_name = counter_set_name(minor)
    everything = {**maxima, **_memory_slices(0, memory_slices)}
    placements = tuple(
        Partition(
            name=placement_device_name(minor, profile.name, profile.profile_id, placement.start),
            counter_set=set_name,
            consumes={**profile.capacity_counters(), **_memory_slices(placement.start, placement.size)},
            profile=profile,
            placement=placement,
        )
        for profile in chosen
        for placement in profile.placements
    )
    names = [p.name for p in placements]
    if len(set(names)) != len(names):
        raise MigCatalogError(f"GPU {minor}: placement device names repeat: {names}")
    return GpuPartitions(
        counter_set=CounterSet(set_name, everything),
        whole_gpu=Partition(name=f"gpu-{minor}", counter_set=set_name, consumes=dict(everything)),
        placements=placements,
    )


def product_partitions(product_name: str, minor: int) -> GpuPartitions:
    """`gpu_partitions` from the catalog's profiles of `product_name`."""
    return gpu_partitions(minor, mig_product(product_name).profiles)


# -------------------------------------------------------------------------------------- KEP-4815 limits


@dataclass(frozen=True)
class SliceLimits:
    """ResourceSlice validation limits for partitionable devices (pkg/apis/resource/types.go)."""

    kubernetes: str
    max_devices: int
    #: Devices with consumesCounters per slice (None: only max_devices).
    max_devices_with_counters: int | None
    #: Counter sets per slice (None: not limited on their own).
    max_counter_sets: int | None
    #: Counters per counter set.
    max_counters_per_set: int
    #: Counters across all counter sets of a slice (None: not limited).
    max_shared_counters: int | None
    #: consumesCounters entries per device.
    max_consumptions_per_device: int
    #: Counters consumed per device, across its consumptions.
    max_counters_per_device: int
    #: Counters consumed across all devices of a slice (None: not limited).
    max_device_counters_per_slice: int | None


#: 1.34 (v1, DRAPartitionableDevices alpha): ResourceSliceMaxSharedCounters 32 ("the maximum number
#: of counters in all sets is 32"), ResourceSliceMaxCountersPerDevice 32 and
#: ResourceSliceMaxDeviceCountersPerSlice 1024 ("<= 32 ... the total number in the entire ResourceSlice
#: must be <= 1024"), ResourceSliceMaxDevices 128; counters sit in the slice of the devices consuming them.
LIMITS_1_34: Final = SliceLimits(
    kubernetes="1.34",
    max_devices=128,
    max_devices_with_counters=None,
    max_counter_sets=None,
    max_counters_per_set=32,
    max_shared_counters=32,
    max_consumptions_per_device=32,
    max_counters_per_device=32,
    max_device_counters_per_slice=1024,
)
#: 1.35 and later (the API revision that moved counter sets into their own slice; beta in 1.36):
#: ResourceSliceMaxCounterSets 8, ...MaxCountersPerCounterSet 32, ...MaxDeviceCounterConsumptionsPerDevice 2,
#: ...MaxCountersPerDeviceCounterConsumption 32, ...MaxDevicesWithTaintsOrConsumesCounters 64, MaxDevices 128.
LIMITS_1_35: Final = SliceLimits(
    kubernetes="1.35",
    max_devices=128,
    max_devices_with_counters=64,
    max_counter_sets=8,
    max_counters_per_set=32,
    max_shared_counters=None,
    max_consumptions_per_device=2,
    max_counters_per_device=32,
    max_device_counters_per_slice=None,
)


def slice_limits(minor_version: int) -> SliceLimits:
    """Limits of Kubernetes 1.<minor_version> (1.34 or later)."""
    if minor_version < 34:
        raise MigCatalogError(f"Kubernetes 1.{minor_version}; allowed: 1.34 or later (partitionable devices)")
    return LIMITS_1_34 if minor_version == 34 else LIMITS_1_35


def check_slice_limits(
    counter_sets: Sequence[CounterSet], devices: Sequence[Partition], limits: SliceLimits
) -> list[str]:
    """What one ResourceSlice holding `counter_sets` and `devices` breaks of `limits` (empty: nothing)."""
    problems: list[str] = []

    def over(count: int, limit: int | None, what: str) -> None:
        if limit is not None and count > limit:
            problems.append(f"{what}; {limits.kubernetes} allows {limit}")

    over(len(devices), limits.max_devices, f"{len(devices)} devices in one slice")
    with_counters = sum(1 for d in devices if d.consumes)
    over(
        with_counters,
        limits.max_devices_with_counters,
        f"{with_counters} devices consuming counters in one slice",
    )
    over(len(counter_sets), limits.max_counter_sets, f"{len(counter_sets)} counter sets in one slice")
    for c in counter_sets:
        n = len(c.counters)
        over(n, limits.max_counters_per_set, f"counter set {c.name} has {n} counters")
    shared = sum(len(c.counters) for c in counter_sets)
    over(shared, limits.max_shared_counters, f"{shared} shared counters in one slice")
    for d in devices:
        n = len(d.consumes)
        over(n, limits.max_counters_per_device, f"device {d.name} consumes {n} counters")
    consumed = sum(len(d.consumes) for d in devices)
    over(consumed, limits.max_device_counters_per_slice, f"devices consume {consumed} counters in one slice")
    return problems
