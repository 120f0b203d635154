"""Prepared-claim state of this node: prepare/unprepare, backed by CDI specs and the checkpoint.

Stateless between calls: every prepare and unprepare takes the node lock (`nodelock`, shared with
any other plugin process on this node, e.g. the other pod of a seamless upgrade), reads the
checkpoint, makes its change durable and releases the lock. No prepared claim is kept in memory,
so a claim prepared by one process is known to the other at its next call. Waiting for the lock
is bounded by the caller's deadline (kubelet's, for gRPC calls).

At start, under the same lock, the temp files of interrupted atomic writes of this driver are
removed and claims whose CDI spec has no checkpoint entry are recovered.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from . import cdi
from .allocation import allocated_devices
from .checkpoint import CHECKPOINT_FILE, CheckpointStore, ClaimEntry, ClaimState
from .fsutil import remove_temp_leftovers
from .model import ClaimError, ClaimRef, Device, PreparedDevice
from .nodelock import LOCK_FILE, LockTimeout, NodeLock

log = logging.getLogger(__name__)

#: How long a call without a deadline (start-up, inspection, tests) waits for the node lock:
#: kubelet's own call timeout.
DEFAULT_LOCK_WAIT_SECONDS: Final = 45.0


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
        self._store = CheckpointStore(plugin_data_dir)
        self._lock = NodeLock(plugin_data_dir / LOCK_FILE)
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
        with self._locked(ref, deadline):
            entries = self._read()
            entry = entries.get(ref.uid)
            if entry is not None and entry.state is ClaimState.PREPARE_COMPLETED:
                self._ensure_spec(ref, entry)
                return list(entry.devices)
            allocated = allocated_devices(
                ref, claim, driver_name=self._driver_name, pool_name=self._pool_name, devices=self._by_name
            )
            entries[ref.uid] = ClaimEntry(ref.uid, ref.namespace, ref.name, ClaimState.PREPARE_STARTED)
            self._save(entries, ref)
            unique = list({a.device.name: a.device for a in allocated}.values())
            self._write_spec(ref, unique)
            prepared = [
                PreparedDevice(
                    request_names=(a.request_name,),
                    pool_name=self._pool_name,
                    device_name=a.device.name,
                    cdi_device_ids=(cdi.claim_device_id(ref.uid, a.device.name),),
                )
                for a in allocated
            ]
            entries[ref.uid] = ClaimEntry(
                ref.uid, ref.namespace, ref.name, ClaimState.PREPARE_COMPLETED, tuple(prepared)
            )
            self._save(entries, ref)
            return prepared

    def unprepare(self, ref: ClaimRef, *, deadline: float | None = None) -> None:
        """Remove the claim's CDI spec and checkpoint entry (either state); an unknown claim is a success."""
        with self._locked(ref, deadline):
            entries = self._read()
            try:
                cdi.delete_claim_spec(self._cdi_root, ref.uid)
            except OSError as exc:
                label = f"{ref.namespace}/{ref.name}"
                raise ClaimError(f"claim {label}: cannot delete its CDI spec: {exc}") from None
            if entries.pop(ref.uid, None) is not None:
                self._save(entries, ref)

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

    @contextlib.contextmanager
    def _locked(self, ref: ClaimRef, deadline: float | None) -> Iterator[None]:
        if deadline is None:
            deadline = time.monotonic() + self._lock_wait
        try:
            with self._lock.held(deadline):
                yield
        except LockTimeout:
            raise ClaimError(
                f"claim {ref.namespace}/{ref.name}: timed out waiting for the node's prepare/unprepare lock "
                f"{self._lock.path}: another call (in this or another plugin process on the node) held it "
                "until the call's deadline"
            ) from None

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

    def _save(self, entries: Mapping[str, ClaimEntry], ref: ClaimRef) -> None:
        """Write the checkpoint (caller holds the node lock); a disk failure is the claim's error."""
        try:
            self._store.save(entries)
        except OSError as exc:
            raise ClaimError(
                f"claim {ref.namespace}/{ref.name}: cannot write checkpoint {self._store.path}: {exc}"
            ) from None

    def _optional_nodes(self) -> list[str]:
        return [p for p in cdi.OPTIONAL_CONTROL_NODES if (self._dev_root / p.lstrip("/")).exists()]

    def _write_spec(self, ref: ClaimRef, devices: Sequence[Device]) -> None:
        try:
            spec = cdi.build_claim_spec(ref.uid, devices, optional_nodes=self._optional_nodes())
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
        self._write_spec(ref, [self._by_name[n] for n in names])
