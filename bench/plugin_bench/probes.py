"""Readings of a process and of samples: percentiles, resident memory, CPU time, timed calls; claim UIDs."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path


def percentile(samples: list[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of all threads of process `pid` so far (`/proc/<pid>/stat` utime, stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # fields 14 and 15 of stat


def claim_uid(kind: int, n: int) -> str:
    return f"00000000-0000-4000-{8000 + kind:04d}-{n:012d}"


def time_calls(call: Callable[[], object], samples: int) -> list[float]:
    for _ in range(min(20, samples)):
        call()
    out = []
    for _ in range(samples):
        started = time.perf_counter()
        call()
        out.append(time.perf_counter() - started)
    return out
