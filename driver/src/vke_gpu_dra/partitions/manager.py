"""Creating and destroying the MIG devices of claims (what `state.py`'s partitions step calls).

Order that keeps a crash harmless (kill -9 at any instant):

1. the claim's PrepareStarted entry records the placements (`MigRecord`, no ids) before anything is made;
2. `create` makes the GPU instance and its compute instance; the placement owns it from the first NVML
   call on, so an instance a crash leaves is owned by the entry that recorded it;
3. the PrepareCompleted entry records the ids and the MIG UUID, then the CDI spec is used.

`create` is idempotent: an instance of the recorded profile at the recorded placement (a crash after
the create, kubelet's retry) is taken as the claim's; a GPU instance there without its compute instance
is destroyed first. `destroy` of an instance already gone is a success.

`overlapping` says which devices of a GPU share its memory slices (the whole GPU and each of its
placements; two placements with a slice in common): the held-devices guard (`allocation.guard.find_holders`)
refuses to prepare one while another is prepared, as the counters keep the scheduler from allocating
both.

At start (`clean_up`, under the node lock, before the plugin registers): on every dynamic-MIG GPU, the
GPU instances without a compute instance are destroyed (an interrupted create or destroy) and so is
every MIG instance no checkpoint entry's record owns, as NVIDIA's plugin does at start.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from vke_gpu_dra_core.device_model import Device

from ..discovery.mig_lifecycle import MigInstance, MigLifecycleError
from .backends import MigBackend
from .errors import PartitionError
from .publish import PartitionedGpu
from .records import MigRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CleanUp:
    """What the start-up clean-up destroyed (descriptions `GPU <uuid>: GI <id> ...`)."""

    destroyed: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()


class PartitionManager:
    """The dynamic-MIG GPUs of this node and their MIG devices."""

    def __init__(self, backend: MigBackend, gpus: Sequence[PartitionedGpu]) -> None:
        self._backend = backend
        self._gpus = tuple(gpus)
        self._placements: dict[str, tuple[PartitionedGpu, str]] = {}
        self._overlapping: dict[str, frozenset[str]] = {}
        for gpu in gpus:
            for name in gpu.placements:
                self._placements[name] = (gpu, name)
            devices = gpu.partitions.devices
            for device in devices:
                self._overlapping[device.name] = frozenset(
                    o.name for o in devices if o.name != device.name and device.excludes(o)
                )

    @property
    def gpus(self) -> tuple[PartitionedGpu, ...]:
        return self._gpus

    @property
    def devices(self) -> list[Device]:
        return [d for gpu in self._gpus for d in gpu.devices]

    def is_placement(self, device_name: str) -> bool:
        return device_name in self._placements

    def overlapping(self, device_name: str) -> frozenset[str]:
        """The other devices of `device_name`'s GPU that cannot be prepared beside it (they share a
        memory slice: the whole GPU and each placement, overlapping placements); empty for a device of
        no dynamic-MIG GPU."""
        return self._overlapping.get(device_name, frozenset())

    def record(self, device_name: str) -> MigRecord:
        """The record (no ids yet) of placement device `device_name`."""
        gpu, name = self._placements[device_name]
        partition = gpu.partition(name)
        assert partition is not None and partition.profile is not None and partition.placement is not None
        return MigRecord(
            device=name,
            parent_uuid=gpu.parent_uuid,
            parent_minor=gpu.minor,
            profile_id=partition.profile.profile_id,
            start=partition.placement.start,
            size=partition.placement.size,
        )

    # ------------------------------------------------------------------------------ create, destroy

    def create(self, record: MigRecord) -> MigRecord:
        """The MIG device of `record` (made now, or found made by an earlier try); `record` with its ids."""
        try:
            found = self._find(record)
            if found is None:
                for gi_id, placement in self._backend.without_compute(record.parent_uuid):
                    if placement.start == record.start:
                        self._backend.destroy(record.parent_uuid, gi_id, None)
                found = self._backend.create(record.parent_uuid, record.profile_id, record.start)
            caps = self._backend.caps_nodes(found)
        except MigLifecycleError as exc:
            raise PartitionError(f"MIG device {record.device}: {exc}") from None
        if caps is None:
            raise PartitionError(
                f"MIG device {record.device}: capability nodes of GPU instance {found.gi_id} / compute "
                f"instance {found.ci_id} not found in /proc/driver/nvidia-caps/mig-minors"
            )
        log.info(
            "MIG device created",
            extra={
                "fields": {"device": record.device, "uuid": found.uuid, "gi": found.gi_id, "ci": found.ci_id}
            },
        )
        return replace(record, gi_id=found.gi_id, ci_id=found.ci_id, uuid=found.uuid, caps_nodes=caps)

    def destroy(self, record: MigRecord) -> None:
        """Destroy the MIG device of `record` (whatever its ids say: the placement owns it)."""
        try:
            found = self._find(record)
            if found is not None:
                self._backend.destroy(record.parent_uuid, found.gi_id, None)
            for gi_id, placement in self._backend.without_compute(record.parent_uuid):
                if placement.start == record.start:
                    self._backend.destroy(record.parent_uuid, gi_id, None)
        except MigLifecycleError as exc:
            raise PartitionError(f"MIG device {record.device}: {exc}") from None
        log.info("MIG device destroyed", extra={"fields": {"device": record.device}})

    def _find(self, record: MigRecord) -> MigInstance | None:
        for instance in self._backend.instances(record.parent_uuid):
            if record.owns(instance.parent_uuid, instance.profile_id, instance.placement.start):
                return instance
        return None

    def device(self, record: MigRecord, base: Device) -> Device:
        """The placement device `base` as the created MIG device of `record` (UUID, capability nodes)."""
        if record.uuid is None:
            raise PartitionError(f"MIG device {record.device} was not created")
        return replace(
            base,
            uuid=record.uuid,
            device_nodes=() if base.simulated else (*base.device_nodes[:1], *record.caps_nodes),
        )

    # -------------------------------------------------------------------------------------- start

    def clean_up(self, owned: Iterable[MigRecord]) -> CleanUp:
        """Destroy GPU instances without compute instances and MIG instances no record in `owned` owns."""
        records = list(owned)
        destroyed: list[str] = []
        failed: list[str] = []
        for gpu in self._gpus:
            parent = gpu.parent_uuid
            try:
                for gi_id, placement in self._backend.without_compute(parent):
                    what = f"GPU {parent}: GI {gi_id} (placement {placement.start}) without compute instance"
                    self._backend.destroy(parent, gi_id, None)
                    destroyed.append(what)
                for instance in self._backend.instances(parent):
                    if any(r.owns(parent, instance.profile_id, instance.placement.start) for r in records):
                        continue
                    what = (
                        f"GPU {parent}: GI {instance.gi_id} / CI {instance.ci_id} (profile "
                        f"{instance.profile_id}, placement {instance.placement.start}) owned by no claim"
                    )
                    self._backend.destroy(parent, instance.gi_id, None)
                    destroyed.append(what)
            except MigLifecycleError as exc:
                failed.append(f"GPU {parent}: {exc}")
        for what in destroyed:
            log.warning("destroyed a MIG device left by an earlier run", extra={"fields": {"instance": what}})
        for what in failed:
            log.error("MIG clean-up at start failed", extra={"fields": {"problem": what}})
        return CleanUp(tuple(destroyed), tuple(failed))
