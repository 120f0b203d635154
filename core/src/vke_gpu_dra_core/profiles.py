"""GPU product profiles as data: what NVML reports for each GPU model this project knows.

One row per product, keyed by the product name exactly as `nvmlDeviceGetName` returns it. The
simulated discovery source builds its devices from these rows, and the same table backs capacity
planning (a GPU catalog), so lookups go through `get_profile` and fail with the list of known names.

`memory_bytes` is the total NVML reports (`nvmlDeviceGetMemoryInfo().total`), which is below the
marketing size on most boards (e.g. 81559 MiB on an "80 GB" H100). Each row names its `source`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

_MIB: Final = 2**20


@dataclass(frozen=True)
class GpuProfile:
    """One GPU product as NVML describes it."""

    #: Product name as NVML reports it (`nvmlDeviceGetName`), e.g. "NVIDIA A30".
    product_name: str
    #: Brand name as published (parity sheet table; data-center boards report "Nvidia").
    brand: str
    #: Architecture name as published ("Ampere", "Ada Lovelace", "Hopper", ...).
    architecture: str
    #: CUDA compute capability as (major, minor).
    compute_capability: tuple[int, int]
    #: Total memory in bytes as NVML reports it.
    memory_bytes: int
    #: Whether the board supports MIG partitioning.
    mig_capable: bool
    #: Where the row's values come from.
    source: str

    @property
    def memory_mib(self) -> int:
        return self.memory_bytes // _MIB


_NVIDIA_SPECS = "NVIDIA product specifications (architecture, compute capability, MIG)"

_PROFILES: Final[tuple[GpuProfile, ...]] = (
    GpuProfile(
        "NVIDIA A30",
        "Nvidia",
        "Ampere",
        (8, 0),
        24576 * _MIB,
        True,
        "VKE DRA procedure sample slice (memory 24Gi, brand Nvidia, Ampere, 8.0.0); " + _NVIDIA_SPECS,
    ),
    GpuProfile(
        "NVIDIA A10",
        "Nvidia",
        "Ampere",
        (8, 6),
        23028 * _MIB,
        False,
        "nvidia-smi total 23028 MiB (24 GB GDDR6); " + _NVIDIA_SPECS,
    ),
    GpuProfile(
        "NVIDIA A100-SXM4-40GB",
        "Nvidia",
        "Ampere",
        (8, 0),
        40960 * _MIB,
        True,
        "nvidia-smi total 40960 MiB; parity sheet quantity example 40Gi; " + _NVIDIA_SPECS,
    ),
    GpuProfile(
        "NVIDIA A100-SXM4-80GB",
        "Nvidia",
        "Ampere",
        (8, 0),
        81920 * _MIB,
        True,
        "nvidia-smi total 81920 MiB; " + _NVIDIA_SPECS,
    ),
    GpuProfile(
        "NVIDIA H100 80GB HBM3",
        "Nvidia",
        "Hopper",
        (9, 0),
        81559 * _MIB,
        True,
        "nvidia-smi total 81559 MiB; parity sheet quantity example 81559Mi; " + _NVIDIA_SPECS,
    ),
    GpuProfile(
        "NVIDIA H100 PCIe",
        "Nvidia",
        "Hopper",
        (9, 0),
        81559 * _MIB,
        True,
        "nvidia-smi total 81559 MiB (80 GB HBM2e, a published capture with driver 570.169); " + _NVIDIA_SPECS,
    ),
    GpuProfile(
        "NVIDIA H20",
        "Nvidia",
        "Hopper",
        (9, 0),
        97871 * _MIB,
        True,
        "nvidia-smi total 97871 MiB (96 GB HBM3); " + _NVIDIA_SPECS,
    ),
    GpuProfile(
        "NVIDIA H200",
        "Nvidia",
        "Hopper",
        (9, 0),
        143771 * _MIB,
        True,
        "nvidia-smi total 143771 MiB (141 GB HBM3e); " + _NVIDIA_SPECS,
    ),
    GpuProfile(
        "NVIDIA L20",
        "Nvidia",
        "Ada Lovelace",
        (8, 9),
        46068 * _MIB,
        False,
        "nvidia-smi total 46068 MiB (48 GB GDDR6); " + _NVIDIA_SPECS,
    ),
    GpuProfile(
        "NVIDIA L4",
        "Nvidia",
        "Ada Lovelace",
        (8, 9),
        23034 * _MIB,
        False,
        "nvidia-smi total 23034 MiB (24 GB GDDR6); " + _NVIDIA_SPECS,
    ),
    GpuProfile(
        "Tesla T4",
        "Nvidia",
        "Turing",
        (7, 5),
        15360 * _MIB,
        False,
        "nvidia-smi total 15360 MiB (16 GB GDDR6); brand as current data-center drivers report it "
        "(older drivers report Tesla); " + _NVIDIA_SPECS,
    ),
    GpuProfile(
        "Tesla V100-SXM2-32GB",
        "Nvidia",
        "Volta",
        (7, 0),
        32768 * _MIB,
        False,
        "nvidia-smi total 32768 MiB; brand as current data-center drivers report it "
        "(older drivers report Tesla); " + _NVIDIA_SPECS,
    ),
)

#: Profiles by product name.
PROFILES: Final[dict[str, GpuProfile]] = {p.product_name: p for p in _PROFILES}

#: The product simulated when none is named (the GPU of the VKE DRA procedure).
DEFAULT_PRODUCT: Final = "NVIDIA A30"


class UnknownProductError(KeyError):
    """A product name that has no profile."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


def known_products() -> list[str]:
    return sorted(PROFILES)


def get_profile(product_name: str) -> GpuProfile:
    """The profile of `product_name` (exact NVML name); raises UnknownProductError listing known names."""
    try:
        return PROFILES[product_name]
    except KeyError:
        raise UnknownProductError(
            f"unknown GPU product {product_name!r}; known products: {', '.join(known_products())}"
        ) from None
