"""Pure normalisation rules for published attributes (parity with NVIDIA's driver and go-nvlib)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Final

from .. import facts
from ..device_model import Version

_VERSION_RE: Final = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?$")


def normalize_version(raw: str) -> Version:
    """Masterminds-style semver: missing parts are 0, leading zeros dropped (`535.104.05` -> `535.104.5`)."""
    match = _VERSION_RE.match(raw.strip())
    if match is None:
        raise ValueError(f"version {raw!r} is not MAJOR[.MINOR[.PATCH]] with decimal parts")
    major, minor, patch = (int(part) if part else 0 for part in match.groups())
    return Version(f"{major}.{minor}.{patch}")


def cuda_driver_version(value: int) -> Version:
    """NVML's integer CUDA driver version (12040) as a version attribute (12.4.0)."""
    if value < 0:
        raise ValueError(f"CUDA driver version must not be negative, got {value}")
    return Version(f"{value // 1000}.{(value % 1000) // 10}.0")


def compute_capability(major: int, minor: int) -> Version:
    return normalize_version(f"{major}.{minor}")


def pcie_bus_id(raw: str) -> str:
    """NVML busId (`00000000:3B:00.0`) as NVIDIA publishes it (`0000:3b:00.0`)."""
    value = raw.strip().lower()
    domain, sep, rest = value.partition(":")
    if sep and len(domain) == 8 and domain.startswith("0000"):
        return f"{domain[4:]}:{rest}"
    return value


#: The extended BDF form k8s.io/dynamic-resource-allocation's `deviceattribute.GetPCIBusIDAttribute` accepts.
_EXTENDED_BDF: Final = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$")


def pci_bus_id_attribute(bus_id: str, gpu: str) -> str:
    """The `resource.kubernetes.io/pciBusID` value: the normalised bus ID, which must be an extended BDF.

    NVIDIA's driver gets it from the same bus ID and fails the GPU when it is not `dddd:bb:dd.f`.
    """
    if not _EXTENDED_BDF.match(bus_id):
        raise ValueError(
            f"GPU {gpu}: PCI bus ID {bus_id!r} is not an extended BDF (domain:bus:device.function, "
            f"like 0000:3b:00.0), which {facts.ATTR_PCI_BUS_ID} needs"
        )
    return bus_id


#: nvmlDeviceGetAddressingMode -> published name (go-nvlib's GetAddressingModeAsString).
ADDRESSING_MODES: Final[dict[int, str]] = {0: "None", 1: "HMM", 2: "ATS"}


def addressing_mode_name(value: int, gpu: str) -> str:
    return _enum_name(ADDRESSING_MODES, "addressing mode", value, gpu)


#: nvmlDeviceGetArchitecture -> published name (parity sheet section 5).
ARCHITECTURES: Final[dict[int, str]] = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada Lovelace",
    9: "Hopper",
    10: "Blackwell",
    0xFFFFFFFF: "Unknown",
}

#: nvmlDeviceGetBrand -> published name (parity sheet section 5).
BRANDS: Final[dict[int, str]] = {
    0: "Unknown",
    1: "Quadro",
    2: "Tesla",
    3: "NVS",
    4: "Grid",
    5: "GeForce",
    6: "Titan",
    7: "NvidiaVApps",
    8: "NvidiaVPC",
    9: "NvidiaVCS",
    10: "NvidiaVWS",
    11: "NvidiaCloudGaming",
    12: "QuadroRTX",
    13: "NvidiaRTX",
    14: "Nvidia",
    15: "GeForceRTX",
    16: "TitanRTX",
}


def _enum_name(table: dict[int, str], kind: str, value: int, gpu: str) -> str:
    try:
        return table[value]
    except KeyError:
        allowed = ", ".join(f"{k} {v}" for k, v in table.items())
        raise ValueError(f"GPU {gpu}: unknown {kind} value {value} (known: {allowed})") from None


def architecture_name(value: int, gpu: str) -> str:
    return _enum_name(ARCHITECTURES, "architecture", value, gpu)


