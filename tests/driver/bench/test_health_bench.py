"""The health benchmark runs end to end in a tiny mode (its figures are not checked here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench" / "health_bench.py"


def test_bench_runs_and_prints_its_table() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--rounds", "1", "--window", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for row in (
        "| measurement | value | target | result |",
        "1.34.0: XID 79 -> GPU left out of the slice, max of 1",
        "1.36.0: XID 79 -> GPU tainted NoSchedule, max of 1",
        "1.36.0: -> allocatable again (1 s window), max of 1",
        "1.34.0: GPU lost (probe every 5 s) -> GPU left out of the slice",
    ):
        assert row in proc.stdout, proc.stdout
