"""The sharing manager: what a claim's GPU sharing does on the node in each phase of the claim.

* prepare: apply a claim's `Plan` (its record is in the checkpoint already) and return the CDI
  edits of its devices. An MPS daemon that exists but is not Ready by the deadline stays
  (`MpsDaemonPending`): kubelet's retry finds it and waits again, so a daemon whose image takes
  longer than one call to pull still comes up;
* unprepare: reverse exactly a record, also after a restart; GPUs other claims hold keep theirs.
  This is also how a kept MPS daemon goes: on unprepare, or when a clean-up of the claim's entry
  (a claim that is gone) reverses its record;
* restore: what a prepared claim's CDI spec needs again when the spec is rewritten;
  `reapply_after_reboot`: what a reboot reset, from the record alone (time-slice and compute mode,
  the MPS shm mount and a daemon started after it, Ready).

Each phase raises the claim's error (`ClaimError`, naming the claim) itself. Time-slicing goes
through `nvidia-smi`, MPS through a control-daemon Deployment per claim, as NVIDIA's 25.8.1 plugin
does; every `nvidia-smi` call names one GPU (`-i <uuid>`), without it nvidia-smi would change every
GPU of the node. The Kubernetes API is given at construction; the commands go through the runners.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, Device
from vke_gpu_dra_core.featuregates import FeatureGates

from ..claims.step import ClaimPending
from ..kubeapi import KubeError
from ..opaque_config import OpaqueConfigError, mps_limits
from .mps import daemon_id, daemon_name, daemon_ready, mps_cdi_edits, mps_deployment, mps_dirs
from .plan import MpsGroup, OtherClaim, Plan, devices_in_use
from .records import SharingRecord
from .runners import Mounter, NvidiaSmi, SharingError

log = logging.getLogger(__name__)

READY_POLL_SECONDS: Final = 0.5

#: Container edits per device name, added to a claim's CDI devices.
CdiEdits = dict[str, dict[str, Any]]


class DeploymentAPI(Protocol):
    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def create_deployment(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]: ...
    def delete_deployment(self, namespace: str, name: str) -> None: ...


class MpsDaemonPending(ClaimPending):
    """The claim's MPS control daemon exists but was not Ready by the deadline (or its readiness could
    not be read): the daemon stays, so the claim's next prepare waits for it instead of starting from
    nothing."""


class _NotReady(SharingError):
    """An existing daemon is not Ready (yet); becomes MpsDaemonPending."""


@contextlib.contextmanager
def _claim_error(ref: ClaimRef, what: str = "") -> Iterator[None]:
    """A failed sharing step becomes the claim's error: `claim <ns>/<name>: <what><why>`."""
    try:
        yield
    except _NotReady as exc:
        raise MpsDaemonPending(f"claim {ref.namespace}/{ref.name}: {what}{exc}") from None
    except (SharingError, OSError) as exc:
        raise ClaimError(f"claim {ref.namespace}/{ref.name}: {what}{exc}") from None


def _being_deleted(deployment: Mapping[str, Any]) -> bool:
    return bool((deployment.get("metadata") or {}).get("deletionTimestamp"))


def _as_new(deployment: Mapping[str, Any]) -> dict[str, Any]:
    """An existing Deployment as an object to create again: its spec, its name and labels."""
    meta = deployment.get("metadata") or {}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {k: meta[k] for k in ("namespace", "name", "labels", "annotations") if k in meta},
        "spec": deployment["spec"],
    }


