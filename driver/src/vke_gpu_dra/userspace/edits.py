"""The CDI container edits that give a container the NVIDIA driver's user-space, as nvcdi writes them.

Pure apart from the device-node checks made at prepare time. Every claim spec carries these edits at
spec level (see driver/docs/user-space.md): mounts of the driver libraries, binaries, GSP firmware
and IPC sockets (`ro,nosuid,nodev,rbind,rprivate`), the control device nodes,
`NVIDIA_VISIBLE_DEVICES=void`, and the `nvidia-cdi-hook` createContainer hooks `create-symlinks`,
`enable-cuda-compat`, `update-ldcache`, `disable-device-node-modification` when a hook binary is
available. Without one, each library is also mounted under its SONAME, so `dlopen("libnvidia-ml.so.1")`
resolves in any image whose loader searches the library's folder.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Device

from .devnodes import CONTROL_NODES, drm_nodes, existing_nodes
from .discover import HOOK_BINARY, DriverRoot, UserSpace

ENV_VISIBLE_DEVICES: Final = "NVIDIA_VISIBLE_DEVICES"
#: The claim-wide value: no GPU through NVIDIA_VISIBLE_DEVICES; each device's own edits give it.
ENV_VISIBLE_DEVICES_VOID: Final = f"{ENV_VISIBLE_DEVICES}=void"

MOUNT_OPTIONS: Final = ("ro", "nosuid", "nodev", "rbind", "rprivate")
IPC_MOUNT_OPTIONS: Final = ("nosuid", "nodev", "rbind", "rprivate", "noexec")
ENV_LIBCUDA_DIR: Final = "NVIDIA_CTK_LIBCUDA_DIR"
HOOK_ENV: Final = ("NVIDIA_CTK_DEBUG=false",)
HOOK_LIFECYCLE: Final = "createContainer"
HOOK_CREATE_SYMLINKS: Final = "create-symlinks"
HOOK_ENABLE_CUDA_COMPAT: Final = "enable-cuda-compat"
HOOK_UPDATE_LDCACHE: Final = "update-ldcache"
HOOK_DISABLE_NODE_MODIFICATION: Final = "disable-device-node-modification"


def _mount(container_path: str, host_path: str, options: Iterable[str] = MOUNT_OPTIONS) -> dict[str, Any]:
    return {"hostPath": host_path, "containerPath": container_path, "options": list(options)}


@dataclass(frozen=True)
class DriverEdits:
    """The driver's common edits for one node: found once at start, device nodes checked per prepare."""

    #: The user-space found under the driver root; None when none was found (device nodes only).
    userspace: UserSpace | None
    #: Host path of nvidia-cdi-hook; None: no hooks, libraries also mounted under their SONAMEs.
    hook_path: str | None
    #: Where device nodes are read (the driver root's dev/ or the host's /dev).
    nodes: DriverRoot
    sysfs_root: Path = Path("/sys")

    @property
    def uses_hooks(self) -> bool:
        return self.hook_path is not None and self.userspace is not None

    def mounts(self) -> list[dict[str, Any]]:
        us = self.userspace
        if us is None:
            return []
        root = us.root
        mounts = [_mount(lib.path, root.host(lib.path)) for lib in us.libraries]
        if not self.uses_hooks:
            seen = {lib.path for lib in us.libraries}
            for lib in us.libraries:
                alias = f"{lib.directory}/{lib.soname}" if lib.soname and lib.soname != lib.name else None
                if alias and alias not in seen:
                    seen.add(alias)
                    mounts.append(_mount(alias, root.host(lib.path)))
        mounts += [_mount(f.resolved, root.host(f.resolved)) for f in us.firmware]
        mounts += [_mount(b.path, root.host(b.resolved)) for b in us.binaries]
        mounts += [_mount(s.path, root.host(s.resolved), IPC_MOUNT_OPTIONS) for s in us.ipc_sockets]
        return mounts

    def _hook(self, name: str, *args: str) -> dict[str, Any]:
        assert self.hook_path is not None
        return {
            "hookName": HOOK_LIFECYCLE,
            "path": self.hook_path,
            "args": [HOOK_BINARY, name, *args],
            "env": list(HOOK_ENV),
        }

    def hooks(self) -> list[dict[str, Any]]:
        us = self.userspace
        if not self.uses_hooks or us is None:
            return []
        hooks = []
        links = list(dict.fromkeys(f"{target}::{link}" for lib in us.libraries for target, link in lib.links))
        if links:
            hooks.append(self._hook(HOOK_CREATE_SYMLINKS, *[a for link in links for a in ("--link", link)]))
        hooks.append(self._hook(HOOK_ENABLE_CUDA_COMPAT, f"--host-driver-version={us.version}"))
        folders = self.library_folders()
        if folders:
            hooks.append(self._hook(HOOK_UPDATE_LDCACHE, *[a for f in folders for a in ("--folder", f)]))
        hooks.append(self._hook(HOOK_DISABLE_NODE_MODIFICATION))
        return hooks

    def env(self) -> list[str]:
        env = []
        if self.userspace is not None and self.userspace.libcuda_dir:
            env.append(f"{ENV_LIBCUDA_DIR}={self.userspace.libcuda_dir}")
        env.append(ENV_VISIBLE_DEVICES_VOID)
        return env

    def control_nodes(self) -> list[dict[str, str]]:
        """The control nodes that exist now (checked at every prepare)."""
        return [n.cdi() for n in existing_nodes(self.nodes, CONTROL_NODES)]

    def device_nodes(self, device: Device) -> list[dict[str, str]]:
        """The device's own nodes, plus the DRM nodes of a full GPU that exist now."""
        paths = list(device.device_nodes)
        if device.device_type == facts.DEVICE_TYPE_GPU:
            bus_id = device.attributes.get(facts.ATTR_PCIE_BUS_ID)
            if isinstance(bus_id, str):
                drm = [p for p in drm_nodes(bus_id, self.sysfs_root) if existing_nodes(self.nodes, [p])]
                paths += drm
        return [{"path": p, "hostPath": self.nodes.host(p)} for p in dict.fromkeys(paths)]

    def common(self) -> dict[str, Any]:
        """Spec-level edits: env, control nodes, mounts and hooks (empty lists left out)."""
        edits: dict[str, Any] = {"env": self.env()}
        for key, value in (
            ("deviceNodes", self.control_nodes()),
            ("mounts", self.mounts()),
            ("hooks", self.hooks()),
        ):
            if value:
                edits[key] = value
        return edits

    def library_folders(self) -> list[str]:
        """The folders of the mounted libraries (what update-ldcache adds to the container's cache)."""
        us = self.userspace
        return [] if us is None else list(dict.fromkeys(lib.directory for lib in us.libraries))
