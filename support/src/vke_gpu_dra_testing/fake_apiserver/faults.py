"""What a test makes the server do wrong: injected error answers (`inject_fault`), requests held before
they are answered (`hang`, `slow`, `hold`)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from .errors import ApiError
from .store import Store


@dataclass
class Fault:
    method: str
    path_contains: str
    code: int
    remaining: int


@dataclass
class Hold:
    """Matching requests wait before they are answered: until `release` is set (None: never),
    or `delay` seconds when given. `waiting` counts the requests held right now."""

    method: str
    path_contains: str
    release: threading.Event | None = None
    delay: float | None = None
    waiting: int = 0
    seen: int = 0


class FaultControls(Store):
    """The faults and holds a test sets, and how a request meets them."""

    def __init__(self) -> None:
        super().__init__()
        self.faults: list[Fault] = []
        self.holds: list[Hold] = []

    def inject_fault(self, method: str, path_contains: str, code: int, times: int = 1) -> None:
        with self.cond:
            self.faults.append(Fault(method, path_contains, code, times))

    def hang(self, method: str, path_contains: str) -> Hold:
        """Matching requests are accepted and never answered (until the server stops)."""
        return self._hold(Hold(method, path_contains))

    def slow(self, method: str, path_contains: str, seconds: float) -> Hold:
        """Matching requests are answered after `seconds`."""
        return self._hold(Hold(method, path_contains, delay=seconds))

    def hold(self, method: str, path_contains: str, release: threading.Event) -> Hold:
        """Matching requests are answered once `release` is set."""
        return self._hold(Hold(method, path_contains, release=release))

    def _hold(self, hold: Hold) -> Hold:
        with self.cond:
            self.holds.append(hold)
        return hold

    def unhold(self) -> None:
        """Answer held requests now and hold no more."""
        with self.cond:
            for hold in self.holds:
                hold.release = hold.release or threading.Event()
                hold.release.set()
            self.holds.clear()
            self.cond.notify_all()

    def wait_held(self, hold: Hold) -> bool:
        """Wait (bounded) until the held requests of `hold` are answered or dropped."""
        deadline = time.monotonic() + 10
        with self.cond:
            while hold.waiting and not self.closing and time.monotonic() < deadline:
                self.cond.wait(0.05)
            return hold.waiting == 0

    # --- what a request meets ---

    def _admit(self, method: str, path: str) -> Hold | None:
        """Record a request (its method and path with query); raise the injected fault it meets, if any;
        the hold it meets, if any."""
        with self.cond:
            self.requests.append((method, path))
            for fault in self.faults:
                if fault.remaining and fault.method == method and fault.path_contains in path:
                    fault.remaining -= 1
                    raise ApiError(fault.code, "InternalError", "injected fault")
            return next((h for h in self.holds if h.method == method and h.path_contains in path), None)

    def _hold_request(self, hold: Hold) -> bool:
        """Hold one request as `hold` says; False when the server stops first."""
        until = None if hold.delay is None else time.monotonic() + hold.delay
        with self.cond:
            hold.waiting += 1
            hold.seen += 1
            self.cond.notify_all()
            try:
                while not self.closing:
                    if hold.release is not None and hold.release.is_set():
                        return True
                    if until is not None and time.monotonic() >= until:
                        return True
                    self.cond.wait(0.02)
                return False
            finally:
                hold.waiting -= 1
                self.cond.notify_all()
