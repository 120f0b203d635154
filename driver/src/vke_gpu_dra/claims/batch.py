"""The batch runner: the node lock, batching, deadlines, and the one place where errors become answers.

Every prepare and unprepare runs under the node lock (`nodelock`, shared with any other plugin process
on this node, e.g. the other pod of a seamless upgrade). Waiting for it is bounded by the caller's
deadline (kubelet's, for gRPC calls). Calls that arrive together share the lock: the thread that gets
it (the leader) runs every queued operation on distinct claims as one batch, through the claim
lifecycle (`Phases`, implemented by `lifecycle.ClaimLifecycle`):

1. the checkpoint is read once;
2. each claim on its own: a completed prepare answers, a new one is admitted, an unprepare is done;
3. the checkpoint is written once, if an entry was removed or restored anew (a completed claim whose
   restore changed a step's record) or a claim about to change the node was admitted
   (`ClaimWork.durable_start`); the unprepares and the restored claims answer;
4. the admitted claims are set up, in parallel when there are several;
5. the checkpoint is written once with their PrepareCompleted entries (and without the entries of
   those rolled back), and they answer.

So a prepare that changes nothing outside the checkpoint (its devices answered from the base CDI spec)
costs one durable write, and concurrent prepares share theirs. Operations on the same claim run one
after the other, in two batches.

Every step of a batch runs under `answering`: what a step raises becomes the answer of the calls it
was for (a ClaimError as it is, anything else an error naming the claim), so a bug met by one claim
fails that claim only; the caller gets that answer as an exception.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, PreparedDevice

from ..nodelock import LockTimeout, NodeLock
from .checkpoint import ClaimEntry
from .step import ClaimWork, Node

log = logging.getLogger(__name__)

#: Threads setting up the claims of one batch in parallel.
SET_UP_THREADS: Final = 8


@dataclass(eq=False)
class Op:
    """One prepare or unprepare waiting for (or done by) a batch under the node lock."""

    kind: Literal["prepare", "unprepare"]
    ref: ClaimRef
    claim: Mapping[str, Any] | None
    deadline: float
    done: threading.Event = field(default_factory=threading.Event)
    answered: bool = False  # its result (or error) is final
    result: list[PreparedDevice] | None = None
    entry: ClaimEntry | None = None  # a prepare's PrepareCompleted entry, as answered
    error: BaseException | None = None
    changed: bool = False  # its checkpoint entry changed: removed (unprepare) or restored anew (prepare)
    work: ClaimWork | None = None  # a prepare admitted, to be set up
    rolled_back: bool = False  # a failed prepare whose changes were undone: its entry goes
    tolerated: frozenset[str] = frozenset()  # a prepare's holders checked live whose overlap is allowed
    expect: ClaimEntry | None = None  # a ghost cleanup: done only while the entry is still this one
    judged_at: float = 0.0  # ... and no prepare of the claim answered since (time.monotonic())
    step_claim: bool = False  # a ghost cleanup of a claim only the steps know (`Step.holders`)
    step_claim_cleaned: bool = False  # ... which the steps cleaned

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


def open_ops(ops: Sequence[Op]) -> list[Op]:
    return [op for op in ops if not op.answered]


class Phases(Protocol):
    """What a batch does to each claim (`lifecycle.ClaimLifecycle`); the caller holds the node lock."""

    def node(self) -> Node: ...

    def admit(self, op: Op, node: Node) -> None: ...

    def unprepare(self, op: Op, node: Node) -> None: ...

    def set_up(self, op: Op, node: Node) -> None: ...

    def complete(self, started: Sequence[Op], node: Node) -> None: ...

    def save(self, node: Node) -> None: ...


@contextlib.contextmanager
def answering(ops: Sequence[Op]) -> Iterator[None]:
    """Run a step for `ops`; what it raises becomes the answer of those not answered yet: a ClaimError as
    it is, anything else (a bug) an error naming the claim. The one catch-all of a prepare or unprepare:
    nothing a step raises leaves the batch, so the other claims go on."""
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


class BatchRunner:
    """Queues operations and runs them in batches under the node lock, through `phases`."""

    def __init__(self, lock: NodeLock, phases: Phases, checkpoint_path: Callable[[], str]) -> None:
        self._lock = lock
        self._phases = phases
        self._checkpoint_path = checkpoint_path
        self._queue: list[Op] = []
        self._queue_guard = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, op: Op) -> Op:
        """Queue `op` and wait until a batch under the node lock has done it; raises its error."""
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
                        self._run(self._take())
                except LockTimeout:
                    self._give_up(op)
                    break
            finally:
                self._lock.release_thread()
        if op.error is not None:
            raise op.error
        return op

    def waiting(self) -> int:
        """Operations queued and not taken by a batch yet."""
        with self._queue_guard:
            return len(self._queue)

    def _give_up(self, op: Op) -> None:
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

    def _take(self) -> list[Op]:
        with self._queue_guard:
            batch: list[Op] = []
            uids: set[str] = set()
            for op in self._queue:
                if op.ref.uid not in uids:  # the same claim twice: one after the other, in two batches
                    batch.append(op)
                    uids.add(op.ref.uid)
            for op in batch:
                self._queue.remove(op)
        return batch

    def _run(self, batch: list[Op]) -> None:
        phases = self._phases
        try:
            node: Node | None = None
            with answering(batch):
                node = phases.node()
            if node is None:
                return
            for op in open_ops(batch):  # 2.
                with answering([op]):
                    if op.kind == "prepare":
                        phases.admit(op, node)
                    else:
                        phases.unprepare(op, node)
            started = [op for op in open_ops(batch) if op.work is not None]
            removed = [op for op in open_ops(batch) if op.changed]
            durable = [op for op in started if op.work is not None and op.work.durable_start]
            self._save(node, [*removed, *durable])  # 3.
            for op in open_ops(batch):
                if op.kind == "unprepare":
                    op.answer(None)
                elif op.changed:  # a completed claim whose restore changed its entry
                    op.answer(op.result)
            started = open_ops(started)
            self._set_up_all(started, node)  # 4.
            rolled_back = [op for op in started if op.rolled_back]
            with answering(open_ops(started)):
                phases.complete(started, node)
            written = open_ops(started)
            self._save(node, [*written, *rolled_back])  # 5.
            for op in open_ops(written):
                assert op.work is not None
                op.answer(op.work.prepared)
        finally:
            for op in batch:
                if not op.answered:  # the batch stopped early: no caller waits for an answer that never comes
                    op.fail(RuntimeError(f"{op.kind} of claim {op.label} was not answered"))
                op.done.set()

    def _save(self, node: Node, ops: Sequence[Op]) -> None:
        """Write the checkpoint for `ops` (none: nothing to write); a disk failure fails each of them."""
        if not ops:
            return
        with answering(ops):
            try:
                self._phases.save(node)
            except OSError as exc:
                why = f"cannot write checkpoint {self._checkpoint_path()}: {exc}"
                failed = [op.fail(ClaimError(f"claim {op.label}: {why}")) for op in ops]
                if not any(failed):  # only rolled back claims: their entries stay for unprepare to remove
                    log.warning("%s", why)

    def _set_up_all(self, ops: Sequence[Op], node: Node) -> None:
        def set_up(op: Op) -> None:
            with answering([op]):
                self._phases.set_up(op, node)

        # Claims that change nothing on the node are set up here; the others, when several, in parallel.
        slow = [op for op in ops if op.work is not None and op.work.durable_start]
        for op in ops:
            if op not in slow or len(slow) == 1:
                set_up(op)
        if len(slow) <= 1:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=SET_UP_THREADS, thread_name_prefix="set-up")
            weakref.finalize(self, self._pool.shutdown, wait=False)
        list(self._pool.map(set_up, slow))
