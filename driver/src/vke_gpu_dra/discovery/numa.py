"""The standard `resource.kubernetes.io/numaNode` attribute, read from sysfs.

The NUMA node of a GPU is its PCI function's: `/sys/bus/pci/devices/<bdf>/numa_node`, a decimal number,
-1 where the platform reports no NUMA affinity (one socket, many VMs). Such a GPU publishes no
`numaNode`: a -1 would match every other device without affinity under `matchAttribute`. The
attribute is an int (the scalar form of k8s.io/dynamic-resource-allocation's `deviceattribute` helper and
NVIDIA's driver; the list form needs the alpha DRAListTypeAttributes gate).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from vke_gpu_dra_core import facts

from .pcie import DEFAULT_SYSFS, sysfs_device

#: What sysfs says for a device without NUMA affinity.
NO_AFFINITY: Final = -1


class NumaNodeError(Exception):
    """The NUMA node of a device could not be read, or sysfs said something that is not one."""


def parse_numa_node(bdf: str, text: str) -> int | None:
    """The NUMA node in a `numa_node` file's text; None for -1 (no affinity)."""
    try:
        node = int(text.strip(), 10)
    except ValueError:
        raise NumaNodeError(f"PCI device {bdf}: numa_node is {text.strip()!r}, not a number") from None
    if node == NO_AFFINITY:
        return None
    if not 0 <= node < facts.MAX_NUMA_NODES:
        raise NumaNodeError(
            f"PCI device {bdf}: numa_node is {node}, outside -1 (none) and 0 to {facts.MAX_NUMA_NODES - 1}"
        )
    return node


def numa_node(bdf: str, sysfs_root: Path = DEFAULT_SYSFS) -> int | None:
    """NUMA node of the device with bus ID `bdf` (`0000:3b:00.0`), None where it has no NUMA affinity;
    raises NumaNodeError when the file cannot be read or holds no NUMA node."""
    try:
        path = sysfs_device(bdf, sysfs_root) / "numa_node"
    except ValueError as exc:
        raise NumaNodeError(str(exc)) from None
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except OSError as exc:
        raise NumaNodeError(f"PCI device {bdf}: cannot read {path}: {exc.strerror or exc}") from None
    return parse_numa_node(bdf, text)
