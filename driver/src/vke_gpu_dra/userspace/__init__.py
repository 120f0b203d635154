"""The NVIDIA driver's user-space in GPU containers, in one package.

* `discover` (with `elf`, `ldcache`), `devnodes`: what a driver root holds (libraries, binaries,
  firmware, IPC sockets, device nodes), pure apart from file reads;
* `edits`: the CDI container edits built from it (`DriverEdits`), as nvcdi writes them;
* `startup`: what the plugin runs once at start (`setup`: discovery, the hook binary, the self-check).
"""

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
from .edits import DriverEdits
from .startup import UserSpaceSettings, setup

__all__ = [
    "BINARIES",
    "BINARY_DIRS",
    "CONTROL_NODES",
    "HOOK_BINARY",
    "LIBRARY_DIRS",
    "NVML_SONAME",
    "SMI_BINARY",
    "DeviceNode",
    "DriverEdits",
    "DriverRoot",
    "File",
    "Library",
    "UserSpace",
    "UserSpaceError",
    "UserSpaceSettings",
    "discover",
    "drm_nodes",
    "existing_nodes",
    "find_binary",
    "find_library",
    "locate_library",
    "node_source",
    "setup",
]
