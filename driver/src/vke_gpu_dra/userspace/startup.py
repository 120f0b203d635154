"""Start-up of the driver user-space in CDI specs: discovery, the hook binary, the self-check.

Called once by the plugin after device discovery. Never stops the plugin: a root that lacks the
user-space is reported in one log line and in metrics, and the plugin keeps serving (claims then
get the device nodes and whatever was found).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..fsutil import atomic_write
from ..metrics import Metrics
from .devnodes import node_source
from .discover import (
    HOOK_BINARY,
    LIBRARY_DIRS,
    NVML_SONAME,
    SMI_BINARY,
    DriverRoot,
    UserSpace,
    UserSpaceError,
    discover,
    find_binary,
)
from .edits import DriverEdits

log = logging.getLogger(__name__)

HOOK_FILE_NAME: Final = HOOK_BINARY


@dataclass(frozen=True)
class UserSpaceSettings:
    simulated: bool
    root: DriverRoot
    #: The driver version as NVML (or the simulated source) reports it.
    version: str | None
    #: `--nvidia-cdi-hook-path`: a host path, visible at the same path in this process.
    hook_path: Path | None
    plugin_data_dir: Path
    dev_root: Path = Path("/")
    sysfs_root: Path = Path("/sys")


def _install_hook(settings: UserSpaceSettings) -> str | None:
    """The host path of the hook binary the specs name, or None (logged) when there is none."""
    if settings.hook_path is not None:
        path = settings.hook_path
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
        log.warning(
            "--nvidia-cdi-hook-path %s is not an executable file here (the chart mounts it at the same "
            "path); CDI specs get no hooks",
            path,
        )
        return None
    found = find_binary(settings.root, HOOK_BINARY)
    if found is None:
        return None
    target = settings.plugin_data_dir / HOOK_FILE_NAME
    try:
        atomic_write(target, settings.root.local(found.resolved).read_bytes(), mode=0o755)
    except OSError as exc:
        log.warning(
            "cannot copy %s from driver root %s to %s: %s; CDI specs get no hooks",
            found.path,
            settings.root.path,
            target,
            exc,
        )
        return None
    return str(target)


def _missing_without_libcuda(settings: UserSpaceSettings) -> list[str]:
    """What is missing when not even libcuda was found: libcuda, and NVML and nvidia-smi if absent too."""
    root = settings.root
    missing = [f"libcuda.so.{settings.version}" if settings.version else "libcuda.so.<driver version>"]
    if not any(root.regular_file(f"{d}/{NVML_SONAME}") for d in LIBRARY_DIRS):
        missing.append(NVML_SONAME)
    if find_binary(root, SMI_BINARY) is None:
        missing.append(SMI_BINARY)
    return missing


def _self_check(settings: UserSpaceSettings, metrics: Metrics) -> UserSpace | None:
    root = settings.root
    missing: list[str]
    try:
        if settings.version is None:
            raise UserSpaceError("the driver version is unknown (NVML did not report it)")
        userspace = discover(root, settings.version)
        missing = userspace.missing()
        problem = ""
    except UserSpaceError as exc:
        userspace, missing, problem = None, _missing_without_libcuda(settings), str(exc)
    for item in missing:
        metrics.driver_userspace_missing.labels(item=item).set(1)
    metrics.driver_userspace_ready.set(0 if missing else 1)
    metrics.driver_libraries.set(len(userspace.libraries) if userspace else 0)
    if missing:
        log.error(
            "driver root %s (host %s) lacks %s: containers will not get them through CDI%s",
            root.path,
            root.host_path,
            ", ".join(missing),
            f" ({problem})" if problem else "",
            extra={"fields": {"driver_root": str(root.path), "missing": missing}},
        )
    return userspace


def setup(settings: UserSpaceSettings, metrics: Metrics) -> DriverEdits | None:
    """The common CDI edits for this node; None in simulated mode without a fake driver root."""
    if settings.simulated and settings.root.host_path.rstrip("/") == "" and settings.root.path == Path("/"):
        log.info("simulated mode without a driver root: CDI specs set environment variables only")
        return None
    userspace = _self_check(settings, metrics)
    hook = _install_hook(settings) if userspace is not None else None
    metrics.cdi_hooks_enabled.set(1 if hook else 0)
    if userspace is not None and hook is None:
        log.warning(
            "no %s for the CDI hooks (--nvidia-cdi-hook-path unset and none under driver root %s): "
            "each library is also mounted under its SONAME; images whose loader does not search %s "
            "will not find the driver libraries",
            HOOK_BINARY,
            settings.root.path,
            userspace.libcuda_dir,
            extra={"fields": {"cdi_hooks": False}},
        )
    elif hook is not None:
        log.info("CDI hooks use %s", hook, extra={"fields": {"cdi_hooks": True, "hook_path": hook}})
    return DriverEdits(
        userspace=userspace,
        hook_path=hook,
        nodes=node_source(settings.root, settings.dev_root),
        sysfs_root=settings.sysfs_root,
    )
