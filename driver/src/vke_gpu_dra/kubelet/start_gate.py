"""The plugin registers with kubelet before it is ready; kubelet's calls wait here for it.

Registration is the first thing the plugin does (kubelet finds it within milliseconds of the process
start); the slow parts of the start (the API server, discovery, the prepared claims) follow. A prepare or
unprepare that arrives meanwhile waits for the gate within its own deadline: it goes on once the state
is restored, or answers why not (the start failed, or the deadline came first) and kubelet retries.
"""

from __future__ import annotations

import threading
import time


class StartGate:
    """Open once the plugin can serve; `fail` when its start failed."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._failure: str | None = None

    def open(self) -> None:
        self._done.set()

    def fail(self, why: str) -> None:
        """The start failed (`why`): waiting calls answer it at once."""
        self._failure = why
        self._done.set()

    @property
    def is_open(self) -> bool:
        return self._done.is_set() and self._failure is None

    def wait(self, deadline: float) -> str | None:
        """Wait until the plugin can serve, by `deadline` (time.monotonic()); None when it can, else why
        not, for the call's answer."""
        if not self._done.wait(max(0.0, deadline - time.monotonic())):
            return "the plugin is still starting (restoring its prepared claims); kubelet retries"
        if self._failure is not None:
            return f"the plugin failed to start: {self._failure}"
        return None
