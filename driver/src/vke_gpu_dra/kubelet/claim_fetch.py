"""Reads the ResourceClaims of one kubelet call concurrently, within that call's deadline.

kubelet cancels a NodePrepareResources call after 45 s and ignores a late answer. Every claim
read is bounded by what is left of the call's deadline (less a margin to build and send the
answer), the reads of one call run side by side on a shared, bounded pool, and the caller waits
for them no longer than the deadline allows: a read that has not finished by then becomes that
claim's error ("the API server did not answer in time") and the others are answered normally.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol

from vke_gpu_dra_core.device_model import ClaimError, ClaimRef

from ..api_errors import KubeError

#: Threads reading claims, shared by all calls (the API client's pool has room for them).
FETCH_WORKERS = 32
#: Budget of a call that carries no deadline (kubelet always sets one: 45 s).
DEFAULT_BUDGET = 45.0
#: Most of the time kept back from the deadline to finish and send the answer.
ANSWER_MARGIN = 1.0


class ClaimReader(Protocol):
    """Reads ResourceClaims from the API server; None when the claim does not exist."""

    def get_resource_claim(
        self, namespace: str, name: str, timeout: float | None = None
    ) -> dict[str, Any] | None: ...


class _Context(Protocol):
    def time_remaining(self) -> float | None: ...


@dataclass(frozen=True)
class Deadline:
    """When the answer must be sent (time.monotonic()), with the margin already taken off."""

    at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        margin = min(ANSWER_MARGIN, max(seconds, 0.0) * 0.2)
        return cls(time.monotonic() + seconds - margin)

    @classmethod
    def of(cls, context: _Context | None) -> Deadline:
        """The deadline of a gRPC call (`context.time_remaining()`), DEFAULT_BUDGET without one."""
        remaining = context.time_remaining() if context is not None else None
        return cls.after(DEFAULT_BUDGET if remaining is None else remaining)

    def remaining(self) -> float:
        return max(self.at - time.monotonic(), 0.0)


def _late(ref: ClaimRef) -> ClaimError:
    return ClaimError(
        f"claim {ref.namespace}/{ref.name}: the API server did not answer in time "
        "(kubelet's deadline); kubelet retries"
    )


def _api_failure(ref: ClaimRef, err: KubeError) -> ClaimError:
    where = f"claim {ref.namespace}/{ref.name}"
    if err.timed_out:
        return _late(ref)
    if err.unreachable:
        return ClaimError(f"{where}: cannot reach the API server: {err.message}")
    return ClaimError(f"{where}: the API server refused to read it: {err}")


class FetchResult:
    """One claim's read: `result()` is the claim (None if it does not exist) or raises ClaimError."""

    def __init__(self, ref: ClaimRef, future: Future[dict[str, Any] | None]) -> None:
        self._ref = ref
        self._future = future

    def result(self) -> dict[str, Any] | None:
        if self._future.cancelled() or not self._future.done():
            raise _late(self._ref)
        try:
            return self._future.result(timeout=0)
        except KubeError as err:
            raise _api_failure(self._ref, err) from None


class ClaimFetcher:
    """Concurrent, deadline-bounded claim reads on a pool of `workers` threads."""

    def __init__(self, reader: ClaimReader, workers: int = FETCH_WORKERS) -> None:
        self._reader = reader
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="claim-read")

    def _read(self, ref: ClaimRef, deadline: Deadline) -> dict[str, Any] | None:
        left = deadline.remaining()  # queued behind other calls' reads: what is left now
        if left <= 0:
            raise KubeError(0, "Timeout", "no time left before kubelet's deadline")
        return self._reader.get_resource_claim(ref.namespace, ref.name, timeout=left)

    def fetch(self, refs: Sequence[ClaimRef], deadline: Deadline) -> dict[str, FetchResult]:
        """Read all `refs` (distinct UIDs) side by side; returns by `deadline` at the latest. One claim (a
        pod's usual call) is read in the calling thread, its request bounded by the same deadline."""
        if len(refs) == 1:
            ref = refs[0]
            read: Future[dict[str, Any] | None] = Future()
            try:
                read.set_result(self._read(ref, deadline))
            except Exception as err:  # kept for `result()`, as a pooled read keeps it
                read.set_exception(err)
            return {ref.uid: FetchResult(ref, read)}
        futures = {ref.uid: (ref, self._pool.submit(self._read, ref, deadline)) for ref in refs}
        wait([f for _, f in futures.values()], timeout=deadline.remaining())
        for _, future in futures.values():
            future.cancel()  # not started yet: it never will (no-op for finished or running reads)
        return {uid: FetchResult(ref, future) for uid, (ref, future) in futures.items()}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
