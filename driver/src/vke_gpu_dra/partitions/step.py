"""Step: dynamic MIG (the `partitions` package does the work).

* loaded (start): destroy the MIG devices no checkpoint entry owns and GPU instances without compute
  instances (what a crash in a create or destroy leaves);
* admit: the claim's MIG placements, recorded in its PrepareStarted entry before anything is created;
* set up, first: create the claim's MIG devices; the claim's devices become the created ones (its CDI
  spec names them). A failure destroys those created here and fails the claim;
* clean: destroy the claim's MIG devices (gone already is fine);
* restore after a reboot (which removes MIG devices): created again at their recorded placements,
  with new ids (static MIG devices are made before the plugin starts and are discovered as they are);
  a restore always names the created devices, for the CDI step's spec;
* overlapping: a placement shares memory slices with its whole GPU and overlapping placements.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import TYPE_CHECKING

from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, Device

from ..claims.checkpoint import ClaimEntry
from ..claims.step import ClaimWork, Node, Step
from .errors import PartitionError
from .records import STEP, MigDevices, MigRecord

if TYPE_CHECKING:
    from .manager import PartitionManager


class PartitionStep(Step):
    """`manager` None: dynamic MIG is off on this node; a claim recorded with MIG devices fails to clean
    or restore (its entry stays) instead of leaving them behind unnoticed."""

    name = STEP
    record = MigDevices

    def __init__(self, manager: PartitionManager | None) -> None:
        self.manager = manager

    def loaded(self, node: Node) -> None:
        if self.manager is not None:
            self.manager.clean_up(r for e in node.entries.values() for r in MigDevices.of(e))

    def admit(self, work: ClaimWork, node: Node) -> None:
        manager = self.manager
        if manager is None:
            return
        placements = tuple(manager.record(d.name) for d in work.devices if manager.is_placement(d.name))
        if placements:
            work.records[self.name] = MigDevices(placements)
            work.own_spec = True  # the created MIG devices exist for this claim only

    def set_up(self, work: ClaimWork, node: Node) -> None:
        placements = MigDevices.of(work)
        if not placements:
            return
        manager = self._manager(work.ref)
        created: list[MigRecord] = []
        try:
            for record in placements:
                created.append(manager.create(record))
        except PartitionError as exc:
            with contextlib.suppress(PartitionError):
                self._destroy(manager, tuple(created))
            raise ClaimError(f"claim {work.label}: {exc}") from None
        work.records[self.name] = MigDevices(tuple(created))
        work.devices = claim_devices(work.ref, [d.name for d in work.devices], created, node.devices, manager)

    def clean(self, ref: ClaimRef, entry: ClaimEntry | None, node: Node, deadline: float) -> None:
        placements = MigDevices.of(entry)
        if not placements:
            return
        try:
            self._destroy(self._manager(ref), placements.records)
        except PartitionError as exc:
            raise ClaimError(f"claim {ref.namespace}/{ref.name}: {exc}") from None

    def restore(self, work: ClaimWork, node: Node, deadline: float | None) -> None:
        placements = MigDevices.of(work)
        if not placements:
            return
        manager = self._manager(work.ref)
        if deadline is not None:  # a reboot removed them: created again, with new ids
            try:
                placements = MigDevices(
                    tuple(manager.create(replace(r, gi_id=None, ci_id=None, uuid=None)) for r in placements)
                )
            except PartitionError as exc:
                raise ClaimError(f"claim {work.label}: {exc}") from None
            work.records[self.name] = placements
        names = [d.name for d in work.devices]
        work.devices = claim_devices(work.ref, names, placements.records, node.devices, manager)

    def overlapping(self, device_name: str) -> AbstractSet[str]:
        return frozenset() if self.manager is None else self.manager.overlapping(device_name)

    def device_uuids(self, entry: ClaimEntry) -> Mapping[str, str]:
        """The UUID of each MIG device created for the claim, by its placement device's name."""
        return MigDevices.of(entry).uuids()

    def _manager(self, ref: ClaimRef) -> PartitionManager:
        if self.manager is None:
            raise ClaimError(
                f"claim {ref.namespace}/{ref.name}: dynamic MIG is not enabled on this node (feature gate "
                "DynamicMIG)"
            )
        return self.manager

    @staticmethod
    def _destroy(manager: PartitionManager, records: Sequence[MigRecord]) -> None:
        for record in records:
            manager.destroy(record)


def claim_devices(
    ref: ClaimRef,
    names: Sequence[str],
    records: Sequence[MigRecord],
    devices: Mapping[str, Device],
    manager: PartitionManager | None,
) -> list[Device]:
    """The devices named `names`, a placement in `records` as the MIG device created for it; ClaimError
    when a placement's device cannot be described (or dynamic MIG is off on this node)."""
    created = {r.device: r for r in records}
    found = []
    for name in names:
        device = devices[name]
        if name in created:
            if manager is None:
                raise ClaimError(
                    f"claim {ref.namespace}/{ref.name}: dynamic MIG is not enabled on this node "
                    "(feature gate DynamicMIG)"
                )
            try:
                device = manager.device(created[name], device)
            except PartitionError as exc:
                raise ClaimError(f"claim {ref.namespace}/{ref.name}: {exc}") from None
        found.append(device)
    return found
