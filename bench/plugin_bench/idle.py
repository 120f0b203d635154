"""Idle CPU: what the plugin burns with nothing to do, beside a bare gRPC Python server (the floor's
trivial servicer in a process of its own) over the same seconds. Per thread, from the scheduler's own
accounting (`/proc/<pid>/task/<tid>/schedstat`, nanoseconds), not clock ticks."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .settings import WAIT_S

#: Settling time after the bare server answers and before the window opens.
SETTLE_S = 1.0


@dataclass(frozen=True)
class Idle:
    plugin_ms_per_s: float
    bare_ms_per_s: float
    seconds: float


def on_cpu_seconds(pid: int) -> float:
    """CPU time of every thread of process `pid` so far, in seconds."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):  # a thread that ended meanwhile
            continue
    return total / 1e9


def measure_idle(root: Path, pid: int, seconds: float, *, script: Path) -> Idle:
    """The plugin `pid` and a bare gRPC server (`script --floor-server`) left alone for `seconds`."""
    sock = root / "bare.sock"
    bare = subprocess.Popen(
        [sys.executable, str(script), "--floor-server", str(sock)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert bare.stdout is not None and bare.stdout.readline().strip() == "ready", "bare server failed"
        time.sleep(SETTLE_S)
        plugin_before, bare_before = on_cpu_seconds(pid), on_cpu_seconds(bare.pid)
        started = time.monotonic()
        time.sleep(seconds)
        plugin_after, bare_after = on_cpu_seconds(pid), on_cpu_seconds(bare.pid)
        span = time.monotonic() - started
    finally:
        bare.communicate(input="", timeout=WAIT_S)
    return Idle(1000 * (plugin_after - plugin_before) / span, 1000 * (bare_after - bare_before) / span, span)
