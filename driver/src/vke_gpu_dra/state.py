"""Prepared-claim state of this node: prepare/unprepare, backed by CDI specs and the checkpoint.

Stateless between calls: every prepare and unprepare runs under the node lock (`nodelock`, shared
with any other plugin process on this node, e.g. the other pod of a seamless upgrade), which reads
the checkpoint, makes the change durable and releases the lock. No prepared claim is kept in
memory, so a claim prepared by one process is known to the other at its next call. Waiting for
the lock is bounded by the caller's deadline (kubelet's, for gRPC calls).

Calls that arrive together share the lock: the thread that gets it runs every queued operation on
distinct claims as one batch (one checkpoint read, one write of their PrepareStarted entries, their
CDI specs in parallel, one write of the results), so concurrent prepares do not each pay for two
checkpoint rewrites. Operations on the same claim run one after the other.

A claim goes through three phases here, each a method that calls the sharing package once:

* prepare: `_admit` checks the claim and plans its GPU sharing (`sharing.plan`, pure) before its
  PrepareStarted entry is written; `_set_up` applies the sharing (`SharingManager.prepare`) and
  writes the CDI spec after it, and a failure is rolled back as an unprepare of what was recorded,
  except an MPS daemon that is only slow to become Ready: it stays with the PrepareStarted entry
  that records it, and kubelet's retry finds it;
* unprepare: `_unprepare_claim` cleans the claim with `_clean_claim` (the one clean-up of an entry,
  also for a claim that is gone): undoes the sharing (`SharingManager.unprepare`, a kept MPS daemon
  included), removes the spec and the entry;
* restore: `_restore` at start, under the same lock, removes the temp files of interrupted atomic
  writes of this driver and recovers claims whose CDI spec has no checkpoint entry; when the node's
  boot id is not the one kept with the checkpoint, `_restore_after_reboot` gives every completed
  claim back what the reboot reset before the plugin registers with kubelet, and a claim that
  cannot be restored becomes PrepareStarted, so its next prepare prepares it again and answers
  with what still fails; `_restore_claim` rewrites the vanished spec of a prepared claim (also on a
  repeated prepare) and, after a reboot, applies its sharing again
  (`SharingManager.reapply_after_reboot`).

Dynamic MIG (`partitions/`) is one step in each phase: `_admit` records the claim's MIG placements in
its PrepareStarted entry, `_create_partitions` first in `_set_up` creates their MIG devices (the CDI spec
names the created devices), `_destroy_partitions` in `_clean_claim` destroys them, `_clean_up_partitions`
in `_restore` destroys what no entry owns, and `_restore_partitions` re-creates them after a reboot.

Claims NVIDIA's plugin prepared on this node (`takeover/`) join through three small hooks, one per
phase: `_adopt_nvidia_claims` in `_restore` before the checkpoint is read, `_admit_adopted` in
`_admit` (a claim NVIDIA completed answers under this plugin's CDI ids, no sharing of its own) and
`_release_adopted` first in `_unprepare_claim` (NVIDIA's leftovers undone).

Ghosts and held devices (see `ghosts` and `reconcile`): `clean_ghost` removes the entry of a claim
the API server no longer has for this node as an unprepare: an unprepare operation through the same
batches and `_unprepare_claim` itself (so `_release_adopted`, then `_clean_claim`, and never
alongside a prepare or unprepare of that claim), done only while the entry is still the one judged
and no prepare of the claim answered since it was judged.
A prepare whose devices another claim's entry holds raises `DevicesHeld` from `_admit`; `prepare`
then has `holder_check` (the reconciler) check those claims at once, outside the lock, and tries again.

Every step of a batch runs under `_answering`, the one place where what a step raises becomes the
answer of the calls it was for (a ClaimError as it is, anything else an error naming the claim), so
a bug met by one claim fails that claim only; the caller gets that answer as an exception.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, Device, PreparedDevice
from vke_gpu_dra_core.featuregates import FeatureGates

from . import cdi
from .allocation import allocated_devices
from .checkpoint import BOOT_ID_FILE, CHECKPOINT_FILE, CheckpointStore, ClaimEntry, ClaimState
from .fsutil import remove_temp_leftovers
from .ghosts import DevicesHeld, Holder, admin_access_devices, adopted_entry, find_holders, no_overlap
from .nodelock import LOCK_FILE, LockTimeout, NodeLock
from .partitions.errors import PartitionError
from .partitions.records import MigRecord
from .sharing.manager import MpsDaemonPending
from .sharing.plan import Plan, devices_in_use, plan_claim
from .takeover import AdoptionError, CleanupError, NvidiaClaimState

if TYPE_CHECKING:
    from .allocation import AllocatedDevice
    from .partitions.manager import PartitionManager
    from .sharing.manager import SharingManager
    from .takeover import Takeover
    from .userspace import DriverEdits

log = logging.getLogger(__name__)

#: How long a call without a deadline (start-up, inspection, tests) waits for the node lock:
#: kubelet's own call timeout.
DEFAULT_LOCK_WAIT_SECONDS: Final = 45.0


#: Time allowed to undo a failed prepare's sharing changes (kubelet's deadline may be spent by then).
ROLLBACK_SECONDS: Final = 10.0

#: Threads writing the CDI specs of one batch in parallel (and restoring claims after a reboot).
SPEC_WRITERS: Final = 8

#: How long the start after a reboot waits for the claims' MPS daemons to be Ready again (the old
#: pod's end, then the new one's start; the image is the plugin's own, already on the node).
RESTORE_SECONDS: Final = 60.0


@dataclass(frozen=True)
class RebootRestore:
    """What the start after a reboot gave back (`DeviceState.reboot`)."""

    previous_boot_id: str
    boot_id: str
    #: UIDs of the completed claims that got everything back.
    restored: tuple[str, ...] = ()
    #: UID -> why a claim could not be restored; it is PrepareStarted now, prepared again by its next prepare.
    failed: Mapping[str, str] = field(default_factory=dict)


#: How often one prepare checks the claims holding its devices and tries again.
HOLDER_CHECKS: Final = 3


class HolderCheck(Protocol):
    """Checks the claims whose entries hold a new claim's devices, by `deadline` (time.monotonic()):
    cleans the ghosts, raises ClaimError naming both claims for a live holder, and returns the UIDs of
    live holders whose overlap is allowed (admin access)."""

    def __call__(self, ref: ClaimRef, holders: Sequence[Holder], deadline: float) -> frozenset[str]: ...


@dataclass(eq=False)
class _Op:
    """One prepare or unprepare waiting for (or done by) a batch under the node lock."""

    kind: Literal["prepare", "unprepare"]
    ref: ClaimRef
    claim: Mapping[str, Any] | None
    deadline: float
    done: threading.Event = field(default_factory=threading.Event)
    answered: bool = False  # its result (or error) is final
    result: list[PreparedDevice] | None = None
    error: BaseException | None = None
    changed: bool = False  # its checkpoint entry was added (prepare) or removed (unprepare)
    devices: list[Device] = field(default_factory=list)  # a prepare's devices, once checked
    prepared: list[PreparedDevice] = field(default_factory=list)  # its answer, once its spec is written
    plan: Plan | None = None  # a prepare's GPU sharing, once checked
    rolled_back: bool = False  # a failed prepare whose changes were undone: its entry goes
    adopted_edits: dict[str, dict[str, Any]] = field(default_factory=dict)  # takeover: NVIDIA's MPS edits
    partitions: tuple[MigRecord, ...] = ()  # dynamic MIG: the claim's placements, then its created devices
    expect: ClaimEntry | None = None  # a ghost cleanup: done only while the entry is still this one
    judged_at: float = 0.0  # ... and no prepare of the claim answered since (time.monotonic())
    tolerated: frozenset[str] = frozenset()  # a prepare's holders checked live whose overlap is allowed
    adopted: bool = False  # a ghost cleanup of a claim adopted from NVIDIA, known only to the ledger
    released: bool = False  # ... whose NVIDIA leftovers it released

    @property
    def label(self) -> str:
        return f"{self.ref.namespace}/{self.ref.name}"

    def answer(self, result: list[PreparedDevice] | None) -> None:
        self.result, self.answered = result, True

    def fail(self, error: BaseException) -> bool:
        """Make `error` the answer; False when the operation was answered already."""
        if self.answered:
            return False
        self.error, self.answered = error, True
        return True


def _open(ops: Sequence[_Op]) -> list[_Op]:
    return [op for op in ops if not op.answered]


class StateLockTimeout(Exception):
    """The node lock stayed held by another call or process (start-up and inspection only)."""


class DeviceState:
    """Devices of this node and the claims prepared on them."""

    def __init__(
        self,
        *,
        driver_name: str,
        pool_name: str,
        devices: Sequence[Device],
        cdi_root: Path,
        plugin_data_dir: Path,
        dev_root: Path = Path("/"),
        lock_wait: float = DEFAULT_LOCK_WAIT_SECONDS,
        driver_edits: DriverEdits | None = None,
        gates: FeatureGates | None = None,
        sharing_manager: SharingManager | None = None,
        takeover: Takeover | None = None,
        boot_id: str | None = None,
        restore_wait: float = RESTORE_SECONDS,
        partitions: PartitionManager | None = None,
    ) -> None:
        """`boot_id`: the node's current boot id (`checkpoint.read_boot_id`); None (tests, inspection)
        leaves reboots undetected. `restore_wait`: how long a restore after a reboot waits for MPS
        daemons."""
        names = [d.name for d in devices]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"device names must be unique, duplicated: {', '.join(duplicates)}")
        self._driver_name = driver_name
        self._pool_name = pool_name
        self._devices = tuple(devices)
        self._by_name = {d.name: d for d in devices}
        self._cdi_root = cdi_root
        self._plugin_data_dir = plugin_data_dir
        self._dev_root = dev_root
        self._lock_wait = lock_wait
        plugin_data_dir.mkdir(parents=True, exist_ok=True)
        self._driver_edits = driver_edits
        self._gates = gates or FeatureGates()
        self._sharing = sharing_manager
        self._takeover = takeover
        self._boot_id = boot_id
        self._restore_wait = restore_wait
        self._partitions = partitions
        self._store = CheckpointStore(plugin_data_dir)
        self._lock = NodeLock(plugin_data_dir / LOCK_FILE)
        self._queue: list[_Op] = []
        self._queue_guard = threading.Lock()
        self._spec_writers: ThreadPoolExecutor | None = None
        #: Checks the holders of a prepare's devices against the API server (the reconciler); None:
        #: a held device fails the prepare.
        self.holder_check: HolderCheck | None = None
        #: When a prepare of each claim last answered in this process (a ghost judged before is kept).
        self._answered_at: dict[str, float] = {}
        #: The one-line problem found while loading the checkpoint at start (None when it was fine).
        self.load_problem: str | None = None
        #: Temp files of interrupted writes removed at start.
        self.removed_leftovers: list[Path] = []
        #: What the start gave back after a reboot; None when the boot id was the one kept (or unknown).
        self.reboot: RebootRestore | None = None
        with self._locked_or_fail("start"):
            self._restore()

    # ------------------------------------------------------------------------------------ public API

    @property
    def devices(self) -> Sequence[Device]:
        return self._devices

    def prepare(
        self, ref: ClaimRef, claim: Mapping[str, Any], *, deadline: float | None = None
    ) -> list[PreparedDevice]:
        """Prepare `claim` (API JSON fetched just now); idempotent; raises ClaimError.

        `deadline` (a `time.monotonic()` value) bounds the wait for the node lock and the check of
        the claims holding its devices (`holder_check`).
        """
        at = self._deadline(deadline)
        tolerated: frozenset[str] = frozenset()
        for attempt in range(HOLDER_CHECKS + 1):
            try:
                op = self._submit(_Op("prepare", ref, claim, at, tolerated=tolerated))
            except DevicesHeld as held:
                if self.holder_check is None or attempt == HOLDER_CHECKS:
                    raise
                tolerated |= self.holder_check(ref, held.holders, at)
                continue
            assert op.result is not None
            return op.result
        raise AssertionError("unreachable")  # pragma: no cover

    def clean_ghost(
        self,
        entry: ClaimEntry,
        *,
        judged_at: float | None = None,
        deadline: float | None = None,
        adopted: bool = False,
    ) -> bool:
        """Clean a ghost's entry exactly as an unprepare would, through `_unprepare_claim` (NVIDIA's
        leftovers of an adopted claim and the sharing undone, CDI spec and entry removed), only if the
        checkpoint still holds `entry` as it was judged and no prepare of the claim answered since
        `judged_at` (time.monotonic() of the read that judged it; None: now); True when it did.
        `adopted`: `entry` is an adopted claim known only to the takeover's ledger (`adopted_entries`):
        released only while it still is (not released, no checkpoint entry of ours).
        Raises ClaimError when the undo fails (the entry stays, as for an unprepare)."""
        ref = ClaimRef(namespace=entry.namespace, name=entry.name, uid=entry.uid)
        at = time.monotonic() if judged_at is None else judged_at
        op = self._submit(
            _Op("unprepare", ref, None, self._deadline(deadline), expect=entry, judged_at=at, adopted=adopted)
        )
        return op.changed or op.released

    def adopted_entries(self) -> dict[str, ClaimEntry]:
        """Claims adopted from NVIDIA's plugin, not released, that kubelet has not prepared here again
        (no checkpoint entry of ours), as entries (`ghosts.adopted_entry`), read under the node lock."""
        with self._locked_or_fail("reading the takeover ledger"):
            return self._adopted_only(self._read())

    def name_adopted(self, uid: str, namespace: str, name: str) -> None:
        """Record the namespace/name reconciliation found for adopted claim `uid` (NVIDIA 25.8.1 records
        none; `reconcile` finds it through the pods of this node), as kubelet's prepare would."""
        if self._takeover is None:
            return
        with self._locked_or_fail("naming a claim adopted from NVIDIA's plugin"):
            self._takeover.name(uid, namespace, name)

    def unprepare(self, ref: ClaimRef, *, deadline: float | None = None) -> None:
        """Remove the claim's CDI spec and checkpoint entry (either state); an unknown claim is a success."""
        self._submit(_Op("unprepare", ref, None, self._deadline(deadline)))

    def prepared(self) -> dict[str, list[PreparedDevice]]:
        """Claim UID -> prepared devices, for claims whose preparation completed (read from disk)."""
        return {
            uid: list(e.devices)
            for uid, e in self.entries().items()
            if e.state is ClaimState.PREPARE_COMPLETED
        }

    def entries(self) -> dict[str, ClaimEntry]:
        """All checkpoint entries (including PrepareStarted), read from disk under the node lock."""
        with self._locked_or_fail("reading the checkpoint"):
            return self._read()

    # ------------------------------------------------------------------------------------- internals

    def _deadline(self, deadline: float | None) -> float:
        return time.monotonic() + self._lock_wait if deadline is None else deadline

    def _submit(self, op: _Op) -> _Op:
        """Queue `op` and wait until a batch under the node lock has done it; raises its error.

        The thread that gets the lock (the leader) takes every queued operation on distinct claims
        into one batch, so calls that arrive together share the checkpoint writes.
        """
        with self._queue_guard:
            self._queue.append(op)
        while not op.done.is_set():
            if not self._lock.acquire_thread(op.deadline):
                self._give_up(op)
                break
            try:
                if op.done.is_set():
                    break  # an earlier leader did it
                try:
                    with self._lock.file_held(op.deadline):
                        self._run_batch(self._take_batch())
                except LockTimeout:
                    self._give_up(op)
                    break
            finally:
                self._lock.release_thread()
        if op.error is not None:
            raise op.error
        return op

    def _give_up(self, op: _Op) -> None:
        """The deadline passed before `op` ran: drop it, unless a leader took it already (then wait)."""
        with self._queue_guard:
            waiting = op in self._queue
            if waiting:
                self._queue.remove(op)
        if not waiting:
            op.done.wait()
            return
        op.fail(
            ClaimError(
                f"claim {op.label}: timed out waiting for the node's prepare/unprepare lock "
                f"{self._lock.path}: another call (in this or another plugin process on the node) held "
                "it until the call's deadline"
            )
        )
        op.done.set()

    def _take_batch(self) -> list[_Op]:
        with self._queue_guard:
            batch: list[_Op] = []
            uids: set[str] = set()
            for op in self._queue:
                if op.ref.uid not in uids:  # the same claim twice: one after the other, in two batches
                    batch.append(op)
                    uids.add(op.ref.uid)
            for op in batch:
                self._queue.remove(op)
        return batch

    def _run_batch(self, batch: list[_Op]) -> None:
        """Do `batch` (caller holds the node lock): the checkpoint is read once, each claim goes
        through its steps, and the checkpoint is written once between steps for all of them."""
        try:
            entries: dict[str, ClaimEntry] = {}
            with self._answering(batch):
                entries.update(self._read())
            # 1. each claim on its own: a completed one answers, a new one is checked, an unprepare undone
            for op in _open(batch):
                with self._answering([op]):
                    if op.kind == "prepare":
                        self._admit(op, entries)
                    else:
                        self._unprepare_claim(op, entries)
            # 2. PrepareStarted entries (and removals) before anything is changed on the node
            self._save(entries, [op for op in _open(batch) if op.changed])
            for op in _open(batch):
                if op.kind == "unprepare":
                    op.answer(None)
            # 3. GPU sharing settings and the CDI specs, in parallel
            started = _open(batch)
            self._set_up_all(started, entries)
            # 4. PrepareCompleted entries of the claims set up; the entries of those rolled back go
            rolled_back = [op for op in started if op.rolled_back]
            for op in rolled_back:
                entries.pop(op.ref.uid, None)
            written = _open(started)
            for op in written:
                assert op.plan is not None
                entries[op.ref.uid] = ClaimEntry(
                    op.ref.uid,
                    op.ref.namespace,
                    op.ref.name,
                    ClaimState.PREPARE_COMPLETED,
                    tuple(op.prepared),
                    op.plan.record,
                    op.partitions,
                )
            self._save(entries, [*written, *rolled_back])
            for op in _open(written):
                op.answer(op.prepared)
                self._answered_at[op.ref.uid] = time.monotonic()
        finally:
            for op in batch:
                if not op.answered:  # the batch stopped early: no caller waits for an answer that never comes
                    op.fail(RuntimeError(f"{op.kind} of claim {op.label} was not answered"))
                op.done.set()

    @contextlib.contextmanager
    def _answering(self, ops: Sequence[_Op]) -> Iterator[None]:
        """Run a step for `ops`; what it raises becomes the answer of those not answered yet: a
        ClaimError as it is, anything else (a bug) an error naming the claim. The one catch-all of a
        prepare or unprepare: nothing a step raises leaves the batch, so the other claims go on."""
        try:
            yield
        except ClaimError as exc:
            for op in ops:
                op.fail(exc)
        except Exception as exc:
            taken = False
            for op in ops:
                error = RuntimeError(f"{op.kind} of claim {op.label} failed: {exc!r}")
                error.__cause__ = exc
                taken = op.fail(error) or taken
            if not taken:  # its claims were answered already: nobody else would report it
                log.exception("prepare/unprepare step failed after its claims were answered")

    def _save(self, entries: Mapping[str, ClaimEntry], ops: Sequence[_Op]) -> None:
        """Write the checkpoint for `ops` (none: nothing to write); a disk failure fails each of them."""
        if not ops:
            return
        with self._answering(ops):
            try:
                self._store.save(entries)
            except OSError as exc:
                why = f"cannot write checkpoint {self._store.path}: {exc}"
                failed = [op.fail(ClaimError(f"claim {op.label}: {why}")) for op in ops]
                if not any(failed):  # only rolled back claims: their entries stay for unprepare to remove
                    log.warning("%s", why)

    # ---------------------------------------------------------------------------------- the phases

    def _admit(self, op: _Op, entries: dict[str, ClaimEntry]) -> None:
        """Prepare, first step: a completed claim answers from the checkpoint; a new one is checked,
        its GPU sharing planned against the other claims, and its PrepareStarted entry added."""
        ref = op.ref
        entry = entries.get(ref.uid)
        if entry is not None and entry.state is ClaimState.PREPARE_COMPLETED:
            self._restore_claim(ref, entry)
            op.answer(list(entry.devices))
            self._answered_at[ref.uid] = time.monotonic()
            return
        if self._admit_adopted(op, entries):  # takeover: a claim NVIDIA's plugin completed
            return
        assert op.claim is not None
        allocated = allocated_devices(
            ref,
            op.claim,
            driver_name=self._driver_name,
            pool_name=self._pool_name,
            devices=self._by_name,
            gates=self._gates,
        )
        self._refuse_held(op, allocated, entries)
        op.plan = plan_claim(ref, allocated, self._others(entries, ref.uid))
        if op.plan:
            self._manager(ref)  # a node without sharing refuses it before anything is written
        op.devices = list({a.device.name: a.device for a in allocated}.values())
        op.partitions = self._plan_partitions(op)
        op.prepared = [
            PreparedDevice(
                request_names=(a.request_name,),
                pool_name=self._pool_name,
                device_name=a.device.name,
                cdi_device_ids=(cdi.claim_device_id(ref.uid, a.device.name, a.share_id),),
                share_id=a.share_id,
            )
            for a in allocated
        ]
        entries[ref.uid] = ClaimEntry(
            ref.uid,
            ref.namespace,
            ref.name,
            ClaimState.PREPARE_STARTED,
            sharing=op.plan.record,
            partitions=op.partitions,
        )
        op.changed = True

    def _refuse_held(
        self, op: _Op, allocated: Sequence[AllocatedDevice], entries: Mapping[str, ClaimEntry]
    ) -> None:
        """Raise DevicesHeld when other claims' entries hold devices of `allocated` and the overlap is
        not allowed (see `ghosts.find_holders`)."""
        assert op.claim is not None
        admin = admin_access_devices(op.claim, driver_name=self._driver_name, pool_name=self._pool_name)
        adopted = self._adopted_only(entries)  # takeover: NVIDIA's claims hold their devices too
        adopted.pop(op.ref.uid, None)
        holders = find_holders(
            op.ref,
            allocated,
            [*self._others(entries, op.ref.uid), *adopted.values()],
            admin=admin,
            tolerated=op.tolerated,
            adopted=set(adopted),
            overlapping=self._partitions.overlapping if self._partitions is not None else no_overlap,
        )
        if holders:
            raise DevicesHeld(op.ref, holders)

    def _set_up_all(self, ops: Sequence[_Op], entries: Mapping[str, ClaimEntry]) -> None:
        def set_up(op: _Op) -> None:
            with self._answering([op]):
                self._set_up(op, entries)

        if len(ops) <= 1:
            for op in ops:
                set_up(op)
            return
        if self._spec_writers is None:
            self._spec_writers = ThreadPoolExecutor(max_workers=SPEC_WRITERS, thread_name_prefix="cdi-write")
            weakref.finalize(self, self._spec_writers.shutdown, wait=False)
        list(self._spec_writers.map(set_up, ops))

    def _set_up(self, op: _Op, entries: Mapping[str, ClaimEntry]) -> None:
        """Prepare, second step (its PrepareStarted entry is on disk): the GPU sharing, then the CDI
        spec. On failure a claim with sharing is rolled back (its entry goes) when the undo works;
        otherwise its PrepareStarted entry stays for unprepare to clean. An MPS daemon that exists but
        is not Ready yet (`MpsDaemonPending`: its image may take longer than a call to pull) is not
        rolled back: it stays with the entry that records it, and kubelet's retry waits for it again."""
        plan = op.plan
        assert plan is not None
        self._create_partitions(op)
        try:
            edits = self._manager(op.ref).prepare(op.ref, plan, op.deadline) if plan else {}
            self._write_spec(op.ref, op.devices, {**edits, **op.adopted_edits}, op.prepared)
        except MpsDaemonPending:
            log.info(
                "MPS control daemon not ready yet: it stays for kubelet's retry",
                extra={"fields": {"claim": op.label, "uid": op.ref.uid}},
            )
            raise
        except ClaimError:
            if plan:
                op.rolled_back = self._roll_back(op.ref, plan, entries)
            raise

    def _roll_back(self, ref: ClaimRef, plan: Plan, entries: Mapping[str, ClaimEntry]) -> bool:
        """After a failed prepare: undo its sharing, remove its spec; False (entry kept) on failure."""
        try:
            self._manager(ref).unprepare(
                ref,
                plan.record,
                devices=self._by_name,
                others=self._others(entries, ref.uid),
                deadline=time.monotonic() + ROLLBACK_SECONDS,
            )
            cdi.delete_claim_spec(self._cdi_root, ref.uid)
        except (ClaimError, OSError) as exc:
            log.warning("claim %s: rollback incomplete (%s); unprepare will retry", ref, exc)
            return False
        return True

    def _unprepare_claim(self, op: _Op, entries: dict[str, ClaimEntry]) -> None:
        """Unprepare (and a ghost cleanup, `clean_ghost`): NVIDIA's leftovers of an adopted claim
        first (takeover), then clean the claim (`_clean_claim`). A failed undo keeps the entry, so
        kubelet's retry (or the next reconcile round) undoes it again. A ghost cleanup does nothing
        when the entry changed (or went, or its claim was prepared) since the read that judged it."""
        if op.expect is not None and (
            self._answered_at.get(op.ref.uid, -1.0) >= op.judged_at
            or (
                self._adopted_only(entries).get(op.ref.uid) != op.expect
                if op.adopted
                else entries.get(op.ref.uid) != op.expect
            )
        ):
            return
        self._answered_at.pop(op.ref.uid, None)
        op.released = op.adopted  # an adopted ghost: released below, or an error
        self._release_adopted(op, entries)  # takeover: NVIDIA's leftovers first
        op.changed = self._clean_claim(op.ref, entries, op.deadline) or op.changed

    def _clean_claim(self, ref: ClaimRef, entries: dict[str, ClaimEntry], deadline: float) -> bool:
        """Undo everything the claim's entry records, in either state: its GPU sharing (an MPS daemon
        kept across failed prepares included), its CDI spec, then its entry; True when an entry was
        removed. The caller holds the node lock and writes `entries` afterwards. Raises ClaimError
        (the entry stays). `_unprepare_claim` calls it, for kubelet's unprepare and for the cleanup
        of a ghost (`clean_ghost`) alike."""
        entry = entries.get(ref.uid)
        if entry is not None and entry.sharing:
            self._manager(ref).unprepare(
                ref,
                entry.sharing,
                devices=self._by_name,
                others=self._others(entries, ref.uid),
                deadline=deadline,
            )
        if entry is not None and entry.partitions:
            self._destroy_partitions(ref, entry.partitions)
        try:
            cdi.delete_claim_spec(self._cdi_root, ref.uid)
        except OSError as exc:
            raise ClaimError(f"claim {ref.namespace}/{ref.name}: cannot delete its CDI spec: {exc}") from None
        return entries.pop(ref.uid, None) is not None

    def _restore(self) -> None:
        """Start-up (caller holds the node lock): remove the temp files of interrupted writes, adopt
        NVIDIA's claims, read the checkpoint and recover the claims whose CDI spec has no entry (not
        NVIDIA's claim specs of adopted claims: their name is the one this driver uses), destroy the MIG
        devices no entry owns (`_clean_up_partitions`); then give the completed claims back what a
        reboot reset (`_restore_if_rebooted`)."""
        self.removed_leftovers = self._remove_leftovers()
        self._adopt_nvidia_claims()
        entries = self._read(recover_orphans=True, at_start=True)
        self._clean_up_partitions(entries)
        self._restore_if_rebooted(entries)

    def _restore_if_rebooted(self, entries: dict[str, ClaimEntry]) -> None:
        """When the node's boot id is not the one kept with the checkpoint, restore the completed claims
        (`_restore_after_reboot`) and keep the new boot id. No boot id kept (a checkpoint of an earlier
        release, a new node): the claims are taken as prepared in this boot, as NVIDIA's plugin takes
        them."""
        if self._boot_id is None:
            return
        kept = self._store.load_boot_id()
        if kept == self._boot_id:
            return
        if kept is not None:
            self._restore_after_reboot(entries, kept, self._boot_id)
        elif entries:
            log.info(
                "no boot id kept with the checkpoint (an earlier release wrote it): its claims are taken "
                "as prepared in this boot",
                extra={"fields": {"boot_id": self._boot_id}},
            )
        self._store.save_boot_id(self._boot_id)  # after the restore: a crash before it restores again

    def _restore_after_reboot(self, entries: dict[str, ClaimEntry], previous: str, boot_id: str) -> None:
        """The node rebooted since the checkpoint's boot: every completed claim gets back what the
        reboot reset (`_restore_claim`), claims in parallel, MPS daemons within `restore_wait`. One that
        cannot be restored is logged and becomes PrepareStarted (devices and sharing record kept, so
        unprepare still undoes it): its next prepare prepares it again and answers with what still
        fails; the others are unaffected."""
        completed = [e for e in entries.values() if e.state is ClaimState.PREPARE_COMPLETED]
        deadline = time.monotonic() + self._restore_wait

        def restore(entry: ClaimEntry) -> str | None:
            ref = ClaimRef(entry.namespace, entry.name, entry.uid)
            try:
                restored = self._restore_claim(ref, entry, deadline=deadline)
                if restored != entry:  # re-created MIG devices have new ids
                    entries[entry.uid] = restored
            except ClaimError as exc:
                return str(exc)
            except Exception as exc:  # a bug met by one claim leaves the others restored
                log.exception("restoring claim %s/%s failed", entry.namespace, entry.name)
                return f"claim {entry.namespace}/{entry.name}: restore failed: {exc!r}"
            return None

        if len(completed) > 1:
            with ThreadPoolExecutor(max_workers=SPEC_WRITERS, thread_name_prefix="restore") as pool:
                reasons = list(pool.map(restore, completed))
        else:
            reasons = [restore(e) for e in completed]
        failed: dict[str, str] = {}
        for entry, reason in zip(completed, reasons, strict=True):
            if reason is None:
                continue
            failed[entry.uid] = reason
            entries[entry.uid] = replace(entry, state=ClaimState.PREPARE_STARTED)
            log.error(
                "claim not restored after the node rebooted; its next prepare prepares it again",
                extra={
                    "fields": {"claim": f"{entry.namespace}/{entry.name}", "uid": entry.uid, "reason": reason}
                },
            )
        if failed or any(entries[e.uid] != e for e in completed):
            self._store.save(entries)
        restored = tuple(e.uid for e, reason in zip(completed, reasons, strict=True) if reason is None)
        self.reboot = RebootRestore(previous, boot_id, restored, failed)
        log.warning(
            "node rebooted since the checkpoint was written: prepared claims restored",
            extra={
                "fields": {
                    "previous_boot_id": previous,
                    "boot_id": boot_id,
                    "restored": len(restored),
                    "failed": len(failed),
                }
            },
        )

    def _restore_claim(
        self, ref: ClaimRef, entry: ClaimEntry, *, deadline: float | None = None
    ) -> ClaimEntry:
        """Give a completed claim back what it lost: its CDI spec if it vanished (a reboot empties
        /var/run/cdi; also checked on a repeated prepare) and, after a reboot (at start, `deadline`
        given), its devices (`_restore_partitions`) and its GPU sharing settings, before the spec.
        Returns the entry, with the new ids of MIG devices created again."""
        rebooted = deadline is not None
        spec_missing = not cdi.claim_spec_path(self._cdi_root, ref.uid).exists()
        if not (rebooted or spec_missing):
            return entry
        names = list(dict.fromkeys(d.device_name for d in entry.devices))
        missing = [n for n in names if n not in self._by_name]
        if missing:
            raise ClaimError(
                f"claim {ref.namespace}/{ref.name} was prepared with device(s) {', '.join(missing)}, "
                "which this node no longer publishes"
            )
        if deadline is not None:
            recreated = self._restore_partitions(ref, entry)
            spec_missing = spec_missing or recreated != entry.partitions  # new MIG UUIDs: a new spec
            entry = replace(entry, partitions=recreated)
            if entry.sharing:
                self._manager(ref).reapply_after_reboot(
                    ref, entry.sharing, devices=self._by_name, deadline=deadline
                )
        if spec_missing:
            log.warning("CDI spec of prepared claim %s was missing; writing it again", ref)
            edits = self._manager(ref).restore(entry.sharing) if entry.sharing else {}
            self._write_spec(ref, self._claim_devices(ref, names, entry.partitions), edits, entry.devices)
        return entry

    def _restore_partitions(self, ref: ClaimRef, entry: ClaimEntry) -> tuple[MigRecord, ...]:
        """After a reboot, before the claim's sharing and spec: the devices a reboot removes. Static
        MIG devices are made before the plugin starts (discovered and published as they are); the
        claim's dynamic MIG devices are created again here, at their recorded placements (a failure
        fails this claim's restore only). Returns the records with the new ids."""
        if not entry.partitions:
            return entry.partitions
        manager = self._partition_manager(ref)
        try:
            return tuple(
                manager.create(replace(r, gi_id=None, ci_id=None, uuid=None)) for r in entry.partitions
            )
        except PartitionError as exc:
            raise ClaimError(f"claim {ref.namespace}/{ref.name}: {exc}") from None

    # --------------------------------------------- dynamic MIG (the partitions package does the work)

    def _partition_manager(self, ref: ClaimRef) -> PartitionManager:
        if self._partitions is None:
            raise ClaimError(
                f"claim {ref.namespace}/{ref.name}: dynamic MIG is not enabled on this node (feature gate "
                "DynamicMIG)"
            )
        return self._partitions

    def _plan_partitions(self, op: _Op) -> tuple[MigRecord, ...]:
        """Admit: the MIG placements among the claim's devices, recorded before anything is created."""
        if self._partitions is None:
            return ()
        manager = self._partitions
        return tuple(manager.record(d.name) for d in op.devices if manager.is_placement(d.name))

    def _create_partitions(self, op: _Op) -> None:
        """Set up, first (the placements are on disk): create the claim's MIG devices; the CDI spec
        names the created ones. A failure destroys those created here and fails the claim."""
        if not op.partitions:
            return
        manager = self._partition_manager(op.ref)
        created: list[MigRecord] = []
        try:
            for record in op.partitions:
                created.append(manager.create(record))
        except PartitionError as exc:
            with contextlib.suppress(PartitionError):
                self._destroy_partitions(op.ref, tuple(created))
            raise ClaimError(f"claim {op.label}: {exc}") from None
        op.partitions = tuple(created)
        names = [d.name for d in op.devices]
        op.devices = self._claim_devices(op.ref, names, op.partitions)

    def _destroy_partitions(self, ref: ClaimRef, records: Sequence[MigRecord]) -> None:
        """Unprepare: destroy the claim's MIG devices (gone already is fine); raises ClaimError."""
        manager = self._partition_manager(ref)
        try:
            for record in records:
                manager.destroy(record)
        except PartitionError as exc:
            raise ClaimError(f"claim {ref.namespace}/{ref.name}: {exc}") from None

    def _clean_up_partitions(self, entries: Mapping[str, ClaimEntry]) -> None:
        """Start: destroy the MIG devices no checkpoint entry owns and GPU instances without compute
        instances (what a crash in a create or destroy leaves)."""
        if self._partitions is not None:
            self._partitions.clean_up(r for e in entries.values() for r in e.partitions)

    def _claim_devices(
        self, ref: ClaimRef, names: Sequence[str], records: Sequence[MigRecord]
    ) -> list[Device]:
        """The claim's devices for its CDI spec: a placement as the MIG device created for it."""
        created = {r.device: r for r in records}
        devices = []
        for name in names:
            device = self._by_name[name]
            if name in created:
                try:
                    device = self._partition_manager(ref).device(created[name], device)
                except PartitionError as exc:
                    raise ClaimError(f"claim {ref.namespace}/{ref.name}: {exc}") from None
            devices.append(device)
        return devices

    def _manager(self, ref: ClaimRef) -> SharingManager:
        if self._sharing is None:
            raise ClaimError(f"claim {ref.namespace}/{ref.name}: GPU sharing is not available on this node")
        return self._sharing

    # ------------------------------------------- takeover hooks (the takeover package does the work)

    def _adopt_nvidia_claims(self) -> None:
        """Restore, first: the claims of NVIDIA's checkpoint join the takeover's ledger."""
        if self._takeover is not None:
            self._takeover.start()

    def _admit_adopted(self, op: _Op, entries: dict[str, ClaimEntry]) -> bool:
        """Prepare of a claim NVIDIA's plugin completed: its devices under this plugin's CDI ids, with
        NVIDIA's time-slice and MPS daemon left in force (True, its PrepareStarted entry added). One
        NVIDIA only started: its leftovers are released and it is admitted anew (False)."""
        if self._takeover is None:
            return False
        claim = self._takeover.adopted(op.ref.uid)
        if claim is None:
            return False
        self._takeover.name(op.ref.uid, op.ref.namespace, op.ref.name)  # reconciliation can read it now
        if claim.state is not NvidiaClaimState.PREPARE_COMPLETED:
            self._release_adopted(op, entries)
            return False
        try:
            answer = self._takeover.answer(claim, pool_name=self._pool_name, devices=self._by_name)
        except AdoptionError as exc:
            raise ClaimError(f"claim {op.label}: {exc}") from None
        op.plan = Plan(op.ref.uid)  # no sharing of this plugin's own
        op.devices, op.prepared, op.adopted_edits = answer.devices, answer.prepared, answer.extra_edits
        entries[op.ref.uid] = ClaimEntry(
            op.ref.uid, op.ref.namespace, op.ref.name, ClaimState.PREPARE_STARTED
        )
        op.changed = True
        return True

    def _release_adopted(self, op: _Op, entries: Mapping[str, ClaimEntry]) -> None:
        """Undo what NVIDIA's plugin left for an adopted claim (nothing for any other claim); GPUs the
        node's other claims hold keep their settings."""
        if self._takeover is None:
            return
        try:
            self._takeover.release(
                op.ref.uid,
                devices=self._by_name,
                in_use=devices_in_use(self._others(entries, op.ref.uid)),
                deadline=op.deadline,
            )
        except CleanupError as exc:
            raise ClaimError(f"claim {op.label}: {exc}") from None

    def _adopted_only(self, entries: Mapping[str, ClaimEntry]) -> dict[str, ClaimEntry]:
        """Adopted claims not released that have no entry in `entries`, as entries (caller holds the
        node lock); an adopted claim kubelet prepared again is its checkpoint entry instead."""
        if self._takeover is None:
            return {}
        return {
            uid: adopted_entry(claim, driver_name=self._driver_name, pool_name=self._pool_name)
            for uid, claim in self._takeover.unreleased().items()
            if uid not in entries
        }

    @staticmethod
    def _others(entries: Mapping[str, ClaimEntry], uid: str) -> list[ClaimEntry]:
        """The entries of the node's other claims."""
        return [e for other, e in entries.items() if other != uid]

    # ------------------------------------------------------------------------------ disk and lock

    @contextlib.contextmanager
    def _locked_or_fail(self, what: str) -> Iterator[None]:
        try:
            with self._lock.held(time.monotonic() + self._lock_wait):
                yield
        except LockTimeout as exc:
            raise StateLockTimeout(
                f"{what}: {self._lock.path} stayed locked for {self._lock_wait:g} s "
                "(another plugin process on this node holds it)"
            ) from exc

    def _remove_leftovers(self) -> list[Path]:
        """Temp files of our interrupted atomic writes: the checkpoint's, the boot id's, the claim specs'."""
        removed = remove_temp_leftovers(
            self._plugin_data_dir, lambda name: name in (CHECKPOINT_FILE, BOOT_ID_FILE)
        )
        removed += remove_temp_leftovers(self._cdi_root, cdi.is_claim_spec_name)
        if removed:
            log.warning(
                "removed temp files of interrupted writes",
                extra={"fields": {"files": [str(p) for p in removed]}},
            )
        return removed

    def _read(self, *, recover_orphans: bool = False, at_start: bool = False) -> dict[str, ClaimEntry]:
        """The checkpoint's entries (caller holds the node lock).

        A corrupt checkpoint is moved aside and the claims are recovered from the CDI specs on
        disk; `recover_orphans` (at start) also recovers specs without an entry next to a valid one.
        """
        result = self._store.load()
        entries = dict(result.entries)
        if result.problem is not None:
            if at_start:
                self.load_problem = result.problem
            log.error("%s", result.problem)
        recovered = []
        if recover_orphans or result.problem is not None:
            adopted = set(self._takeover.unreleased()) if self._takeover is not None else set()
            for uid, path in cdi.list_claim_specs(self._cdi_root).items():
                if uid in entries or uid in adopted:  # an adopted claim's spec is NVIDIA's, released with it
                    continue
                try:
                    cdi.load_spec(path)
                except (OSError, cdi.CdiSpecError) as exc:
                    log.warning("%s is not a valid CDI spec (%s); unprepare will still remove it", path, exc)
                # Request names are not in the spec: the claim is marked started, so a repeated prepare
                # redoes it and unprepare removes the spec.
                entries[uid] = ClaimEntry(uid, "", "", ClaimState.PREPARE_STARTED)
                recovered.append(uid)
        if recovered:
            log.warning(
                "recovered %d claim(s) from CDI specs without checkpoint entries: %s",
                len(recovered),
                ", ".join(recovered),
            )
        if recovered or result.problem is not None:
            self._store.save(entries)
        return entries

    def _optional_nodes(self) -> list[str]:
        return [p for p in cdi.OPTIONAL_CONTROL_NODES if (self._dev_root / p.lstrip("/")).exists()]

    def _write_spec(
        self,
        ref: ClaimRef,
        devices: Sequence[Device],
        extra: Mapping[str, Mapping[str, Any]] | None = None,
        prepared: Sequence[PreparedDevice] = (),
    ) -> None:
        """The claim's CDI spec: one CDI device per device, or per share of a device allocated as
        consumable shares (keyed by device and share, as the prepared devices name them)."""
        shares: dict[str, list[str]] = {}
        for d in prepared:
            if d.share_id is not None and d.share_id not in shares.get(d.device_name, []):
                shares.setdefault(d.device_name, []).append(d.share_id)
        try:
            spec = cdi.build_claim_spec(
                ref.uid,
                devices,
                optional_nodes=self._optional_nodes(),
                driver=self._driver_edits,
                extra_device_edits=extra,
                shares=shares,
            )
            cdi.write_claim_spec(self._cdi_root, ref.uid, spec)
        except (OSError, cdi.CdiSpecError) as exc:
            raise ClaimError(f"claim {ref.namespace}/{ref.name}: cannot write its CDI spec: {exc}") from None
