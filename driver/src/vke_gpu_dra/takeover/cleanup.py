"""Undo what NVIDIA's plugin left on the node for one claim, as NVIDIA's own Unprepare would have.

NVIDIA 25.8.1 (`device_state.go` unprepareDevices, `sharing.go`, `cdi.go`) leaves per claim:

* its claim CDI spec `<cdi root>/k8s.gpu.nvidia.com-claim_<claimUID>.yaml` (written only when a device
  has claim-specific edits, i.e. MPS);
* per MPS group, a control-daemon Deployment `mps-control-daemon-<id>` in NVIDIA's namespace, a tmpfs
  mounted on `<plugin data dir>/mps/<id>/shm` and the directory `<plugin data dir>/mps/<id>` (pipe, shm,
  log), `<id>` being `<claimUID>-<first 5 hex of sha256 of the comma-joined UUIDs>`; its full GPUs in
  compute mode EXCLUSIVE_PROCESS;
* for time-slicing, its full GPUs' time-slice set by `nvidia-smi compute-policy --set-timeslice`.

NVIDIA's Unprepare deletes the Deployment (foreground), unmounts and removes the directory, then sets
compute mode DEFAULT and the default time-slice (0) on the group's full GPUs, and removes the spec.
A `PrepareStarted` claim has no record of its daemons: they are found by their directory name.
Every call goes through the injected runners; GPUs that another prepared claim uses are left alone.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Device

from .adoption import NVIDIA_MPS_DIR, device_names, nvidia_mps_root
from .nvidia_checkpoint import NvidiaClaim

#: NVIDIA's claim spec name: cdi GenerateTransientSpecName("k8s.gpu.nvidia.com", "claim", uid) + ".yaml".
NVIDIA_SPEC_PREFIX: Final = f"{facts.CDI_VENDOR}-{facts.CDI_CLASS_CLAIM}_"
NVIDIA_SPEC_SUFFIXES: Final = (".yaml", ".json")
NVIDIA_DEVICE_CLASS: Final = "device"
NVIDIA_MPS_DAEMON_NAME_FMT: Final = "mps-control-daemon-{}"
#: The namespace NVIDIA's chart is installed in by the VKE procedure (`helm install --namespace`).
DEFAULT_NVIDIA_NAMESPACE: Final = "nvidia-dra-driver-gpu"


class CleanupError(Exception):
    """One of NVIDIA's leftovers could not be removed (the claim stays adopted; a retry tries again)."""


class GpuSettings(Protocol):
    def set_compute_mode(self, uuid: str, mode: str, deadline: float) -> None: ...
    def set_timeslice(self, uuid: str, value: int, deadline: float) -> None: ...


class DeploymentDeleter(Protocol):
    def delete_deployment(self, namespace: str, name: str) -> None: ...


class Unmounter(Protocol):
    def unmount(self, path: Path) -> None: ...


@dataclass
class Tools:
    """Where NVIDIA's things are and how to remove them (None: not available in this process)."""

    cdi_root: Path
    plugin_data_dir: Path
    namespace: str = DEFAULT_NVIDIA_NAMESPACE
    api: DeploymentDeleter | None = None
    smi: GpuSettings | None = None
    mounter: Unmounter | None = None
    driver_name: str = facts.DRIVER_NAME


@dataclass(frozen=True)
class Leftovers:
    """What NVIDIA may have left for one claim."""

    spec_paths: tuple[Path, ...]
    mps_daemon_ids: tuple[str, ...]
    #: UUIDs of full GPUs whose compute mode and time-slice go back to the defaults.
    reset_gpus: tuple[str, ...] = field(default_factory=tuple)


def nvidia_spec_paths(cdi_root: Path, claim_uid: str) -> tuple[Path, ...]:
    name = NVIDIA_SPEC_PREFIX + claim_uid.replace("/", "_")
    return tuple(cdi_root / (name + suffix) for suffix in NVIDIA_SPEC_SUFFIXES)


def nvidia_base_spec_paths(cdi_root: Path) -> tuple[Path, ...]:
    """NVIDIA's spec of its `k8s.gpu.nvidia.com/device` devices (GenerateTransientSpecName(..., "base"))."""
    name = f"{facts.CDI_VENDOR}-{NVIDIA_DEVICE_CLASS}_base"
    return tuple(cdi_root / (name + suffix) for suffix in NVIDIA_SPEC_SUFFIXES)