def brand_name(value: int, gpu: str) -> str:
    return _enum_name(BRANDS, "brand", value, gpu)


def gpu_device_name(minor: int) -> str:
    return f"gpu-{minor}"


def mig_device_name(parent_minor: int, gi_profile_id: int, placement_start: int, placement_size: int) -> str:
    return f"gpu-{parent_minor}-mig-{gi_profile_id}-{placement_start}-{placement_size}"


#: Profile-name suffix per NVML GPU-instance profile *index* (go-nvlib attributes).
MIG_PROFILE_SUFFIXES: Final[dict[int, str]] = {
    7: "+me",  # NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1
    8: "+me",  # NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1
    10: "+gfx",  # 1_SLICE_GFX
    11: "+gfx",  # 2_SLICE_GFX
    12: "+gfx",  # 4_SLICE_GFX
    13: "-me",  # 1_SLICE_NO_ME
    14: "-me",  # 2_SLICE_NO_ME
    15: "+me.all",  # 1_SLICE_ALL_ME
    16: "+me.all",  # 2_SLICE_ALL_ME
    17: "+gfx",  # 3_SLICE_GFX
}


def mig_memory_gb(mig_memory_mib: int, total_memory_bytes: int) -> int:
    """GB in a MIG profile name: round(ceil(mig/total * 8) / 8 * ceil(total / GiB)) (go-nvlib)."""
    if total_memory_bytes <= 0:
        raise ValueError(f"GPU total memory must be positive, got {total_memory_bytes}")
    fraction = math.ceil(mig_memory_mib * 2**20 * 8 / total_memory_bytes) / 8
    total_gb = math.ceil(total_memory_bytes / 2**30)
    # Go's math.Round rounds halves away from zero (H200: 0.5 * 141 = 70.5 -> 3g.71gb); Python's round()
    # would round them to even (70). fraction * total_gb is exact (eighths of a whole number).
    return math.floor(fraction * total_gb + 0.5)


def mig_profile_name(
    *, gi_slices: int, ci_slices: int, mig_memory_mib: int, total_memory_bytes: int, profile_index: int
) -> str:
    """`<G>g.<GB>gb` (`<C>c.<G>g.<GB>gb` when the CI is smaller than the GI) plus attributes (`+me`)."""
    gb = mig_memory_gb(mig_memory_mib, total_memory_bytes)
    suffix = MIG_PROFILE_SUFFIXES.get(profile_index, "")
    if ci_slices == gi_slices:
        return f"{gi_slices}g.{gb}gb{suffix}"
    return f"{ci_slices}c.{gi_slices}g.{gb}gb{suffix}"


def mig_capacity(
    *,
    multiprocessors: int,
    copy_engines: int,
    decoders: int,
    encoders: int,
    jpeg_engines: int,
    ofa_engines: int,
    memory_mib: int,
    placement_start: int,
    placement_size: int,
) -> dict[str, int]:
    """Capacities of a MIG device from its GPU-instance profile; `memorySlice<i>` = 1 per slice it holds."""
    capacity = {
        facts.CAPACITY_MULTIPROCESSORS: multiprocessors,
        facts.CAPACITY_COPY_ENGINES: copy_engines,
        facts.CAPACITY_DECODERS: decoders,
        facts.CAPACITY_ENCODERS: encoders,
        facts.CAPACITY_JPEG_ENGINES: jpeg_engines,
        facts.CAPACITY_OFA_ENGINES: ofa_engines,
        facts.CAPACITY_MEMORY: memory_mib * 2**20,
    }
    for index in memory_slices(placement_start, placement_size):
        capacity[f"{facts.CAPACITY_MEMORY_SLICE_PREFIX}{index}"] = 1
    return capacity


def memory_slices(start: int, size: int) -> Iterable[int]:
    if start < 0 or size <= 0:
        raise ValueError(f"MIG placement must have start >= 0 and size > 0, got start={start} size={size}")
    return range(start, start + size)
