"""Device nodes a GPU container needs: the driver's control nodes and each GPU's DRM nodes.

Read at prepare time (a node such as /dev/nvidia-uvm appears only once something loaded the UVM
module; NVIDIA #1380 is a spec written before the nodes existed). Only character or block devices
count: a runtime refuses a CDI device node whose host path is anything else.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .discover import DriverRoot

#: Control nodes nvcdi adds when they exist (nvidiactl is needed by every CUDA process).
CONTROL_NODES: Final = ("/dev/nvidiactl", "/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
DEFAULT_SYSFS: Final = Path("/sys")


@dataclass(frozen=True)
class DeviceNode:
    path: str
    host_path: str

    def cdi(self) -> dict[str, str]:
        return {"path": self.path, "hostPath": self.host_path}


def node_source(root: DriverRoot, dev_root: Path = Path("/")) -> DriverRoot:
    """Where device nodes are read: the driver root's `dev/` when the root is not `/` and has one
    (host paths under the root), else `dev_root` (this process's view of the host's /dev)."""
    if root.host_path.rstrip("/") and (root.path / "dev").is_dir():
        return root
    return DriverRoot(dev_root, "/")


def is_device(source: DriverRoot, path: str) -> bool:
    try:
        mode = os.stat(source.local(path)).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


def existing_nodes(source: DriverRoot, paths: tuple[str, ...] | list[str]) -> list[DeviceNode]:
    return [DeviceNode(p, source.host(p)) for p in paths if is_device(source, p)]


def drm_nodes(bus_id: str, sysfs_root: Path = DEFAULT_SYSFS) -> list[str]:
    """`/dev/dri/card<N>` and `/dev/dri/renderD<N>` of the PCI device `bus_id` (from its sysfs `drm/`)."""
    try:
        names = sorted(os.listdir(sysfs_root / "bus" / "pci" / "devices" / bus_id / "drm"))
    except OSError:
        return []
    return [f"/dev/dri/{n}" for n in names if n.startswith(("card", "renderD"))]