def remove_files(paths: tuple[Path, ...]) -> list[str]:
    """Remove `paths` that exist; one line per removed file; raises CleanupError."""
    done = []
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise CleanupError(f"cannot remove NVIDIA's CDI spec {path}: {exc}") from None
        done.append(f"removed {path}")
    return done


def _daemon_ids(claim: NvidiaClaim, plugin_data_dir: Path) -> list[str]:
    ids = [g.mps_daemon_id for g in claim.groups if g.mps_daemon_id]
    if not claim.groups:  # PrepareStarted: NVIDIA recorded nothing; its daemons' directories tell
        pattern = re.compile(re.escape(claim.uid) + r"-[0-9a-f]{5}")
        try:
            ids = sorted(
                p.name for p in (plugin_data_dir / NVIDIA_MPS_DIR).iterdir() if pattern.fullmatch(p.name)
            )
        except FileNotFoundError:
            ids = []
    return list(dict.fromkeys(ids))


def leftovers(
    claim: NvidiaClaim, *, tools: Tools, devices: Mapping[str, Device], in_use: set[str]
) -> Leftovers:
    """What to remove for `claim`.

    `devices` are this node's by name; `in_use` names devices that other claims hold.
    """
    daemons = _daemon_ids(claim, tools.plugin_data_dir)
    changed_gpus = bool(daemons) or bool(claim.sharing_strategies)
    reset: list[str] = []
    if changed_gpus:
        kinds = {d.device_name: (d.kind, d.uuid) for g in claim.groups for d in g.devices}
        for name in device_names(claim, tools.driver_name):
            if name in in_use:
                continue
            kind, uuid = kinds.get(name, ("", ""))
            device = devices.get(name)
            if not kind and device is not None:
                kind, uuid = device.device_type, device.uuid
            if kind == facts.DEVICE_TYPE_GPU and uuid:
                reset.append(uuid)
    return Leftovers(nvidia_spec_paths(tools.cdi_root, claim.uid), tuple(daemons), tuple(reset))


def undo(found: Leftovers, *, tools: Tools, deadline: float) -> list[str]:
    """Remove `found`, daemons first (as NVIDIA's Unprepare); returns one line per thing done."""
    done: list[str] = []
    for ident in found.mps_daemon_ids:
        name = NVIDIA_MPS_DAEMON_NAME_FMT.format(ident)
        if tools.api is None:
            raise CleanupError(
                f"cannot delete NVIDIA's MPS control daemon {tools.namespace}/{name}: no API access"
            )
        try:
            tools.api.delete_deployment(tools.namespace, name)  # gone already is fine
        except Exception as exc:  # the API client's error type is the caller's; every failure is a retry
            raise CleanupError(
                f"cannot delete NVIDIA's MPS control daemon {tools.namespace}/{name}: {exc}"
            ) from None
        done.append(f"deleted Deployment {tools.namespace}/{name}")
        root = nvidia_mps_root(tools.plugin_data_dir, ident)
        shm = root / "shm"
        if shm.is_mount():
            if tools.mounter is None:
                raise CleanupError(f"cannot unmount NVIDIA's MPS shm {shm}: no mounter")
            try:
                tools.mounter.unmount(shm)
            except Exception as exc:
                raise CleanupError(f"cannot unmount NVIDIA's MPS shm {shm}: {exc}") from None
            done.append(f"unmounted {shm}")
        if root.exists():
            shutil.rmtree(root, ignore_errors=True)
            if root.exists():
                raise CleanupError(f"cannot remove NVIDIA's MPS directory {root}")
            done.append(f"removed {root}")
    if found.reset_gpus:
        if tools.smi is None:
            raise CleanupError("cannot reset the GPUs NVIDIA's plugin changed: nvidia-smi is not available")
        for uuid in found.reset_gpus:
            try:
                tools.smi.set_compute_mode(uuid, "DEFAULT", deadline)
                tools.smi.set_timeslice(uuid, 0, deadline)
            except Exception as exc:
                raise CleanupError(
                    f"cannot reset GPU {uuid} to the default compute mode and time-slice: {exc}"
                ) from None
            done.append(f"reset {uuid} to compute mode DEFAULT, time-slice 0")
    done += remove_files(found.spec_paths)
    return done
