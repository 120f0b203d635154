"""Simulated devices made unhealthy for demos: the plugin reads a file it watches.

`<plugin data dir>/simulated-health` (on the node: /var/lib/kubelet/plugins/<driver>/simulated-health),
one line per device, `#` starts a comment:

    gpu-0 xid 79        # a fatal XID (an ignored XID, e.g. 13, changes nothing)
    gpu-1 lost          # NVML cannot reach the GPU
    gpu-2 unmonitored   # its events cannot be watched (informational)

A line holds while it is in the file; once removed, the device recovers after the recovery window,
as a real GPU does. The file is looked at when inotify says it changed (`file_events`), and every
`interval` seconds while a device is unhealthy (its recovery window runs); at rest the thread sleeps. Where
inotify cannot be had it is looked at every `interval` seconds. It is read when it changed (its inode,
size or modification time) or while a recovery window runs; a malformed line is logged and skipped.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from .file_events import FileEvents
from .monitor import HealthMonitor
from .policy import Change, HealthTracker

log = logging.getLogger(__name__)

FILE_NAME: Final = "simulated-health"


def parse(text: str, devices: Sequence[str]) -> tuple[dict[str, tuple[str, int | None]], list[str]]:
    """device -> (problem, xid) and one message per malformed line."""
    found: dict[str, tuple[str, int | None]] = {}
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        where = f"line {number} {raw.strip()!r}"
        if words[0] not in devices:
            problems.append(f"{where}: unknown device {words[0]!r} (devices: {', '.join(devices)})")
        elif len(words) == 3 and words[1] == "xid" and words[2].isdigit():
            found[words[0]] = ("xid", int(words[2]))
        elif len(words) == 2 and words[1] in ("lost", "unmonitored"):
            found[words[0]] = (words[1], None)
        else:
            problems.append(
                f"{where}: expected '<device> xid <number>', '<device> lost' or '<device> unmonitored'"
            )
    return found, problems


class SimulatedHealthFile:
    def __init__(
        self,
        path: Path,
        devices: Sequence[str],
        monitor: HealthMonitor,
        *,
        recovery_window: float,
        ignored_xids: frozenset[int],
        interval: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self._devices = list(devices)
        self._monitor = monitor
        self._interval = interval
        self._clock = clock
        # Each simulated GPU is its own "GPU" (no MIG).
        self.tracker = HealthTracker(
            {d: [d] for d in devices}, now=clock(), recovery_window=recovery_window, ignored_xids=ignored_xids
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reported: list[str] = []
        self._read: tuple[int, int, int] | bool | None = False  # the file as last read; False: never
        self._events: FileEvents | None = None

    def start(self) -> None:
        log.info(
            "simulated devices: write problems into the health file",
            extra={"fields": {"path": str(self.path)}},
        )
        self._events = FileEvents.open(self.path.parent, self.path.name)
        self._thread = threading.Thread(target=self._run, name="simulated-health", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        events = self._events
        if events is not None:
            events.wake()
        if self._thread is not None:
            self._thread.join(timeout)
        if events is not None and (self._thread is None or not self._thread.is_alive()):
            events.close()
            self._events = None

    def _run(self) -> None:
        events = self._events
        while not self._stop.is_set():
            self.poll()
            if events is None or events.ended:
                self._stop.wait(self._interval)
            elif any(h.problems for h in self.tracker.all()):
                events.wait(self._interval)  # a recovery window runs
            else:
                events.wait(None)  # at rest until the file changes

    def poll(self) -> None:
        """Read the file once and apply what it says; nothing to do while it is as it was last read and
        every device is healthy (no recovery window runs)."""
        seen = _identity(self.path)
        if seen is not True and seen == self._read and not any(h.problems for h in self.tracker.all()):
            return
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            text = ""
        except (OSError, UnicodeDecodeError) as err:  # what the file said last still holds
            log.warning(
                "cannot read the simulated health file",
                extra={"fields": {"path": str(self.path), "error": str(err)}},
            )
            return
        self._read = seen
        found, problems = parse(text, self._devices)
        if problems != self._reported:
            for problem in problems:
                log.warning("simulated health file: line skipped", extra={"fields": {"problem": problem}})
            self._reported = problems
        now = self._clock()
        changes: list[Change] = []
        for device in self._devices:
            kind, xid = found.get(device, ("", None))
            if kind == "lost":
                changes += self.tracker.lost(device, now)
                continue
            has = {p.kind for p in self.tracker.health(device).problems}
            held = kind == "xid" and xid is not None and not self.tracker.is_ignored(xid)
            # An XID the file still holds is not ended and raised again (a short window flapped it).
            if not (held and "xid" in has and "gpu-lost" not in has):
                changes += self.tracker.answered(device, now)  # ends what the window allows, then:
            if kind == "xid" and xid is not None:  # what the file still says holds
                changes += self.tracker.xid(device, xid, now)
            if kind == "unmonitored":
                changes += self.tracker.unmonitored(device, now)
            else:
                changes += self.tracker.monitored(device)
        self._monitor.apply(changes)


def _identity(path: Path) -> tuple[int, int, int] | bool | None:
    """The file's inode, size and modification time; None when it is not there; True when it cannot be
    looked at (then it is read, and the error said)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return True
    return (info.st_ino, info.st_size, info.st_mtime_ns)
