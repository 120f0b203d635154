"""The node-wide lock that serializes every prepare and unprepare across plugin processes.

During a seamless upgrade two plugin pods run on one node and kubelet may send any call to either
of them, so both share the checkpoint and the CDI specs. Each call takes this lock (an exclusive
`flock` on `<plugin-data-dir>/serialize.lock`, the file name of the reference Go helper), reads
the checkpoint, makes its change and writes it back before releasing the lock.

`flock` has no timeout, so the lock is polled without blocking until the caller's deadline (the
gRPC call's): a waiting call never outlives kubelet's deadline. Threads of one process queue on a
thread lock first, so only one of them polls the file lock at a time.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

LOCK_FILE: Final = "serialize.lock"
#: Poll interval of the file lock while another process holds it: from the first to the last value.
POLL_INITIAL_SECONDS: Final = 0.001
POLL_MAX_SECONDS: Final = 0.02


class LockTimeout(Exception):
    """The lock was not free before the deadline."""


class NodeLock:
    """Exclusive across processes (flock) and threads (a thread lock in front of it)."""

    def __init__(
        self,
        path: Path,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.path = path
        self._clock = clock
        self._sleep = sleep
        self._threads = threading.Lock()
        #: The lock file, open from the first lock on (each lock and unlock is then one flock call), and
        #: its inode: a file replaced since is opened again.
        self._fd: int | None = None
        self._ino = 0
        self._closer: weakref.finalize[[int], NodeLock] | None = None

    @contextlib.contextmanager
    def held(self, deadline: float) -> Iterator[None]:
        """Hold the lock; raises LockTimeout when it is not free by `deadline` (a `clock()` value)."""
        if not self.acquire_thread(deadline):
            raise LockTimeout(self._timeout_message())
        try:
            with self.file_held(deadline):
                yield
        finally:
            self.release_thread()

    def acquire_thread(self, deadline: float) -> bool:
        """Take the in-process part only (callers then take `file_held`); False at the deadline."""
        return self._threads.acquire(timeout=max(0.0, deadline - self._clock()))

    def release_thread(self) -> None:
        self._threads.release()

    @contextlib.contextmanager
    def file_held(self, deadline: float) -> Iterator[None]:
        """The cross-process part (caller holds the thread part); raises LockTimeout at the deadline."""
        fd = self._lock_file(deadline)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _timeout_message(self) -> str:
        return f"the node's prepare/unprepare lock {self.path} was not free before the call's deadline"

    def _open(self) -> int:
        if self._fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._fd, self._ino = fd, os.fstat(fd).st_ino
            self._closer = weakref.finalize(self, os.close, fd)
        return self._fd

    def _reopen(self) -> None:
        """Drop the open file (replaced on disk); the next lock opens the one there now."""
        if self._closer is not None:
            self._closer()  # closes it, once
        self._fd = self._closer = None

    def _lock_file(self, deadline: float) -> int:
        delay = POLL_INITIAL_SECONDS
        while True:
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                remaining = deadline - self._clock()
                if remaining <= 0:
                    raise LockTimeout(self._timeout_message()) from None
                self._sleep(min(delay, remaining))
                delay = min(delay * 2, POLL_MAX_SECONDS)
                continue
            try:
                same = os.stat(self.path).st_ino == self._ino
            except FileNotFoundError:
                same = False
            if same:
                return fd
            fcntl.flock(fd, fcntl.LOCK_UN)
            self._reopen()  # the file was replaced (or removed) meanwhile: lock the one that is there now


class StateLockTimeout(Exception):
    """The node lock stayed held by another call or process past the wait of a start-up or an
    inspection of the device state (a kubelet call answers its claims' errors instead)."""
