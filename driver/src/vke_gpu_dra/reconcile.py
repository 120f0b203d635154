"""Claim reconciliation: checkpoint entries checked against the API server, ghosts cleaned.

Only an unprepare removes an entry, and kubelet does not always send one (a force-deleted pod, a
kubelet that lost its state, a claim deleted and re-created under the same name). So every entry,
PrepareStarted ones included, is checked at start and then every `--claim-reconcile-interval`
seconds (`Reconciler`, one background thread):

* one GET per entry by namespace/name, never a list; at most `RECONCILE_WORKERS` at a time, each
  bounded by the API client's request timeout, outside the node lock (the entries are a snapshot);
* routine reads may be served from the API server's watch cache (`resourceVersion=0`); an entry that
  read judges a ghost (`ghosts.judge`) is read again from etcd (a quorum read), and only that read
  decides, so a stale cache never cleans a live claim;
* a ghost is cleaned by `DeviceState.clean_ghost`: exactly an unprepare (the same `ClaimLifecycle.unprepare`,
  NVIDIA's leftovers of an adopted claim included), under the node lock, in the batches that
  serialise the calls of one claim, and only if the entry is still the one judged and no prepare of
  it answered since that read (a claim prepared or unprepared in between is left alone). One log
  line per ghost, counted by reason;
* a read that fails (timeout, unreachable, 401/403, any other API error) keeps the entry and cleans
  nothing; it is counted, and logged once while the same claims keep failing;
* claims adopted from NVIDIA's plugin and not released, that kubelet has not prepared here again
  (`DeviceState.step_claims`: known only to the takeover's ledger), are checked the same way and
  a ghost is released through the same unprepare (`clean_ghost(..., step_claim=True)`: NVIDIA's claim
  spec, MPS daemon, compute mode and time-slice undone). NVIDIA 25.8.1 records no namespace/name of a
  claim (25.12's V2 form does); kubelet's next prepare of such a claim names it, and so does
  `_look_up_unnamed`: while one is unnamed, each round asks which claims the pods of this node use
  (`takeover.node_claims`: kubelet's PodResources API on the node, the pods bound to the node through
  the API server only as a fallback where that grant exists) and reads each of them (quorum GETs);
  a claim of its UID names it (then it is checked as a named one), and one no complete view names
  in `UNREFERENCED_ROUNDS` consecutive rounds whose lookups all answered is released
  (`Reason.UNREFERENCED`): kubelet unprepares a claim no pod of its node uses. A failed or
  incomplete lookup decides nothing and starts the count again. Without a `lookup` such a claim is
  logged once and kept (its devices stay held).

Cost: a round makes one GET per prepared claim (plus a quorum read per ghost). With the default
interval of 600 s, 1,000 nodes with 8 prepared claims each make 8,000 GETs per 600 s, about 13
requests/s cluster-wide, all cheap cache reads (the 20 requests/s budget allows any interval of
400 s and more at that size). While a node has adopted claims without a name, its rounds add one
call to kubelet's PodResources API (or, where it cannot tell and the grant exists, one node-scoped pod
list) and one quorum GET per claim its pods use; when the lookups answer, that lasts two rounds after
the takeover (every such claim is named or released by then).

`check_holders` is the prepare-time check (`DeviceState.holder_check`): the claims holding a new
claim's devices are read at once (quorum reads, within the call's deadline); a ghost is cleaned and
the prepare goes on, a live holder is the prepare's error naming both claims.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Final, Protocol

from vke_gpu_dra_core.device_model import ClaimError, ClaimRef
from vke_gpu_dra_core.objects import lookup

from .allocation.guard import Holder, admin_access_devices, held_error
from .claims.checkpoint import ClaimEntry
from .ghosts import Reason, checkable, judge, label
from .kubeapi import ClaimSource, KubeError, failure_kind
from .metrics import Metrics
from .nodelock import StateLockTimeout
from .reconcile_interval import DEFAULT_INTERVAL_SECONDS
from .takeover.node_claims import ClaimLookup, Undecided

log = logging.getLogger(__name__)

#: Claims read at the same time in one round.
RECONCILE_WORKERS: Final = 4
#: Consecutive rounds in which no pod of this node references an unnamed adopted claim before it is
#: released (a pod created meanwhile is seen by the second round).
UNREFERENCED_ROUNDS: Final = 2


class GhostState(Protocol):
    """What reconciliation needs of the device state (vke_gpu_dra.state.DeviceState)."""

    def entries(self) -> dict[str, ClaimEntry]: ...

    def step_claims(self) -> dict[str, ClaimEntry]: ...

    def clean_ghost(
        self,
        entry: ClaimEntry,
        *,
        judged_at: float | None = None,
        deadline: float | None = None,
        step_claim: bool = False,
    ) -> bool: ...

    def name_step_claim(self, uid: str, namespace: str, name: str) -> None: ...


@dataclass
class RoundResult:
    """What one round did."""

    checked: int = 0  #: entries read from the API server
    cleaned: dict[str, Reason] = field(default_factory=dict)  #: UID -> why it was a ghost
    kept: dict[str, str] = field(default_factory=dict)  #: UID -> why it could not be decided (kept)
    unnamed: int = 0  #: entries without namespace/name (recovered from bare CDI specs): not checkable
    adopted: int = 0  #: of `checked`, claims adopted from NVIDIA's plugin known only to the ledger
    unnamed_adopted: tuple[str, ...] = ()  #: UIDs of adopted claims without namespace/name (kept)
    #: UID -> namespace/name of unnamed adopted claims found this round through the pods of this node
    named_by_pods: dict[str, str] = field(default_factory=dict)
    #: UID -> consecutive rounds no pod of this node referenced the unnamed adopted claim
    unreferenced: dict[str, int] = field(default_factory=dict)
    #: Why the pods of this node could not rule on the unnamed adopted claims (None: they could)
    pods_undecided: str | None = None
    #: Where this round's lookup of the claims the pods of this node use got its answer
    pods_sources: tuple[str, ...] = ()


class Reconciler:
    """Checks the node's checkpoint entries against the API server and cleans the ghosts."""

    def __init__(
        self,
        state: GhostState,
        api: ClaimSource,
        *,
        driver_name: str,
        pool_name: str,
        metrics: Metrics,
        interval: float = DEFAULT_INTERVAL_SECONDS,
        workers: int = RECONCILE_WORKERS,
        read_timeout: float | None = None,
        lookup: ClaimLookup | None = None,
    ) -> None:
        """`read_timeout`: seconds for each read of a round (None: the API client's request timeout).
        `lookup`: where the adopted claims without a name are looked for (the claims the pods of this
        node use); without it such claims are kept until kubelet names them."""
        self._state = state
        self._api = api
        self._lookup = lookup
        self._driver_name = driver_name
        self._pool_name = pool_name
        self._metrics = metrics
        self._interval = interval
        self._read_timeout = read_timeout
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="claim-reconcile")
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._rounds = 0
        self._rounds_cond = threading.Condition()
        self._failing: dict[str, str] = {}  # UIDs whose read failed last round: logged once
        self._unnamed_logged: set[str] = set()  # adopted claims without a name: logged once each
        self._unreferenced: dict[str, int] = {}  # unnamed adopted UID -> rounds no pod referenced it
        self._pods_failing: str | None = None  # why the last pod lookup failed: logged once

    # --- the loop ---

    def start(self) -> None:
        """A round now, then one every interval (or at `trigger()`), until `stop()`."""
        self._thread = threading.Thread(target=self._loop, name="claim-reconciler", daemon=True)
        self._thread.start()

    def trigger(self) -> None:
        """Start the next round now (tests, and the operator's future hooks)."""
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def rounds(self) -> int:
        """Rounds completed so far."""
        with self._rounds_cond:
            return self._rounds

    def wait_rounds(self, count: int, timeout: float) -> bool:
        """Wait until `count` rounds completed; False after `timeout` seconds."""
        with self._rounds_cond:
            return self._rounds_cond.wait_for(lambda: self._rounds >= count, timeout)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.run_round()
            except Exception:  # a bug in one round: the next one tries again
                if self._stopping.is_set():
                    break  # stopped mid-round: its reads were cancelled
                log.exception("claim reconciliation round failed")
            self._wake.wait(self._interval)
            self._wake.clear()

    # --- one round ---

    def run_round(self) -> RoundResult:
        """Check every entry once (see the module docs); the caller's thread waits for the round."""
        result = RoundResult()
        try:
            entries = list(self._state.entries().values())
            adopted = list(self._state.step_claims().values())
        except StateLockTimeout as err:
            log.warning("claim reconciliation skipped a round", extra={"fields": {"error": str(err)}})
            self._finish_round()
            return result
        named = [e for e in entries if checkable(e)]
        result.unnamed = len(entries) - len(named)
        adopted_named = [e for e in adopted if checkable(e)]
        unnamed = [e for e in adopted if not checkable(e)]
        if unnamed and self._lookup is not None:
            found = self._look_up_unnamed(unnamed, result)
            adopted_named += [found[e.uid] for e in unnamed if e.uid in found]
            unnamed = [e for e in unnamed if e.uid not in found and e.uid not in result.cleaned]
        else:
            self._unreferenced.clear()
        result.adopted = len(adopted_named)
        result.unnamed_adopted = tuple(sorted(e.uid for e in unnamed))
        self._report_unnamed_adopted(result.unnamed_adopted)
        checks = [(e, False) for e in named] + [(e, True) for e in adopted_named]
        outcomes = list(self._pool.map(lambda c: self._check(*c), checks))
        named = [e for e, _ in checks]
        for entry, (reason, kept) in zip(named, outcomes, strict=True):
            result.checked += 1
            if reason is not None:
                result.cleaned[entry.uid] = reason
            if kept is not None:
                result.kept[entry.uid] = kept
        self._report_failures(named, result.kept)
        self._finish_round()
        return result

    def _finish_round(self) -> None:
        self._metrics.claim_reconcile_rounds.inc()
        with self._rounds_cond:
            self._rounds += 1
            self._rounds_cond.notify_all()

    def _check(self, entry: ClaimEntry, adopted: bool = False) -> tuple[Reason | None, str | None]:
        """(why it was cleaned, why it was kept undecided) for one entry (`adopted`: known only to the
        takeover's ledger)."""
        try:
            cached = self._api.get_resource_claim(
                entry.namespace, entry.name, self._read_timeout, cached=True
            )
            if judge(entry, cached, driver_name=self._driver_name, pool_name=self._pool_name) is None:
                return None, None
            # the quorum read decides: a stale cache never cleans a live claim
            judged_at = time.monotonic()
            current = self._api.get_resource_claim(entry.namespace, entry.name, self._read_timeout)
        except KubeError as err:
            kind = failure_kind(err)
            self._metrics.claim_reconcile_failures.labels(reason=kind).inc()
            return None, f"{kind}: {err}"
        reason = judge(entry, current, driver_name=self._driver_name, pool_name=self._pool_name)
        if reason is None:
            log.debug("cache said ghost, quorum read says live", extra={"fields": {"claim": label(entry)}})
            return None, None
        try:
            cleaned = self._clean(entry, reason, judged_at, deadline=None, adopted=adopted)
        except ClaimError as err:
            return None, f"cleanup: {err}"
        return (reason if cleaned else None), None

    def _clean(
        self,
        entry: ClaimEntry,
        reason: Reason,
        judged_at: float,
        deadline: float | None,
        *,
        adopted: bool = False,
    ) -> bool:
        """Clean one ghost as an unprepare; False when its entry changed or the claim was prepared since
        `judged_at` (left alone)."""
        try:
            cleaned = self._state.clean_ghost(
                entry, judged_at=judged_at, deadline=deadline, step_claim=adopted
            )
        except ClaimError as err:
            self._metrics.claim_reconcile_failures.labels(reason="cleanup").inc()
            log.warning(
                "ghost claim cleanup failed; its entry stays",
                extra={"fields": {**_fields(entry), "reason": reason.value, "error": str(err)}},
            )
            raise
        if cleaned:
            self._metrics.claim_ghosts_cleaned.labels(reason=reason.value).inc()
            log.warning(
                "cleaned ghost claim",
                extra={
                    "fields": {
                        **_fields(entry),
                        "reason": reason.value,
                        "why": reason.description,
                        **({"adopted_from": "NVIDIA's plugin"} if adopted else {}),
                    }
                },
            )
        return cleaned

    # --- adopted claims without a name, looked for through the pods of this node ---

    def _look_up_unnamed(self, unnamed: Sequence[ClaimEntry], result: RoundResult) -> dict[str, ClaimEntry]:
        """Find the namespace/name of adopted claims NVIDIA 25.8.1 left unnamed (UID -> named entry).

        One lookup of the claims the pods of this node use (`takeover.node_claims`), then a quorum GET
        of each: a claim whose UID is an unnamed adopted one gets its name recorded in the takeover's
        ledger and is checked as a named one this round. A UID no complete lookup names in
        `UNREFERENCED_ROUNDS` consecutive rounds is released as kubelet's unprepare would
        (`Reason.UNREFERENCED`). A failed read or an incomplete lookup decides nothing and starts the
        count again.
        """
        assert self._lookup is not None
        uids = {e.uid for e in unnamed}
        judged_at = time.monotonic()
        seen = self._lookup.look(self._read_timeout)
        result.pods_sources = seen.sources
        if seen.error is not None:
            self._metrics.claim_reconcile_failures.labels(reason=failure_kind(seen.error)).inc()
        reads = list(self._pool.map(self._read_quietly, sorted(seen.names)))
        found: dict[str, ClaimEntry] = {}
        by_uid = {e.uid: e for e in unnamed}
        failure: tuple[KubeError, str] | None = None
        for (namespace, name), (claim, read_error) in zip(sorted(seen.names), reads, strict=True):
            if read_error is not None:
                failure = failure or (read_error, f"reading claim {namespace}/{name}")
                continue
            uid = lookup(claim, "metadata", "uid") if claim is not None else None
            if uid in uids and uid not in found:
                found[uid] = replace(by_uid[uid], namespace=namespace, name=name)
        self._record_names(found, result)
        if failure is not None:
            err, what = failure
            kind = failure_kind(err)
            self._metrics.claim_reconcile_failures.labels(reason=kind).inc()
            self._pods_undecided(result, Undecided(kind, f"{what}: {err}"))
            return found
        if seen.undecided is not None:
            self._pods_undecided(result, seen.undecided)
            return found
        self._pods_answered()
        self._release_unreferenced([by_uid[uid] for uid in sorted(uids - set(found))], judged_at, result)
        return found

    def _record_names(self, found: Mapping[str, ClaimEntry], result: RoundResult) -> None:
        """Record in the takeover's ledger the names found for unnamed adopted claims."""
        for uid, entry in found.items():
            try:
                self._state.name_step_claim(uid, entry.namespace, entry.name)
            except StateLockTimeout as exc:  # recorded by the next round (or kubelet's prepare)
                log.warning("cannot record an adopted claim's name", extra={"fields": {"error": str(exc)}})
            result.named_by_pods[uid] = label(entry)
            self._unreferenced.pop(uid, None)
        if found:
            log.info(
                "found the names of claims adopted from NVIDIA's plugin through the pods of this node",
                extra={"fields": {"claims": {uid: result.named_by_pods[uid] for uid in sorted(found)}}},
            )

    def _release_unreferenced(
        self, absent: Sequence[ClaimEntry], judged_at: float, result: RoundResult
    ) -> None:
        """Count one more round for each unnamed adopted claim no pod of this node references; release
        those unreferenced `UNREFERENCED_ROUNDS` rounds in a row (unless a prepare answered since
        `judged_at`, the time of this round's pod list, or the ledger changed)."""
        self._unreferenced = {e.uid: self._unreferenced.get(e.uid, 0) + 1 for e in absent}
        result.unreferenced = dict(self._unreferenced)
        for entry in absent:
            if self._unreferenced[entry.uid] < UNREFERENCED_ROUNDS:
                continue
            try:
                if self._clean(entry, Reason.UNREFERENCED, judged_at, deadline=None, adopted=True):
                    result.cleaned[entry.uid] = Reason.UNREFERENCED
                    self._unreferenced.pop(entry.uid, None)
            except ClaimError as err:
                result.kept[entry.uid] = f"cleanup: {err}"

    def _read_quietly(self, ref: tuple[str, str]) -> tuple[dict[str, Any] | None, KubeError | None]:
        """A quorum read of one claim a pod references: (the claim or None for 404, the error)."""
        try:
            return self._api.get_resource_claim(ref[0], ref[1], self._read_timeout), None
        except KubeError as err:
            return None, err

    def _pods_undecided(self, result: RoundResult, undecided: Undecided) -> None:
        """A lookup that cannot rule: nothing is concluded, the count of unreferenced rounds starts
        again; one log line while it stays undecided the same way (a pod whose generated claim is not
        named yet is a moment of a pod's start, not logged)."""
        result.pods_undecided = str(undecided)
        self._unreferenced.clear()
        if undecided.kind == "unresolved":
            return
        if self._pods_failing != undecided.kind:
            log.warning(
                "cannot look for the adopted claims without a name through the pods of this node; "
                "they are kept",
                extra={"fields": {"error": result.pods_undecided}},
            )
        self._pods_failing = undecided.kind

    def _pods_answered(self) -> None:
        if self._pods_failing is not None:
            log.info("the claims the pods of this node use can be read again")
        self._pods_failing = None

    def _report_unnamed_adopted(self, uids: Sequence[str]) -> None:
        """One line per adopted claim without namespace/name, the first round it is met."""
        new = [uid for uid in uids if uid not in self._unnamed_logged]
        if new and self._lookup is None:
            log.warning(
                "claims adopted from NVIDIA's plugin have no namespace/name (its checkpoint before 25.12 "
                "records none): they cannot be checked against the API server until kubelet prepares or "
                "unprepares them here; their devices stay held",
                extra={"fields": {"uids": new}},
            )
        elif new:
            log.warning(
                "claims adopted from NVIDIA's plugin have no namespace/name (its checkpoint before 25.12 "
                "records none): they are looked for through the pods of this node, and released once no "
                f"pod of this node has referenced them for {UNREFERENCED_ROUNDS} rounds",
                extra={"fields": {"uids": new}},
            )
        self._unnamed_logged = set(uids)  # those named or released since are forgotten

    def _report_failures(self, entries: Sequence[ClaimEntry], kept: Mapping[str, str]) -> None:
        """One line while the same claims keep failing: when the set changes, not every round."""
        failing = {uid: why for uid, why in kept.items() if not why.startswith("cleanup")}
        if set(failing) == set(self._failing):
            return
        if failing:
            by_uid = {e.uid: e for e in entries}
            log.warning(
                "cannot check claims against the API server; their entries stay",
                extra={
                    "fields": {
                        "claims": [f"{label(by_uid[uid])} ({uid})" for uid in sorted(failing)],
                        "error": next(iter(failing.values())),
                    }
                },
            )
        else:
            log.info("claims can be checked against the API server again")
        self._failing = failing

    # --- prepare-time check of the claims holding a new claim's devices ---

    def check_holders(self, ref: ClaimRef, holders: Sequence[Holder], deadline: float) -> frozenset[str]:
        """Read each holder now (quorum) within `deadline`: a ghost is cleaned, a live holder raises
        ClaimError naming both claims; returns the live holders allowed by their admin access."""
        tolerated: set[str] = set()
        for holder in holders:
            entry = holder.entry
            left = deadline - time.monotonic()
            if not checkable(entry) or left <= 0:
                raise ClaimError(held_error(ref, holder, live=False))
            judged_at = time.monotonic()
            try:
                claim = self._api.get_resource_claim(entry.namespace, entry.name, timeout=left)
            except KubeError as err:
                self._metrics.claim_reconcile_failures.labels(reason=failure_kind(err)).inc()
                raise ClaimError(held_error(ref, holder, live=False, failure=str(err))) from None
            reason = judge(entry, claim, driver_name=self._driver_name, pool_name=self._pool_name)
            if reason is not None:
                self._clean(entry, reason, judged_at, deadline, adopted=holder.adopted)
                continue
            assert claim is not None
            admin = admin_access_devices(claim, driver_name=self._driver_name, pool_name=self._pool_name)
            if holder.conflict is None and set(holder.devices) <= admin:
                tolerated.add(entry.uid)
                continue
            raise ClaimError(held_error(ref, holder))
        return frozenset(tolerated)


def _fields(entry: ClaimEntry) -> dict[str, object]:
    return {"namespace": entry.namespace, "name": entry.name, "uid": entry.uid, "state": entry.state.value}
