"""The sharing manager: what a claim's GPU sharing does on the node in each phase of the claim.

* prepare: apply a claim's `Plan` (its record is in the checkpoint already) and return the CDI
  edits of its devices;
* unprepare: reverse exactly a record, also after a restart; GPUs other claims hold keep theirs;
* restore: what a prepared claim's CDI spec needs again when the spec is rewritten.

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


@contextlib.contextmanager
def _claim_error(ref: ClaimRef, what: str = "") -> Iterator[None]:
    """A failed sharing step becomes the claim's error: `claim <ns>/<name>: <what><why>`."""
    try:
        yield
    except (SharingError, OSError) as exc:
        raise ClaimError(f"claim {ref.namespace}/{ref.name}: {what}{exc}") from None


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

        What was applied before a failure stays: the caller undoes the whole record (`unprepare`).
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

    def restore(self, record: SharingRecord) -> CdiEdits:
        """What a prepared claim's CDI devices need again when its spec is rewritten: the MPS pipe and
        shm of its daemons (the settings themselves are still in place)."""
        return {
            name: mps_cdi_edits(self.plugin_data_dir, m.daemon_id) for m in record.mps for name in m.devices
        }

    # ------------------------------------------------------------------------------------- MPS

    def _start_mps(self, claim_uid: str, group: MpsGroup, deadline: float) -> None:
        try:
            self._start_mps_api(claim_uid, group, deadline)
        except KubeError as exc:
            raise SharingError(f"MPS control daemon: API request failed: {exc}") from None

    def _start_mps_api(self, claim_uid: str, group: MpsGroup, deadline: float) -> None:
        if self.api is None or self.image is None:
            raise SharingError("MPS needs API access and --image-name")
        uuids = group.uuids
        ident = daemon_id(claim_uid, uuids)
        try:
            limits = mps_limits(group.settings, uuids, group.label)
        except OpaqueConfigError as exc:
            raise SharingError(str(exc)) from None
        name = daemon_name(ident)
        if self.api.get_deployment(self.namespace, name) is None:
            dirs = mps_dirs(self.plugin_data_dir, ident)
            for d in dirs.values():
                d.mkdir(parents=True, exist_ok=True, mode=0o755)
            if not dirs["shm"].is_mount():
                self.mounter.mount_shm(dirs["shm"])
            for uuid in uuids:
                self.smi.set_compute_mode(uuid, "EXCLUSIVE_PROCESS", deadline)
            obj = mps_deployment(
                ident=ident,
                node_name=self.node_name,
                namespace=self.namespace,
                image=self.image,
                host_driver_root=self.host_driver_root,
                plugin_data_dir=self.plugin_data_dir,
                uuids=uuids,
                active_thread_percentage=group.settings.active_thread_percentage,
                limits=limits,
                gates=self.gates,
            )
            self.api.create_deployment(self.namespace, obj)
            log.info("started MPS control daemon", extra={"fields": {"daemon": name}})
        self._wait_ready(name, deadline)

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
                raise SharingError(f"MPS control daemon {self.namespace}/{name} is not yet ready: {why}")
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