@dataclass
class SharingManager:
    """Applies and undoes sharing for claims of this node."""

    gates: FeatureGates
    smi: NvidiaSmi
    plugin_data_dir: Path
    node_name: str = ""
    namespace: str = "default"
    image: str | None = None
    host_driver_root: Path = Path("/")
    api: DeploymentAPI | None = None
    sleep: Callable[[float], None] = time.sleep
    mounter: Mounter = field(default_factory=Mounter)

    # ------------------------------------------------------------------------------ the phases

    def prepare(self, ref: ClaimRef, plan: Plan, deadline: float) -> CdiEdits:
        """Apply `plan` and return the CDI edits of the claim's devices; raises ClaimError.

        What was applied before a failure stays: the caller undoes the whole record (`unprepare`),
        unless the failure is `MpsDaemonPending` (a daemon exists and only needs time: keep it).
        """
        with _claim_error(ref):
            for ts in plan.timeslice:
                self.smi.set_compute_mode(ts.device.uuid, "DEFAULT", deadline)
                self.smi.set_timeslice(ts.device.uuid, ts.value, deadline)
            for group in plan.mps:
                self._start_mps(ref.uid, group, deadline)
        return self.restore(plan.record)

    def unprepare(
        self,
        ref: ClaimRef,
        record: SharingRecord,
        *,
        devices: Mapping[str, Device],
        others: Iterable[OtherClaim],
        deadline: float,
    ) -> None:
        """Reverse `record`; GPUs that `others` (the node's other prepared claims) hold keep their
        setting. `devices` are the node's, by name. Raises ClaimError."""
        in_use = devices_in_use(others)
        with _claim_error(ref, "cannot undo GPU sharing: "):
            for mps in record.mps:
                self._stop_mps(mps.daemon_id)
                for dev in mps.devices:
                    if dev in devices and dev not in in_use:
                        self.smi.set_compute_mode(devices[dev].uuid, "DEFAULT", deadline)
            for dev in sorted(record.timeslice):
                if dev in devices and dev not in in_use:
                    self.smi.set_compute_mode(devices[dev].uuid, "DEFAULT", deadline)
                    self.smi.set_timeslice(devices[dev].uuid, 0, deadline)

    def reapply_after_reboot(
        self, ref: ClaimRef, record: SharingRecord, *, devices: Mapping[str, Device], deadline: float
    ) -> None:
        """Give a prepared claim's GPUs back what a reboot reset, from its record alone: compute mode
        and time-slice of each time-sliced GPU; for each MPS daemon, compute mode
        `EXCLUSIVE_PROCESS`, the shm tmpfs, and the daemon started again after the mount, Ready by
        `deadline`. `devices` are the node's, by name. Raises ClaimError (`MpsDaemonPending` for a
        daemon not Ready in time)."""
        with _claim_error(ref, "cannot restore GPU sharing after the node rebooted: "):
            missing = sorted(record.device_names() - set(devices))
            if missing:
                raise SharingError(f"device(s) {', '.join(missing)} no longer published by this node")
            for name, value in sorted(record.timeslice.items()):
                self.smi.set_compute_mode(devices[name].uuid, "DEFAULT", deadline)
                self.smi.set_timeslice(devices[name].uuid, value, deadline)
            for mps in record.mps:
                self._ensure_daemon(mps.daemon_id, [devices[d].uuid for d in mps.devices], None, deadline)

    def restore(self, record: SharingRecord) -> CdiEdits:
        """What a prepared claim's CDI devices need again when its spec is rewritten: the MPS pipe and
        shm of its daemons (the settings themselves are still in place)."""
        return {
            name: mps_cdi_edits(self.plugin_data_dir, m.daemon_id) for m in record.mps for name in m.devices
        }

    # ------------------------------------------------------------------------------------- MPS

    def _start_mps(self, claim_uid: str, group: MpsGroup, deadline: float) -> None:
        if self.api is None or self.image is None:
            raise SharingError("MPS needs API access and --image-name")
        uuids = group.uuids
        ident = daemon_id(claim_uid, uuids)
        try:
            limits = mps_limits(group.settings, uuids, group.label)
        except OpaqueConfigError as exc:
            raise SharingError(str(exc)) from None
        image = self.image

        def build() -> dict[str, Any]:
            return mps_deployment(
                ident=ident,
                node_name=self.node_name,
                namespace=self.namespace,
                image=image,
                host_driver_root=self.host_driver_root,
                plugin_data_dir=self.plugin_data_dir,
                uuids=uuids,
                active_thread_percentage=group.settings.active_thread_percentage,
                limits=limits,
                gates=self.gates,
            )

        self._ensure_daemon(ident, uuids, build, deadline)

    def _ensure_daemon(
        self, ident: str, uuids: list[str], build: Callable[[], dict[str, Any]] | None, deadline: float
    ) -> None:
        """Bring MPS daemon `ident` for `uuids` up and wait until it is Ready: its directories, the shm
        tmpfs, compute mode EXCLUSIVE_PROCESS, then its Deployment.

        A Deployment that exists is kept (the retry of a prepare whose daemon was slow to start),
        unless its pod predates the shm mount made now (a reboot unmounted it, and the pod's /dev/shm
        would not be the workloads') or it is being deleted: then it is created again once the old
        one is gone, from `build` (the claim's plan) or else as it was. A missing one is created from
        `build`; without one (after a reboot, from the record alone) a missing Deployment is an
        error. A daemon that exists but is not Ready by `deadline` raises `_NotReady`.
        """
        if self.api is None:
            raise SharingError("MPS needs API access")
        name = daemon_name(ident)
        dirs = mps_dirs(self.plugin_data_dir, ident)
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True, mode=0o755)
        remounted = not self.mounter.mounted(dirs["shm"])
        if remounted:
            self.mounter.mount_shm(dirs["shm"])
        for uuid in uuids:
            self.smi.set_compute_mode(uuid, "EXCLUSIVE_PROCESS", deadline)
        try:
            existing = self.api.get_deployment(self.namespace, name)
            stale = existing is not None and (remounted or _being_deleted(existing))
            if existing is None or stale:
                obj = self._daemon_object(name, existing, build)
                if existing is not None:
                    log.warning(
                        "MPS control daemon predates its shm mount or is being deleted: starting it again",
                        extra={"fields": {"daemon": name}},
                    )
                    self._delete_and_wait(name, existing, deadline)
                self.api.create_deployment(self.namespace, obj)
                log.info("started MPS control daemon", extra={"fields": {"daemon": name}})
        except KubeError as exc:
            raise SharingError(f"MPS control daemon: API request failed: {exc}") from None
        try:
            self._wait_ready(name, deadline)
        except KubeError as exc:
            raise _NotReady(
                f"MPS control daemon {self.namespace}/{name}: cannot read its readiness: {exc}"
            ) from None

    def _daemon_object(
        self, name: str, existing: Mapping[str, Any] | None, build: Callable[[], dict[str, Any]] | None
    ) -> dict[str, Any]:
        """The Deployment to create: from the claim's plan, else as the existing one was."""
        if build is not None:
            return build()
        if existing is not None:
            return _as_new(existing)
        raise SharingError(
            f"MPS control daemon {self.namespace}/{name} is gone (its Deployment was deleted); "
            "the claim's next prepare creates it again"
        )

    def _delete_and_wait(self, name: str, existing: Mapping[str, Any], deadline: float) -> None:
        """Delete the Deployment (unless it is being deleted already) and wait until it is gone: its
        pod's daemon must have stopped before another one starts on the same pipe directory."""
        assert self.api is not None
        if not _being_deleted(existing):
            self.api.delete_deployment(self.namespace, name)
        while self.api.get_deployment(self.namespace, name) is not None:
            if time.monotonic() + READY_POLL_SECONDS >= deadline:
                raise SharingError(f"MPS control daemon {self.namespace}/{name} is still being deleted")
            self.sleep(READY_POLL_SECONDS)

    def _wait_ready(self, name: str, deadline: float) -> None:
        assert self.api is not None
        why = "not checked"
        while True:
            deployment = self.api.get_deployment(self.namespace, name)
            if deployment is None:
                why = "its Deployment is gone"
            else:
                why = daemon_ready(deployment) or ""
                if not why:
                    return
            if time.monotonic() + READY_POLL_SECONDS >= deadline:
                raise _NotReady(f"MPS control daemon {self.namespace}/{name} is not yet ready: {why}")
            self.sleep(READY_POLL_SECONDS)

    def _stop_mps(self, ident: str) -> None:
        name = daemon_name(ident)
        if self.api is None:
            raise SharingError(f"cannot stop MPS control daemon {name}: no API access")
        try:
            self.api.delete_deployment(self.namespace, name)
        except KubeError as exc:
            raise SharingError(f"cannot delete MPS control daemon {self.namespace}/{name}: {exc}") from None
        dirs = mps_dirs(self.plugin_data_dir, ident)
        if dirs["shm"].exists():
            self.mounter.unmount(dirs["shm"])
        shutil.rmtree(dirs["root"], ignore_errors=True)
