"""The claim lifecycle: admit, set up, clean and restore a claim, each phase calling the steps in order.

The steps (`step.Step`, one per feature package: takeover, allocation, dynamic MIG, sharing, device
metadata, CDI, as `DeviceState` gives them) do the work of each feature; this module only orders them and
keeps the checkpoint's entries:

* admit (a new prepare): a completed claim answers from its entry, after getting back what it lost
  (`restore`); a new one goes through every step's `admit` (until one decides it) and gets its
  PrepareStarted entry, holding its devices, so a claim admitted after it in the same batch meets them;
* set up: every step's `set_up` in order. On failure a claim with a record of a step that asks for it
  (`Step.roll_back_failed`: GPU sharing) is rolled back (cleaned; its entry goes) when the undo works;
  otherwise its PrepareStarted entry stays for unprepare to clean. A set-up still under way
  (`ClaimPending`: an MPS daemon only slow to become Ready) is never rolled back;
* complete: the PrepareCompleted entries of the claims set up;
* clean (kubelet's unprepare and the cleanup of a ghost alike): every step's `clean` in the reverse
  order, then the entry goes; a failed undo keeps the entry, so the retry undoes it again;
* restore: a completed claim that lost something (`Step.lost`; after a reboot, every completed claim)
  goes through every step's `restore` in order.

The checkpoint is read under the node lock by `node()` at each batch: a corrupt file is moved aside and
its copy read (`checkpoint`); claim specs in the CDI root without an entry are recovered (at start, and
whenever the checkpoint had a problem), each holding the devices its spec names. When claims may be
missing (neither the file nor its copy usable, or a damaged journal: `lost`), no new claim is admitted
(`RecoveryPending`) until the claims prepared before are recovered from kubelet and the API server
(`recovered`, through `DeviceState.recover_lost`): until then their devices are unknown, so every
device counts as held.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Final

from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, Device, PreparedDevice

from .. import cdi
from .batch import Op
from .checkpoint import CheckpointStore, ClaimEntry, ClaimState
from .step import ClaimPending, ClaimWork, Node, Step, held_by_steps

log = logging.getLogger(__name__)

#: Time allowed to undo a failed prepare's changes (kubelet's deadline may be spent by then).
ROLLBACK_SECONDS: Final = 10.0


class RecoveryPending(ClaimError):
    """A new claim met a checkpoint that may have lost claims not recovered yet (`ClaimLifecycle.lost`)."""

    def __init__(self, ref: ClaimRef, why: str) -> None:
        self.ref = ref
        self.why = why
        super().__init__(
            f"claim {ref.namespace}/{ref.name}: not prepared while the claims prepared on this node before "
            f"are recovered ({why}): until they are known, any device may be held by one of them"
        )


class ClaimLifecycle:
    """Takes claims through their phases with `steps` (in set-up order), keeping the checkpoint in `store`."""

    def __init__(
        self,
        *,
        driver_name: str,
        pool_name: str,
        devices: Mapping[str, Device],
        store: CheckpointStore,
        cdi_root: Path,
        steps: Sequence[Step],
    ) -> None:
        self.driver_name = driver_name
        self.pool_name = pool_name
        self.devices = devices
        self.store = store
        self.cdi_root = cdi_root
        self.steps = tuple(steps)
        #: When a prepare of each claim last answered in this process (a ghost judged before is kept).
        self.answered_at: dict[str, float] = {}
        #: The one-line problem found while loading the checkpoint at start (None when it was fine).
        self.load_problem: str | None = None
        #: Why claims may be missing from the checkpoint until they are recovered (None: none are); kept
        #: on disk (`CheckpointStore.save_lost`) so that a restart before the recovery still knows.
        self.lost: str | None = None

    # ---------------------------------------------------------------------------- the checkpoint

    def node(self) -> Node:
        """The node with the checkpoint's entries, read now (caller holds the node lock)."""
        return Node(self.driver_name, self.pool_name, self.devices, self.read())

    def save(self, node: Node) -> None:
        self.store.save(node.entries)

    def read(self, *, recover_orphans: bool = False, at_start: bool = False) -> dict[str, ClaimEntry]:
        """The checkpoint's entries (caller holds the node lock); see the module docstring."""
        if at_start:
            self.lost = self.store.load_lost()
        result = self.store.load()
        entries = dict(result.entries)
        if result.problem is not None:
            if at_start:
                self.load_problem = result.problem
            log.error("%s", result.problem)
        if result.lost is not None:
            self._lose(result.lost)
        recovered = []
        if recover_orphans or result.problem is not None:
            known = self.known_only_to_steps(entries)  # an adopted claim's spec is NVIDIA's, released with it
            for uid, path in cdi.list_claim_specs(self.cdi_root).items():
                if uid in entries or uid in known:
                    continue
                # Request names are not in the spec: the claim is marked started, so a repeated prepare
                # redoes it and unprepare removes the spec; it holds the devices its spec names.
                entries[uid] = ClaimEntry(
                    uid, "", "", ClaimState.PREPARE_STARTED, self._spec_devices(uid, path)
                )
                recovered.append(uid)
        if recovered:
            log.warning(
                "recovered %d claim(s) from CDI specs without checkpoint entries: %s",
                len(recovered),
                ", ".join(recovered),
            )
        if recovered or result.problem is not None:
            try:
                self.store.save(entries)
            except OSError as exc:
                if not at_start:
                    raise
                # Started with a full disk: what was recovered is recovered again at the next start.
                log.warning(
                    "cannot write the recovered checkpoint at start: it is recovered again at the next start",
                    extra={"fields": {"error": str(exc)}},
                )
        return entries

    def _lose(self, why: str) -> None:
        """Claims may be missing from the checkpoint: kept in memory and on disk until `recovered`."""
        self.lost = why if self.lost is None or why in self.lost else f"{self.lost}; {why}"
        try:
            self.store.save_lost(self.lost)
        except OSError as exc:  # still held in this process; a restart finds the files moved aside
            log.error("cannot keep the lost checkpoint's state on disk: %s", exc)

    def _spec_devices(self, uid: str, path: Path) -> tuple[PreparedDevice, ...]:
        """The devices of this node a claim spec names (`<uid>-<device>[-share-<id>]`); none when it
        cannot be read."""
        try:
            spec = cdi.load_spec(path)
        except (OSError, cdi.CdiSpecError) as exc:
            log.warning("%s is not a valid CDI spec (%s); unprepare will still remove it", path, exc)
            return ()
        found: dict[str, PreparedDevice] = {}
        for raw in spec["devices"]:
            spec_name = str(raw.get("name", "")) if isinstance(raw, dict) else ""
            try:
                name = cdi.device_name_from_cdi(uid, spec_name)
            except cdi.CdiSpecError:
                continue
            device, _, share = name.partition("-share-")
            if device in self.devices and device not in found:
                found[device] = PreparedDevice(
                    (), self.pool_name, device, (cdi.claim_device_id(uid, device, share or None),)
                )
        return tuple(found.values())

    def recovered(self, node: Node, claims: Sequence[ClaimEntry]) -> list[ClaimEntry]:
        """End the loss (`lost`): `claims` (allocated to this node by this driver, found through
        kubelet and the API server) become PrepareStarted entries holding their devices where the
        checkpoint has no named entry; the entries added or named, in order."""
        known = self.known_only_to_steps(node.entries)
        added = []
        for claim in claims:
            entry = node.entries.get(claim.uid)
            if claim.uid in known or (entry is not None and entry.namespace and entry.name):
                continue
            devices = entry.devices if entry is not None and entry.devices else claim.devices
            node.entries[claim.uid] = replace(claim, state=ClaimState.PREPARE_STARTED, devices=devices)
            added.append(node.entries[claim.uid])
        self.store.save(node.entries)
        self.store.clear_lost()
        self.lost = None
        for entry in node.entries.values():
            if not (entry.namespace and entry.name) and entry.uid not in known:
                log.error(
                    "claim not recovered: only its CDI spec names it, and no pod of this node uses a claim "
                    "of its UID; its devices stay held until kubelet unprepares it",
                    extra={"fields": {"uid": entry.uid, "devices": [d.device_name for d in entry.devices]}},
                )
        return added

    def known_only_to_steps(self, entries: dict[str, ClaimEntry]) -> dict[str, ClaimEntry]:
        """Claims the steps know that the checkpoint does not have (adopted from NVIDIA's plugin)."""
        return held_by_steps(self.steps, Node(self.driver_name, self.pool_name, self.devices, entries))

    # ------------------------------------------------------------------------------------ prepare

    def admit(self, op: Op, node: Node) -> None:
        ref = op.ref
        entry = node.entries.get(ref.uid)
        if entry is not None and entry.state is ClaimState.PREPARE_COMPLETED:
            restored = self.restore(ref, entry, node)
            op.entry = restored
            self.answered_at[ref.uid] = time.monotonic()
            if restored == entry:
                op.answer(list(entry.devices))
                return
            # A step's record changed (MIG devices created again): answered once the entry is written.
            node.entries[ref.uid] = restored
            op.changed, op.result = True, list(restored.devices)
            return
        if self.lost is not None and entry is None:
            raise RecoveryPending(ref, self.lost)
        assert op.claim is not None
        work = ClaimWork(ref, op.claim, op.deadline, tolerated=op.tolerated)
        for step in self.steps:
            step.admit(work, node)
            if work.decided:
                break
        node.entries[ref.uid] = work.entry(ClaimState.PREPARE_STARTED)
        op.work = work

    def set_up(self, op: Op, node: Node) -> None:
        work = op.work
        assert work is not None
        try:
            for step in self.steps:
                step.set_up(work, node)
        except ClaimPending:
            raise  # what is under way stays with the entry that records it; kubelet's retry waits again
        except ClaimError:
            if any(step.roll_back_failed and work.records.get(step.name) for step in self.steps):
                op.rolled_back = self._roll_back(work, node)
            raise

    def complete(self, started: Sequence[Op], node: Node) -> None:
        now = time.monotonic()
        for op in started:
            if op.rolled_back:
                node.entries.pop(op.ref.uid, None)
            elif not op.answered and op.work is not None:
                node.entries[op.ref.uid] = op.entry = op.work.entry(ClaimState.PREPARE_COMPLETED)
                self.answered_at[op.ref.uid] = now

    def _roll_back(self, work: ClaimWork, node: Node) -> bool:
        """After a failed prepare: undo what its entry records; False (entry kept) on failure."""
        record = work.entry(ClaimState.PREPARE_STARTED)
        try:
            self._clean_steps(work.ref, record, node, time.monotonic() + ROLLBACK_SECONDS)
        except (ClaimError, OSError) as exc:
            log.warning("claim %s: rollback incomplete (%s); unprepare will retry", work.ref, exc)
            return False
        return True

    # ---------------------------------------------------------------------------------- unprepare

    def unprepare(self, op: Op, node: Node) -> None:
        """Unprepare, and the cleanup of a ghost (`op.expect`): the latter does nothing when the entry
        changed (or went, or its claim was prepared) since the read that judged it."""
        uid = op.ref.uid
        if op.expect is not None:
            current = self.known_only_to_steps(node.entries) if op.step_claim else node.entries
            if self.answered_at.get(uid, -1.0) >= op.judged_at or current.get(uid) != op.expect:
                return
        self.answered_at.pop(uid, None)
        op.step_claim_cleaned = op.step_claim  # cleaned below by the steps that know it, or an error
        op.changed = self.clean(op.ref, node, op.deadline) or op.changed

    def clean(self, ref: ClaimRef, node: Node, deadline: float) -> bool:
        """Undo everything the claim's entry records, in either state, then remove the entry; True when
        an entry was removed. Raises ClaimError (the entry stays)."""
        self._clean_steps(ref, node.entries.get(ref.uid), node, deadline)
        return node.entries.pop(ref.uid, None) is not None

    def _clean_steps(self, ref: ClaimRef, entry: ClaimEntry | None, node: Node, deadline: float) -> None:
        for step in reversed(self.steps):
            step.clean(ref, entry, node, deadline)

    # ------------------------------------------------------------------------------------ restore

    def restore(
        self, ref: ClaimRef, entry: ClaimEntry, node: Node, deadline: float | None = None
    ) -> ClaimEntry:
        """Give a completed claim back what it lost (`deadline`: after a reboot, everything the reboot
        reset, by then); returns the entry, with the new ids of MIG devices created again."""
        if deadline is None and not any(step.lost(entry, node) for step in self.steps):
            return entry
        names = list(dict.fromkeys(d.device_name for d in entry.devices))
        missing = [n for n in names if n not in node.devices]
        if missing:
            raise ClaimError(
                f"claim {ref.namespace}/{ref.name} was prepared with device(s) {', '.join(missing)}, "
                "which this node no longer publishes"
            )
        work = ClaimWork(
            ref,
            {},
            deadline if deadline is not None else time.monotonic() + ROLLBACK_SECONDS,
            devices=[node.devices[n] for n in names],
            records=dict(entry.records),
            prepared=list(entry.devices),
            restoring=entry,
        )
        for step in self.steps:
            step.restore(work, node, deadline)
        return replace(entry, records=work.records) if work.records_changed else entry
