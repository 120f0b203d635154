"""Waiting for the signal that stops the process (SIGTERM from kubelet, SIGINT from a terminal).

The signal's arrival is carried by `signal.set_wakeup_fd`: the interpreter's C-level handler writes
the signal number to a pipe, from whichever thread the kernel picked, and the main thread blocks
reading that pipe. The Python-level handler does nothing, so nothing can deadlock at any instant:
a handler that set a `threading.Event` could run in the main thread while that thread held the
event's own lock (inside `Event.wait`), and a signal the kernel delivers to another thread (a
gRPC or API-client thread) never interrupts a main thread asleep in `Event.wait`. A signal that
arrives before `wait()` (during start-up) is kept in the pipe and ends the next `wait()` at once.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from types import FrameType, TracebackType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _ignore(signum: int, frame: FrameType | None) -> None:
    """Python-level handler: the wake-up pipe carries the signal, so there is nothing to do here."""


class StopSignals:
    """A context that catches the stop signals; `wait()` returns the first one caught.

    Main thread only (as `signal.signal` and `signal.set_wakeup_fd` are); on exit, the previous
    handlers and wake-up fd are put back.
    """

    def __init__(self, signals: Iterable[signal.Signals] = STOP_SIGNALS) -> None:
        self._signals = tuple(signals)
        self._read_fd = -1
        self._write_fd = -1
        self._previous_fd = -1
        self._installed = False
        self._previous: dict[signal.Signals, Any] = {}

    def __enter__(self) -> StopSignals:
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)  # set_wakeup_fd requires it
        try:
            self._previous_fd = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
            self._installed = True
            for s in self._signals:
                self._previous[s] = signal.signal(s, _ignore)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def wait(self) -> signal.Signals:
        """Block until one of the stop signals arrives (or arrived since `__enter__`)."""
        wanted = {int(s) for s in self._signals}
        while True:
            data = os.read(self._read_fd, 64)  # other signals with a Python handler land here too
            for number in data:
                if number in wanted:
                    return signal.Signals(number)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()
        if self._installed:
            signal.set_wakeup_fd(self._previous_fd)
            self._installed = False
        for fd in (self._read_fd, self._write_fd):
            if fd >= 0:
                os.close(fd)
        self._read_fd = self._write_fd = -1
