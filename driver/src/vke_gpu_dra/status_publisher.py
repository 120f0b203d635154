"""Writes prepared claims' `status.devices` (see `claim_status`) in the background, never in a kubelet call.

`prepared()` and `unprepared()` only queue the claim and return: kubelet's answer never waits for the API
server. One worker thread applies the queued claims in order, each with one server-side apply (where the
server refuses it for the claim's stored device config: a read and an update in protobuf form,
`claim_wire`) bounded by `WRITE_TIMEOUT` seconds and tried once: a failed write is counted and logged, not
retried (kubelet's next prepare of the claim writes it again; a deallocation clears it anyway).

A prepare's entries are written `settle` seconds after it (half a second by default): kubelet starts the
pod's containers meanwhile, and a claim unprepared before then (a pod that failed at once) never gets
entries, so nothing is written for it, neither the entries nor their removal. The queue holds at most one
pending write per claim (a later event replaces an earlier one not yet written: a prepare whose entries
were written and then an unprepare is one write, the removal) and at most `max_pending` claims; a claim
arriving when it is full is dropped and counted. Unprepare removes this driver's entries: kubelet
unprepares a claim no pod of the node uses any more, and the API server clears the entries of a
deallocated claim itself.

An API server that does not keep the field (feature gate DRAResourceClaimDeviceStatus off; beta and on by
default from 1.33, GA from 1.37) answers a write with the entries dropped: that is said once, and the
publisher writes nothing more.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Protocol

from vke_gpu_dra_core.device_model import ClaimRef, Device, PreparedDevice
from vke_gpu_dra_core.featuregates import FeatureGates
from vke_gpu_dra_core.objects import lookup

from .claim_status import (
    FIELD_MANAGER,
    DeviceFacts,
    apply_body,
    device_facts,
    generation_of,
    kept_entries,
    sharing_strategies,
    status_entries,
)
from .claim_wire import StoredClaim, WireError, holds_entries_of, read_claim, with_devices
from .kubeapi import KubeError, failure_kind
from .kubelet.dra_service import ClaimPreparer
from .metrics import Metrics

if TYPE_CHECKING:
    from .state import PreparedClaim

log = logging.getLogger(__name__)

#: Seconds for one status write (the whole request).
WRITE_TIMEOUT: Final = 10.0
#: Claims waiting for their write, at most.
MAX_PENDING: Final = 1024
#: Seconds `stop` lets the queued writes finish.
STOP_GRACE: Final = 5.0
#: Seconds between a prepare and the write of its entries (an unprepare meanwhile cancels it).
SETTLE_SECONDS: Final = 0.5
#: Claims remembered as written (an unprepare of one of them removes its entries), at most.
MAX_WRITTEN: Final = 65536


class StatusWriter(Protocol):
    """The API calls the publisher makes (`kubeapi.KubeAPI`): the apply, and the protobuf read and update
    it falls back to where the server refuses the apply (`allocation_rewritten`)."""

    def apply_claim_status(
        self, namespace: str, name: str, body: dict[str, Any], *, field_manager: str, timeout: float
    ) -> dict[str, Any]: ...

    def get_resource_claim_wire(self, namespace: str, name: str, timeout: float) -> bytes | None: ...

    def update_claim_status_wire(
        self, namespace: str, name: str, body: bytes, *, field_manager: str, timeout: float
    ) -> dict[str, Any]: ...


@dataclass(frozen=True)
class _Prepared:
    ref: ClaimRef
    claim: Mapping[str, Any]
    devices: tuple[PreparedDevice, ...]
    device_uuids: Mapping[str, str]
    at: datetime
    #: time.monotonic() from which it may be written.
    due: float = 0.0


@dataclass(frozen=True)
class _Unprepared:
    ref: ClaimRef


_Write = _Prepared | _Unprepared


@dataclass
class _Failures:
    """The failure reasons said since the last success: each is warned about once."""

    said: set[str] = field(default_factory=set)


class ClaimStatusPublisher:
    """Queues claims' device status and applies it from one worker thread; `start()`, then `stop()`."""

    def __init__(
        self,
        api: StatusWriter,
        *,
        driver_name: str,
        pool_name: str,
        devices: Sequence[Device],
        gates: FeatureGates,
        metrics: Metrics | None = None,
        max_pending: int = MAX_PENDING,
        timeout: float = WRITE_TIMEOUT,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        settle: float = SETTLE_SECONDS,
    ) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {max_pending}")
        self._api = api
        self._driver = driver_name
        self._pool = pool_name
        self._devices = {d.name: d for d in devices}
        self._gates = gates
        self._metrics = metrics
        self._max_pending = max_pending
        self._timeout = timeout
        self._clock = clock
        self._settle = settle
        #: UIDs of the claims whose entries this process wrote and has not removed (oldest first), each with
        #: whether they went by the update in protobuf form (the claim's later writes go that way at once).
        self._written: OrderedDict[str, bool] = OrderedDict()
        lock = threading.RLock()
        #: The worker waits on `_cond`; `wait_idle` on `_idle` (same lock), so neither wakes the other.
        self._cond = threading.Condition(lock)
        self._idle = threading.Condition(lock)
        #: When the worker's wait ends (inf: until woken), None while it is not waiting: a write due later
        #: needs no wake-up, as the worker looks at the queue again by then.
        self._wake_at: float | None = None
        self._pending: OrderedDict[str, _Write] = OrderedDict()
        self._busy = False
        self._stopping = False
        self._drain_until = 0.0
        self._thread: threading.Thread | None = None
        self._failures = _Failures()
        self._full_said = False
        #: None until a write shows it; False once the API server dropped the entries.
        self.served: bool | None = None

    # --- what the DRA service calls (never blocks on the API) ---

    def prepared(
        self,
        ref: ClaimRef,
        claim: Mapping[str, Any],
        devices: Sequence[PreparedDevice],
        *,
        device_uuids: Mapping[str, str] | None = None,
    ) -> None:
        """Queue `Ready` entries for the devices a prepare of `claim` (API JSON) answered; `device_uuids`:
        device name -> the UUID of the device prepare created for it (a dynamic MIG device)."""
        due = time.monotonic() + self._settle
        self._queue(
            ref.uid, _Prepared(ref, claim, tuple(devices), dict(device_uuids or {}), self._clock(), due)
        )

    def unprepared(self, ref: ClaimRef) -> None:
        """Queue the removal of the claim's entries; a prepare of it not written yet is cancelled instead
        (nothing was written for it, unless an earlier process did: then the removal goes out too)."""
        with self._cond:
            pending = self._pending.get(ref.uid)
            if isinstance(pending, _Prepared) and ref.uid not in self._written:
                del self._pending[ref.uid]
                self._count("cancelled")
                self._idle.notify_all()  # the worker's wait for it ends on its own
                return
        self._queue(ref.uid, _Unprepared(ref))

    # --- lifecycle ---

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="claim-status", daemon=True)
        self._thread.start()

    def stop(self, grace: float = STOP_GRACE) -> None:
        """Let the queued writes finish for up to `grace` seconds, then stop; what is left is dropped."""
        with self._cond:
            self._stopping = True
            self._drain_until = time.monotonic() + grace
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(grace)  # a write still in flight then ends with the process (a daemon thread)
        with self._cond:
            left = len(self._pending)
            self._pending.clear()
            self._idle.notify_all()
        if left:
            self._count("dropped", left)
            log.warning("claim status writes dropped at stop", extra={"fields": {"claims": left}})

    def wait_idle(self, timeout: float) -> bool:
        """True once nothing is queued or being written (within `timeout` seconds)."""
        end = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._busy:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
            return True

    # --- internals ---

    def _queue(self, uid: str, write: _Write) -> None:
        with self._cond:
            if self.served is False:
                return
            if uid not in self._pending and len(self._pending) >= self._max_pending:
                self._count("dropped")
                if not self._full_said:
                    self._full_said = True
                    log.warning(
                        "claim status queue full: claims get no status until it drains",
                        extra={"fields": {"max_pending": self._max_pending, "claim": _label(write.ref)}},
                    )
                return
            self._pending.pop(uid, None)
            self._pending[uid] = write
            due = write.due if isinstance(write, _Prepared) else 0.0
            if self._wake_at is not None and due < self._wake_at:
                self._cond.notify()

    def _next(self) -> _Write | None:
        with self._cond:
            while True:
                if self._stopping and (not self._pending or time.monotonic() >= self._drain_until):
                    return None
                if self._pending:
                    uid, write = next(iter(self._pending.items()))
                    due = write.due if isinstance(write, _Prepared) else 0.0
                    if due <= time.monotonic() or self._stopping:
                        del self._pending[uid]
                        self._busy = True
                        if len(self._pending) < self._max_pending // 2:
                            self._full_said = False
                        return write
                    self._wait(due)  # the oldest is a prepare still settling
                    continue
                self._wait(math.inf)

    def _wait(self, until: float) -> None:
        """Wait until `until` (time.monotonic()) or a wake-up; the caller holds the lock."""
        self._wake_at = until
        try:
            self._cond.wait(None if until == math.inf else max(0.0, until - time.monotonic()))
        finally:
            self._wake_at = None

    def _loop(self) -> None:
        while (write := self._next()) is not None:
            try:
                self._write(write)
            except Exception:  # the worker outlives any one claim
                log.exception("claim status write failed", extra={"fields": {"claim": _label(write.ref)}})
                self._count("error")
            finally:
                with self._cond:
                    self._busy = False
                    self._idle.notify_all()

    def _write(self, write: _Write) -> None:
        if self.served is False:
            return
        ref = write.ref
        entries = self._entries(write) if isinstance(write, _Prepared) else []
        timeout = self._timeout
        if self._stopping:
            timeout = max(0.001, min(timeout, self._drain_until - time.monotonic()))
        try:
            stored, by_update = self._send(ref, entries, timeout)
        except KubeError as err:
            self._failed(ref, err)
            return
        if stored is None:  # gone, or re-created under the name
            self._count("gone")
            return
        if entries and self._dropped(stored):
            self.served = False
            with self._cond:
                self._pending.clear()
                self._idle.notify_all()
            self._count("unsupported")
            log.warning(
                "the API server does not keep ResourceClaim status.devices (feature gate "
                "DRAResourceClaimDeviceStatus off): claims get no per-device status",
                extra={"fields": {"claim": _label(ref)}},
            )
            return
        if entries:
            self.served = True
        self._remember(ref.uid, written=bool(entries), by_update=by_update)
        self._count("success")
        if self._failures.said:
            self._failures.said.clear()
            log.info("claim status writes succeed again")
        log.debug(
            "claim status written",
            extra={
                "fields": {"claim": _label(ref), "uid": ref.uid, "devices": [e["device"] for e in entries]}
            },
        )

    def _send(
        self, ref: ClaimRef, entries: list[dict[str, Any]], timeout: float
    ) -> tuple[dict[str, Any] | None, bool]:
        """The claim's entries as an apply, or as an update of the claim in protobuf form where the apply
        cannot do it: the server refused it for the claim's stored device config (then, or earlier for the
        same claim), or it left entries an earlier update wrote (that update, not the apply, owns them).
        The stored claim (None when it is gone), and whether the update wrote it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            by_update = self._written.get(ref.uid, False)
        if by_update:
            return self._rewrite(ref, entries, deadline), True
        try:
            stored = self._api.apply_claim_status(
                ref.namespace,
                ref.name,
                apply_body(ref, entries),
                field_manager=FIELD_MANAGER,
                timeout=timeout,
            )
        except KubeError as err:
            if not allocation_rewritten(err):
                raise
            return self._rewrite(ref, entries, deadline), True
        if not entries and kept_entries(stored, self._driver, self._pool):
            return self._rewrite(ref, entries, deadline), True
        return stored, False

    def _rewrite(
        self, ref: ClaimRef, entries: list[dict[str, Any]], deadline: float
    ) -> dict[str, Any] | None:
        """The entries written by an update of the claim read now in protobuf form, every byte but its
        `status.devices` kept (`claim_wire`): the server refused the apply for the claim's stored device
        config. The update carries the resourceVersion read (a change since: 409, not retried). The stored
        claim; {} when nothing was to be written; None when the claim is gone."""
        body = self._api.get_resource_claim_wire(ref.namespace, ref.name, _left(deadline))
        if body is None:
            return None
        try:
            claim: StoredClaim = read_claim(body)
        except WireError as err:
            # answered, but not with a claim: counted as the API's error it is, not as a network failure
            raise KubeError(200, "InvalidResponse", f"claim {_label(ref)} read as protobuf: {err}") from None
        if claim.uid != ref.uid:
            return None
        if not entries and not holds_entries_of(claim, self._driver, self._pool):
            return {}
        log.debug(
            "claim status written by an update in protobuf form", extra={"fields": {"claim": _label(ref)}}
        )
        return self._api.update_claim_status_wire(
            ref.namespace,
            ref.name,
            with_devices(claim, entries, self._driver, self._pool),
            field_manager=FIELD_MANAGER,
            timeout=_left(deadline),
        )

    def _remember(self, uid: str, *, written: bool, by_update: bool = False) -> None:
        with self._cond:
            self._written.pop(uid, None)
            if written:
                self._written[uid] = by_update
                if len(self._written) > MAX_WRITTEN:
                    self._written.popitem(last=False)

    def _entries(self, write: _Prepared) -> list[dict[str, Any]]:
        strategies = sharing_strategies(
            write.ref,
            write.claim,
            driver_name=self._driver,
            pool_name=self._pool,
            devices=self._devices,
            gates=self._gates,
        )
        known: dict[tuple[str, str | None], DeviceFacts] = {}
        for dev in write.devices:
            device = self._devices.get(dev.device_name)
            if device is not None:
                key = (dev.device_name, dev.share_id)
                known[key] = device_facts(
                    device, sharing=strategies.get(key), mig_uuid=write.device_uuids.get(dev.device_name)
                )
        return status_entries(
            self._driver, write.devices, known, at=write.at, generation=generation_of(write.claim)
        )

    def _dropped(self, stored: Mapping[str, Any]) -> bool:
        """The server answered an allocated claim without the entries just applied: it drops the field."""
        return lookup(stored, "status", "allocation") is not None and not kept_entries(
            stored, self._driver, self._pool
        )

    def _failed(self, ref: ClaimRef, err: KubeError) -> None:
        fields = {"claim": _label(ref), "uid": ref.uid, "error": str(err)}
        if err.not_found or replaced(err):
            # Deleted, or re-created under the name (the uid no longer matches): nothing of ours to write.
            self._count("gone")
            log.debug("claim status not written: the claim is gone", extra={"fields": fields})
            return
        reason = failure_kind(err)
        self._count(reason)
        if reason in self._failures.said:
            log.debug("claim status write failed", extra={"fields": {**fields, "reason": reason}})
            return
        self._failures.said.add(reason)
        log.warning(
            "cannot write claim status; it is not retried",
            extra={"fields": {**fields, "reason": reason}},
        )

    def _count(self, result: str, n: int = 1) -> None:
        if self._metrics is not None:
            self._metrics.claim_status_writes.labels(result=result).inc(n)


class StatePreparer(ClaimPreparer, Protocol):
    """The device state (`state.DeviceState`): a prepare's answer with its MIG devices' UUIDs."""

    def prepare_claim(
        self, ref: ClaimRef, claim: Mapping[str, Any], *, deadline: float | None = None
    ) -> PreparedClaim: ...


class StatusReporting:
    """The device state as the DRA service sees it, with each successful prepare and unprepare handed
    to the publisher after the state answered (`kubelet.dra_service.ClaimPreparer`)."""

    def __init__(self, state: StatePreparer, publisher: ClaimStatusPublisher) -> None:
        self._state = state
        self._publisher = publisher

    def prepare(
        self, ref: ClaimRef, claim: Mapping[str, Any], *, deadline: float | None = None
    ) -> list[PreparedDevice]:
        prepared = self._state.prepare_claim(ref, claim, deadline=deadline)
        self._publisher.prepared(ref, claim, prepared.devices, device_uuids=prepared.device_uuids)
        return prepared.devices

    def unprepare(self, ref: ClaimRef, *, deadline: float | None = None) -> None:
        self._state.unprepare(ref, deadline=deadline)
        self._publisher.unprepared(ref)


def replaced(err: KubeError) -> bool:
    """The API server's answer to an apply whose `metadata.uid` is not the stored claim's: 422 Invalid,
    `metadata.uid: Invalid value: ...: field is immutable`."""
    return err.status == 422 and "metadata.uid" in err.message


def allocation_rewritten(err: KubeError) -> bool:
    """The API server's answer to an apply that would rewrite the claim's allocation: server-side apply
    serialises the stored opaque device config again, and bytes stored in another form read as changed
    (422 Invalid on `status.allocation`; from 1.37 also the binding permission it would need)."""
    return err.status == 422 and "status.allocation" in err.message


def _left(deadline: float) -> float:
    """Seconds left until `deadline` (time.monotonic()), a millisecond at least."""
    return max(0.001, deadline - time.monotonic())


def _label(ref: ClaimRef) -> str:
    return f"{ref.namespace}/{ref.name}"
