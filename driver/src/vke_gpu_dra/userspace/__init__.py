"""The NVIDIA driver's user-space under a driver root (libraries, binaries, firmware, device nodes)."""

from __future__ import annotations

from .devnodes import CONTROL_NODES, DeviceNode, drm_nodes, existing_nodes, node_source
from .discover import (
    BINARIES,
    BINARY_DIRS,
    HOOK_BINARY,
    LIBRARY_DIRS,
    NVML_SONAME,
    SMI_BINARY,
    DriverRoot,
    File,
    Library,
    UserSpace,
    UserSpaceError,
    discover,
    find_binary,
    find_library,
    locate_library,
)

__all__ = [
    "BINARIES",
    "BINARY_DIRS",
    "CONTROL_NODES",
    "HOOK_BINARY",
    "LIBRARY_DIRS",
    "NVML_SONAME",
    "SMI_BINARY",
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
    "find_library",
    "locate_library",
    "node_source",
]
