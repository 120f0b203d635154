"""The NVIDIA driver's user-space under a driver root (libraries, binaries, firmware, device nodes)."""

from __future__ import annotations

from .devnodes import CONTROL_NODES, DeviceNode, drm_nodes, existing_nodes, node_source
from .discover import (
    BINARIES,
    HOOK_BINARY,
    LIBRARY_DIRS,
    NVML_SONAME,
    DriverRoot,
    File,
    Library,
    UserSpace,
    UserSpaceError,
    discover,
    find_binary,
)

__all__ = [
    "BINARIES",
    "CONTROL_NODES",
    "HOOK_BINARY",
    "LIBRARY_DIRS",
    "NVML_SONAME",
    "DeviceNode",
    "DriverRoot",
    "File",
    "Library",
    "UserSpace",
    "UserSpaceError",
    "discover",
    "drm_nodes",
    "existing_nodes",
    "find_binary",
    "node_source",
]
