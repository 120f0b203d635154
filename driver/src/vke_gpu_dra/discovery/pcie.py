"""The standard `resource.kubernetes.io/pcieRoot` attribute, read from sysfs."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final

_BDF_RE: Final = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$")
_ROOT_RE: Final = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")

DEFAULT_SYSFS: Final = Path("/sys")


class PcieRootError(Exception):
    """The PCIe root of a device could not be determined."""


def pcie_root_from_link(bdf: str, link: str) -> str:
    """`pci<domain>:<bus>` from the target of /sys/bus/pci/devices/<bdf> (first element after `devices/`)."""
    parts = [p for p in link.split("/") if p and p not in {".", ".."}]
    try:
        root = parts[parts.index("devices") + 1]
    except (ValueError, IndexError):
        raise PcieRootError(f"PCI device {bdf}: sysfs link {link!r} has no devices/<root> element") from None
    if not _ROOT_RE.match(root):
        raise PcieRootError(
            f"PCI device {bdf}: sysfs link {link!r} does not start at a PCI root (got {root!r})"
        )
    return root


def sysfs_device(bdf: str, sysfs_root: Path = DEFAULT_SYSFS) -> Path:
    """`<sysfs>/bus/pci/devices/<bdf>`; ValueError when `bdf` is not an extended BDF (`0000:3b:00.0`), so no
    bus ID can name a path outside that directory."""
    if not _BDF_RE.match(bdf):
        raise ValueError(f"PCI bus ID {bdf!r} is not of the form dddd:bb:dd.f (lower-case hex)")
    return sysfs_root / "bus" / "pci" / "devices" / bdf


def pcie_root(bdf: str, sysfs_root: Path = DEFAULT_SYSFS) -> str:
    """PCIe root of the device with bus ID `bdf` (`0000:3b:00.0`); raises PcieRootError on failure."""
    try:
        path = sysfs_device(bdf, sysfs_root)
    except ValueError as exc:
        raise PcieRootError(str(exc)) from None
    try:
        link = os.readlink(path)
    except OSError as exc:
        raise PcieRootError(f"PCI device {bdf}: cannot read link {path}: {exc.strerror or exc}") from None
    return pcie_root_from_link(bdf, link)
