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

At start, under the same lock, the temp files of interrupted atomic writes of this driver are
removed and claims whose CDI spec has no checkpoint entry are recovered.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, Device, PreparedDevice
from vke_gpu_dra_core.featuregates import FeatureGates

from . import cdi, sharing
from .allocation import allocated_devices
from .checkpoint import CHECKPOINT_FILE, CheckpointStore, ClaimEntry, ClaimState
from .fsutil import remove_temp_leftovers
from .nodelock import LOCK_FILE, LockTimeout, NodeLock

if TYPE_CHECKING:
    from .userspace import DriverEdits

log = logging.getLogger(__name__)

#: How long a call without a deadline (start-up, inspection, tests) waits for the node lock:
#: kubelet's own call timeout.
DEFAULT_LOCK_WAIT_SECONDS: Final = 45.0


#: Time allowed to undo a failed prepare's sharing changes (kubelet's deadline may be spent by then).
ROLLBACK_SECONDS: Final = 10.0

#: Threads writing the CDI specs of one batch in parallel.
SPEC_WRITERS: Final = 8


@dataclass(eq=False)
class _Op:
    """One prepare or unprepare waiting for (or done by) a batch under the node lock."""

    kind: Literal["prepare", "unprepare"]
    ref: ClaimRef
    claim: Mapping[str, Any] | None
    deadline: float
    done: threading.Event = field(default_factory=threading.Event)
    result: list[PreparedDevice] | None = None
    error: BaseException | None = None
    devices: list[Device] = field(default_factory=list)  # a prepare's devices, once checked
    prepared: list[PreparedDevice] = field(default_factory=list)  # its answer, once its spec is written
    plan: sharing.Plan | None = None  # a prepare's GPU sharing, once checked
    record: sharing.SharingRecord = field(default_factory=sharing.SharingRecord)  # what it changes
    record_kept: bool = False  # a failed prepare whose sharing undo failed: its entry stays for unprepare


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
        sharing_manager: sharing.SharingManager | None = None,
    ) -> None:
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
        self._store = CheckpointStore(plugin_data_dir)
        self._lock = NodeLock(plugin_data_dir / LOCK_FILE)
        self._queue: list[_Op] = []
        self._queue_guard = threading.Lock()
        self._spec_writers: ThreadPoolExecutor | None = None
        #: The one-line problem found while loading the checkpoint at start (None when it was fine).
        self.load_problem: str | None = None
        #: Temp files of interrupted writes removed at start.
        self.removed_leftovers: list[Path] = []
        with self._locked_or_fail("start"):
            self.removed_leftovers = self._remove_leftovers()
            self._read(recover_orphans=True, at_start=True)

    # ------------------------------------------------------------------------------------ public API

    @property
    def devices(self) -> Sequence[Device]:
        return self._devices

    def prepare(
        self, ref: ClaimRef, claim: Mapping[str, Any], *, deadline: float | None = None
    ) -> list[PreparedDevice]:
        """Prepare `claim` (API JSON fetched just now); idempotent; raises ClaimError.

        `deadline` (a `time.monotonic()` value) bounds the wait for the node lock.
        """
        op = self._submit(_Op("prepare", ref, claim, self._deadline(deadline)))
        assert op.result is not None
        return op.result

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
        label = f"{op.ref.namespace}/{op.ref.name}"
        op.error = ClaimError(
            f"claim {label}: timed out waiting for the node's prepare/unprepare lock "
            f"{self._lock.path}: another call (in this or another plugin process on the node) held it "
            "until the call's deadline"
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
        """Do `batch` (caller holds the node lock): read the checkpoint, change it, write it back."""
        try:
            entries = self._read()
            starting: list[_Op] = []
            removed: list[_Op] = []
            for op in batch:
                self._plan(op, entries, starting, removed)
            # 1. PrepareStarted entries (and removals) before any CDI spec is written
            self._save_batch(entries, [*starting, *removed])
            starting = [op for op in starting if op.error is None]
            # 2. GPU sharing settings and the CDI specs, in parallel
            self._write_specs(starting, entries)
            rolled_back = [op for op in starting if op.error is not None and op.record and not op.record_kept]
            for op in rolled_back:
                entries.pop(op.ref.uid, None)
            self._save_batch(entries, rolled_back)
            # 3. PrepareCompleted entries of the claims whose spec was written
            written = [op for op in starting if op.error is None]
            for op in written:
                entries[op.ref.uid] = ClaimEntry(
                    op.ref.uid,
                    op.ref.namespace,
                    op.ref.name,
                    ClaimState.PREPARE_COMPLETED,
                    tuple(op.prepared),
                    op.record,
                )
            self._save_batch(entries, written)
            for op in written:
                op.result = op.prepared
        except Exception as exc:  # a bug, not a claim's problem: every unanswered operation fails with it
            log.exception("prepare/unprepare batch failed")
            for op in batch:
                if op.error is None and (op.kind == "unprepare" or op.result is None):
                    op.error = RuntimeError(
                        f"{op.kind} of claim {op.ref.namespace}/{op.ref.name} failed: {exc!r}"
                    )
                    op.error.__cause__ = exc
        finally:
            for op in batch:
                op.done.set()

    def _plan(self, op: _Op, entries: dict[str, ClaimEntry], starting: list[_Op], removed: list[_Op]) -> None:
        """First step of one operation: answer from the checkpoint, check the claim, delete a spec."""
        ref = op.ref
        try:
            if op.kind == "unprepare":
                entry = entries.get(ref.uid)
                if entry is not None and entry.sharing:  # a failed undo keeps the entry for a retry
                    self._undo_sharing(ref, entry.sharing, op.deadline, entries)
                try:
                    cdi.delete_claim_spec(self._cdi_root, ref.uid)
                except OSError as exc:
                    raise ClaimError(
                        f"claim {ref.namespace}/{ref.name}: cannot delete its CDI spec: {exc}"
                    ) from None
                if entries.pop(ref.uid, None) is not None:
                    removed.append(op)
                return
            entry = entries.get(ref.uid)
            if entry is not None and entry.state is ClaimState.PREPARE_COMPLETED:
                self._ensure_spec(ref, entry)
                op.result = list(entry.devices)
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
            # GPU sharing: plan, refuse conflicts with other claims, record it before changing anything
            op.plan = sharing.plan_for(allocated)
            op.record = self._sharing_record(ref, op.plan, entries)
            op.devices = list({a.device.name: a.device for a in allocated}.values())
            op.prepared = [
                PreparedDevice(
                    request_names=(a.request_name,),
                    pool_name=self._pool_name,
                    device_name=a.device.name,
                    cdi_device_ids=(cdi.claim_device_id(ref.uid, a.device.name),),
                )
                for a in allocated
            ]
            entries[ref.uid] = ClaimEntry(
                ref.uid, ref.namespace, ref.name, ClaimState.PREPARE_STARTED, sharing=op.record
            )
            starting.append(op)
        except ClaimError as exc:
            op.error = exc
        except Exception as exc:  # a bug met by this claim only: the others of the batch go on
            op.error = RuntimeError(f"{op.kind} of claim {ref.namespace}/{ref.name} failed: {exc!r}")
            op.error.__cause__ = exc

    def _save_batch(self, entries: Mapping[str, ClaimEntry], changed: Sequence[_Op]) -> None:
        """Write the checkpoint when `changed` is not empty; a disk failure fails each of them."""
        if not changed:
            return
        try:
            self._store.save(entries)
        except OSError as exc:
            for op in changed:
                label = f"{op.ref.namespace}/{op.ref.name}"
                op.error = ClaimError(f"claim {label}: cannot write checkpoint {self._store.path}: {exc}")

    def _write_specs(self, ops: Sequence[_Op], entries: Mapping[str, ClaimEntry]) -> None:
        def write(op: _Op) -> None:
            try:
                if op.record:
                    assert op.plan is not None
                    self._apply_sharing(op.ref, op.plan, op.deadline)
                self._write_spec(op.ref, op.devices, self._mps_edits(op.record))
            except ClaimError as exc:
                op.error = exc
                if op.record:
                    op.record_kept = not self._roll_back(op.ref, op.record, entries)

        if len(ops) <= 1:
            for op in ops:
                write(op)
            return
        if self._spec_writers is None:
            self._spec_writers = ThreadPoolExecutor(max_workers=SPEC_WRITERS, thread_name_prefix="cdi-write")
            weakref.finalize(self, self._spec_writers.shutdown, wait=False)
        list(self._spec_writers.map(write, ops))

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
        """Temp files of our interrupted atomic writes: the checkpoint's and the claim specs'."""
        removed = remove_temp_leftovers(self._plugin_data_dir, lambda name: name == CHECKPOINT_FILE)
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
            for uid, path in cdi.list_claim_specs(self._cdi_root).items():
                if uid in entries:
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
        self, ref: ClaimRef, devices: Sequence[Device], extra: Mapping[str, Mapping[str, Any]] | None = None
    ) -> None:
        try:
            spec = cdi.build_claim_spec(
                ref.uid,
                devices,
                optional_nodes=self._optional_nodes(),
                driver=self._driver_edits,
                extra_device_edits=extra,
            )
            cdi.write_claim_spec(self._cdi_root, ref.uid, spec)
        except (OSError, cdi.CdiSpecError) as exc:
            raise ClaimError(f"claim {ref.namespace}/{ref.name}: cannot write its CDI spec: {exc}") from None

    def _ensure_spec(self, ref: ClaimRef, entry: ClaimEntry) -> None:
        """Rewrite a completed claim's CDI spec if it vanished (e.g. /var/run/cdi emptied by a reboot)."""
        if cdi.claim_spec_path(self._cdi_root, ref.uid).exists():
            return
        names = list(dict.fromkeys(d.device_name for d in entry.devices))
        missing = [n for n in names if n not in self._by_name]
        if missing:
            raise ClaimError(
                f"claim {ref.namespace}/{ref.name} was prepared with device(s) {', '.join(missing)}, "
                "which this node no longer publishes"
            )
        log.warning("CDI spec of prepared claim %s was missing; writing it again", ref)
        self._write_spec(ref, [self._by_name[n] for n in names], self._mps_edits(entry.sharing))

    # ------------------------------------------------------ sharing hooks (sharing.py does the work)

    def set_sharing_api(self, api: sharing.DeploymentAPI) -> None:
        """The API the MPS daemons are managed through (known once the plugin has connected)."""
        if self._sharing is not None:
            self._sharing.api = api

    def _sharing_record(
        self, ref: ClaimRef, plan: sharing.Plan, entries: Mapping[str, ClaimEntry]
    ) -> sharing.SharingRecord:
        if not plan.timeslice and not plan.mps:
            return sharing.SharingRecord()
        label = f"{ref.namespace}/{ref.name}"
        if self._sharing is None:
            raise ClaimError(f"claim {label}: GPU sharing is not available on this node")
        others = [e.sharing for uid, e in entries.items() if uid != ref.uid]
        try:
            self._sharing.check_conflicts(plan, others, label)
        except sharing.SharingError as exc:
            raise ClaimError(str(exc)) from None
        return self._sharing.record_for(ref.uid, plan)

    def _apply_sharing(self, ref: ClaimRef, plan: sharing.Plan, deadline: float) -> None:
        assert self._sharing is not None
        try:
            self._sharing.apply(ref.uid, plan, self._by_name, deadline)
        except sharing.SharingError as exc:
            raise ClaimError(f"claim {ref.namespace}/{ref.name}: {exc}") from None

    @staticmethod
    def _in_use_by_others(uid: str, entries: Mapping[str, ClaimEntry]) -> set[str]:
        used: set[str] = set()
        for other, e in entries.items():
            if other != uid:
                used.update(d.device_name for d in e.devices)
                used.update(e.sharing.timeslice)
                used.update(n for m in e.sharing.mps for n in m.devices)
        return used

    def _undo_sharing(
        self, ref: ClaimRef, record: sharing.SharingRecord, deadline: float, entries: Mapping[str, ClaimEntry]
    ) -> None:
        if self._sharing is None:
            raise ClaimError(f"claim {ref.namespace}/{ref.name}: cannot undo its GPU sharing settings here")
        try:
            self._sharing.undo(record, self._by_name, self._in_use_by_others(ref.uid, entries), deadline)
        except (sharing.SharingError, OSError) as exc:
            raise ClaimError(f"claim {ref.namespace}/{ref.name}: cannot undo GPU sharing: {exc}") from None

    def _roll_back(
        self, ref: ClaimRef, record: sharing.SharingRecord, entries: Mapping[str, ClaimEntry]
    ) -> bool:
        """After a failed prepare: undo what was applied, remove the spec; False (entry kept) on failure."""
        try:
            self._undo_sharing(ref, record, time.monotonic() + ROLLBACK_SECONDS, entries)
            cdi.delete_claim_spec(self._cdi_root, ref.uid)
        except (ClaimError, OSError) as exc:
            log.warning("claim %s: rollback incomplete (%s); unprepare will retry", ref, exc)
            return False
        return True

    def _mps_edits(self, record: sharing.SharingRecord) -> dict[str, dict[str, Any]]:
        if not record.mps or self._sharing is None:
            return {}
        data_dir = self._sharing.plugin_data_dir
        return {name: sharing.mps_cdi_edits(data_dir, m.daemon_id) for m in record.mps for name in m.devices}
