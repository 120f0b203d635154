"""The driver benchmark runs end to end in a tiny mode (its figures are not checked here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "driver_bench.py"
CONSOLE_SCRIPT = Path(sys.executable).with_name("dra-gpu-kubelet-plugin")


@pytest.mark.skipif(not CONSOLE_SCRIPT.exists(), reason="console script not installed in this environment")
def test_bench_runs_in_tiny_mode_and_prints_its_table() -> None:
    args = ["--cycles", "20", "--overlap", "2x2", "--overlap-rounds", "1", "--memory-cycles", "0",
            "--restores", "1", "--floor-samples", "10"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "| measurement | value | target | result |" in out
    for row in (
        "floor: total",
        "NodePrepareResources, 1 claim x 1 device, p99 (20 cycles)",
        "4 overlapping prepares (2 concurrent calls x 2 claims, 1 rounds): wall time",
        "process start -> registration answers GetInfo",
        "process start -> first ResourceSlice created",
        "ResourceSlice deleted -> restored",
        "RSS after start",
    ):
        assert row in out, out


def test_bench_rejects_a_bad_overlap_shape() -> None:
    command = [sys.executable, str(BENCH), "--overlap", "8"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "expected PODSxCLAIMS like 8x8" in proc.stderr
