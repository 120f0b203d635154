"""Prepared-claim state of this node: prepare/unprepare, backed by CDI specs and the checkpoint.

Called concurrently from gRPC worker threads. Each claim UID has its own lock, so different claims
are prepared in parallel while the same claim is never prepared twice at once; a short global lock
guards the in-memory entries. Checkpoint writes are serialised and group-committed: changes that
arrive while a write is in flight go to disk together in the next one, and every caller returns
only once a durable write holds its change (the file always matches memory).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import cdi, sharing
from .allocation import allocated_devices
from .checkpoint import CheckpointStore, ClaimEntry, ClaimState
from .featuregates import FeatureGates
from .model import ClaimError, ClaimRef, Device, PreparedDevice

log = logging.getLogger(__name__)

#: Time allowed for prepare/unprepare sharing work when the caller passes no deadline.
DEFAULT_DEADLINE_SECONDS = 40.0
#: Time allowed to undo a failed prepare's sharing changes.
ROLLBACK_SECONDS = 10.0


@dataclass
class _ClaimLock:
    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0


@dataclass
class _Change:
    """One claim's checkpoint change waiting to be written: its new entry, or None to remove it."""

    uid: str
    entry: ClaimEntry | None
    written: bool = False
    error: BaseException | None = None


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
        self._dev_root = dev_root
        self._gates = gates or FeatureGates()
        self._sharing = sharing_manager
        self._store = CheckpointStore(plugin_data_dir)
        self._entries_lock = threading.Lock()
        self._writer_lock = threading.Lock()  # held while the checkpoint file is being written
        self._pending: list[_Change] = []
        self._claim_locks: dict[str, _ClaimLock] = {}
        self._claim_locks_guard = threading.Lock()
        #: The one-line problem found while loading the checkpoint (None when it was fine).
        self.load_problem: str | None = None
        self._entries = self._load()

    # ------------------------------------------------------------------------------------ public API

    @property
    def devices(self) -> Sequence[Device]:
        return self._devices

    def prepare(
        self, ref: ClaimRef, claim: Mapping[str, Any], deadline: float | None = None
    ) -> list[PreparedDevice]:
        """Prepare `claim` (API JSON fetched just now); idempotent; raises ClaimError.

        `deadline` (time.monotonic()) bounds the sharing work (nvidia-smi, MPS readiness).
        """
        deadline = time.monotonic() + DEFAULT_DEADLINE_SECONDS if deadline is None else deadline
        with self._claim_lock(ref.uid):
            entry = self._entry(ref.uid)
            if entry is not None and entry.state is ClaimState.PREPARE_COMPLETED:
                self._ensure_spec(ref, entry)
                return list(entry.devices)
            allocated = allocated_devices(
                ref, claim, driver_name=self._driver_name, pool_name=self._pool_name, devices=self._by_name,
                gates=self._gates,
            )
            # --- sharing (begin): plan, refuse conflicts, record before changing anything ---
            plan = sharing.plan_for(allocated)
            record = self._sharing_record(ref, plan)
            # --- sharing (end) ---
            started = ClaimEntry(ref.uid, ref.namespace, ref.name, ClaimState.PREPARE_STARTED, sharing=record)
            self._save_entry(started, ref)
            unique = list({a.device.name: a.device for a in allocated}.values())
            try:
                if record:
                    self._apply_sharing(ref, plan, deadline)
                self._write_spec(ref, unique, self._mps_edits(record))
            except ClaimError:
                if record:  # kubelet's deadline may be spent: the rollback gets its own short bound
                    self._roll_back(ref, record, time.monotonic() + ROLLBACK_SECONDS)
                raise
            prepared = [
                PreparedDevice(
                    request_names=(a.request_name,),
                    pool_name=self._pool_name,
                    device_name=a.device.name,
                    cdi_device_ids=(cdi.claim_device_id(ref.uid, a.device.name),),
                )
                for a in allocated
            ]
            done = ClaimEntry(
                ref.uid, ref.namespace, ref.name, ClaimState.PREPARE_COMPLETED, tuple(prepared), record
            )
            self._save_entry(done, ref)
            return prepared

    def unprepare(self, ref: ClaimRef, deadline: float | None = None) -> None:
        """Undo the claim's sharing changes, remove its CDI spec and checkpoint entry (either state).

        An unknown claim is a success; a failed undo keeps the entry so that a retry undoes it.
        """
        deadline = time.monotonic() + DEFAULT_DEADLINE_SECONDS if deadline is None else deadline
        with self._claim_lock(ref.uid):
            entry = self._entry(ref.uid)
            if entry is not None and entry.sharing:
                self._undo_sharing(ref, entry.sharing, deadline)
            try:
                cdi.delete_claim_spec(self._cdi_root, ref.uid)
            except OSError as exc:
                label = f"{ref.namespace}/{ref.name}"
                raise ClaimError(f"claim {label}: cannot delete its CDI spec: {exc}") from None
            if self._entry(ref.uid) is not None:  # stable: the claim lock is held
                self._commit(_Change(ref.uid, None), ref)

    def prepared(self) -> dict[str, list[PreparedDevice]]:
        """Claim UID -> prepared devices, for claims whose preparation completed."""
        with self._entries_lock:
            return {
                uid: list(e.devices)
                for uid, e in self._entries.items()
                if e.state is ClaimState.PREPARE_COMPLETED
            }

    def entries(self) -> dict[str, ClaimEntry]:
        """All checkpoint entries (including PrepareStarted), for inspection."""
        with self._entries_lock:
            return dict(self._entries)

    # ------------------------------------------------------------------------------------- internals

    def _load(self) -> dict[str, ClaimEntry]:
        result = self._store.load()
        entries = dict(result.entries)
        if result.problem is not None:
            self.load_problem = result.problem
            log.error("%s", result.problem)
        recovered = []
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
            log.warning("recovered %d claim(s) from CDI specs without checkpoint entries: %s",
                        len(recovered), ", ".join(recovered))
        if recovered or result.problem is not None:
            self._store.save(entries)
        return entries

    @contextlib.contextmanager
    def _claim_lock(self, uid: str) -> Iterator[None]:
        with self._claim_locks_guard:
            slot = self._claim_locks.setdefault(uid, _ClaimLock())
            slot.users += 1
        try:
            with slot.lock:
                yield
        finally:
            with self._claim_locks_guard:
                slot.users -= 1
                if slot.users == 0:
                    del self._claim_locks[uid]

    def _entry(self, uid: str) -> ClaimEntry | None:
        with self._entries_lock:
            return self._entries.get(uid)

    def _save_entry(self, entry: ClaimEntry, ref: ClaimRef) -> None:
        self._commit(_Change(entry.uid, entry), ref)

    def _commit(self, change: _Change, ref: ClaimRef) -> None:
        """Make `change` durable, then current; memory is unchanged when the write fails.

        The first caller to get the writer lock writes every change queued so far; the callers
        whose changes it wrote find them written when they get the lock in turn.
        """
        with self._entries_lock:
            self._pending.append(change)
        with self._writer_lock:
            if not change.written:
                self._write_pending()
        if isinstance(change.error, OSError):
            raise ClaimError(
                f"claim {ref.namespace}/{ref.name}: cannot write checkpoint {self._store.path}: "
                f"{change.error}"
            ) from None
        if change.error is not None:  # a bug, not the disk: keep its traceback
            message = f"writing checkpoint {self._store.path} failed: {change.error!r}"
            raise RuntimeError(message) from change.error

    def _write_pending(self) -> None:
        """Write the current entries plus every queued change (caller holds the writer lock)."""
        with self._entries_lock:
            batch, self._pending = self._pending, []
            entries = dict(self._entries)
        for change in batch:
            if change.entry is None:
                entries.pop(change.uid, None)
            else:
                entries[change.uid] = change.entry
        try:
            self._store.save(entries)
        except BaseException as exc:  # every change of the batch fails with it; memory stays
            for change in batch:
                change.error, change.written = exc, True
            if not isinstance(exc, Exception):
                raise
            return
        with self._entries_lock:
            self._entries = entries
        for change in batch:
            change.written = True

    def _optional_nodes(self) -> list[str]:
        return [p for p in cdi.OPTIONAL_CONTROL_NODES if (self._dev_root / p.lstrip("/")).exists()]

    def _write_spec(
        self, ref: ClaimRef, devices: Sequence[Device], extra: Mapping[str, Mapping[str, Any]] | None = None
    ) -> None:
        try:
            spec = cdi.build_claim_spec(
                ref.uid, devices, optional_nodes=self._optional_nodes(), extra_device_edits=extra
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

    def _sharing_record(self, ref: ClaimRef, plan: sharing.Plan) -> sharing.SharingRecord:
        if not plan.timeslice and not plan.mps:
            return sharing.SharingRecord()
        label = f"{ref.namespace}/{ref.name}"
        if self._sharing is None:
            raise ClaimError(f"claim {label}: GPU sharing is not available on this node")
        with self._entries_lock:
            others = [e.sharing for uid, e in self._entries.items() if uid != ref.uid]
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

    def _in_use_by_others(self, uid: str) -> set[str]:
        with self._entries_lock:
            used: set[str] = set()
            for other, e in self._entries.items():
                if other != uid:
                    used.update(d.device_name for d in e.devices)
                    used.update(e.sharing.timeslice)
                    used.update(n for m in e.sharing.mps for n in m.devices)
            return used

    def _undo_sharing(self, ref: ClaimRef, record: sharing.SharingRecord, deadline: float) -> None:
        if self._sharing is None:
            raise ClaimError(f"claim {ref.namespace}/{ref.name}: cannot undo its GPU sharing settings here")
        try:
            self._sharing.undo(record, self._by_name, self._in_use_by_others(ref.uid), deadline)
        except (sharing.SharingError, OSError) as exc:
            raise ClaimError(f"claim {ref.namespace}/{ref.name}: cannot undo GPU sharing: {exc}") from None

    def _roll_back(self, ref: ClaimRef, record: sharing.SharingRecord, deadline: float) -> None:
        """After a failed prepare: undo what was applied and drop the entry; keep it if the undo fails."""
        try:
            self._undo_sharing(ref, record, deadline)
            cdi.delete_claim_spec(self._cdi_root, ref.uid)
            self._commit(_Change(ref.uid, None), ref)
        except (ClaimError, OSError) as exc:
            log.warning("claim %s: rollback incomplete (%s); unprepare will retry", ref, exc)

    def _mps_edits(self, record: sharing.SharingRecord) -> dict[str, dict[str, Any]]:
        if not record.mps or self._sharing is None:
            return {}
        data_dir = self._sharing.plugin_data_dir
        return {name: sharing.mps_cdi_edits(data_dir, m.daemon_id) for m in record.mps for name in m.devices}
