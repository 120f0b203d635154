"""The driver benchmark runs end to end in a tiny mode (its figures are not checked here), alone and
against a baseline commit; its report logic and its baseline set-up are checked on their own."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench" / "driver_bench.py"
CONSOLE_SCRIPT = Path(sys.executable).with_name("dra-gpu-kubelet-plugin")
TINY = ["--cycles", "20", "--overlap", "2x2", "--overlap-rounds", "1", "--memory-cycles", "0",
        "--restores", "1", "--floor-samples", "10", "--idle-seconds", "1"]  # fmt: skip
ROWS = (
    "process start -> registration answers GetInfo",
    "process start -> first ResourceSlice in the API server",
    "ResourceSlice deleted -> restored (1 deletions), max",
    "floor: gRPC round trip, unix socket, trivial servicer, p50",
    "floor: GET of a claim from the fake, as the plugin reads it, p50",
    "floor: total (gRPC round trip + claim GET)",
    "one fsync'd 600-byte write in the plugin's data directory, p50 (not in the floor)",
    "trivial servicer + claim GET + one fdatasync'd record (the least a durable prepare does), p50",
    "trivial servicer + claim GET + one fdatasync'd record (the least a durable prepare does), p99",
    "NodePrepareResources, 1 claim x 1 device (20 cycles), p50",
    "NodePrepareResources, 1 claim x 1 device (20 cycles), p99",
    "NodeUnprepareResources, 1 claim x 1 device (20 cycles), p99",
    "plugin CPU time (user + system) per prepare+unprepare cycle (20 cycles)",
    "fsync + fdatasync calls per prepare+unprepare cycle",
    "4 overlapping prepares (2 calls x 2 claims, exclusive, distinct GPUs; 1 rounds): wall time, max",
    "4 overlapping prepares (2 calls x 2 claims, exclusive, distinct GPUs; 1 rounds): failed claims",
    "RSS after start",
    "RSS after 4 overlapping prepares (max over the rounds)",
    "idle CPU, nothing to do (1 s): a bare gRPC Python server beside it",
    "idle CPU, nothing to do (1 s): the plugin",
)
needs_plugin = pytest.mark.skipif(
    not CONSOLE_SCRIPT.exists(), reason="console script not installed in this environment"
)


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("driver_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    sys.path.insert(0, str(BENCH.parent))  # where its parts are, as when it runs as a script
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
        sys.path.remove(str(BENCH.parent))
    return module


def rows(out: str) -> dict[str, list[str]]:
    """The table's rows by measurement: the other cells."""
    table = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("|---")]
    return {
        cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")] for line in table)
    }


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=180, check=False
    )


@needs_plugin
def test_bench_runs_in_tiny_mode_and_prints_every_row_with_its_target() -> None:
    proc = run_bench(*TINY)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = rows(proc.stdout)
    assert table["measurement"] == ["value", "target", "result"]
    for row in ROWS:
        assert row in table, proc.stdout
    assert table["process start -> registration answers GetInfo"][1:] in (
        ["<= 150 ms", "met"],
        ["<= 150 ms", "**missed**"],
    )
    assert table["NodePrepareResources, 1 claim x 1 device (20 cycles), p99"][0].endswith("x floor)")
    assert table[ROWS[7]][0].endswith("x floor)") and table[ROWS[8]][0].endswith("x floor)")  # durable floor
    failed = "4 overlapping prepares (2 calls x 2 claims, exclusive, distinct GPUs; 1 rounds): failed claims"
    assert table[failed] == ["0", "<= 0", "met"]


def git_checkout() -> bool:
    if shutil.which("git") is None:
        return False
    proc = subprocess.run(
        ["git", "-C", str(BENCH.parent), "rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    return proc.returncode == 0


def worktrees() -> str:
    command = ["git", "-C", str(BENCH.parent), "worktree", "list", "--porcelain"]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, check=True).stdout


@needs_plugin
@pytest.mark.skipif(not git_checkout(), reason="not a git checkout with a commit")
def test_bench_measures_a_baseline_commit_beside_the_current_tree_and_removes_its_worktree() -> None:
    before = worktrees()
    proc = run_bench(*TINY, "--baseline", "HEAD")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = rows(proc.stdout)
    assert table["measurement"] == ["current", "baseline HEAD", "current / baseline", "target", "result"]
    for row in ROWS:
        assert row in table, proc.stdout
    prepare = table["NodePrepareResources, 1 claim x 1 device (20 cycles), p50"]
    assert prepare[0].endswith("x floor)") and prepare[1].endswith("x floor)")
    assert float(prepare[2]) > 0  # current / baseline
    progress = [line for line in proc.stderr.splitlines() if line.startswith("run ")]
    assert progress == ["run 1/2: baseline", "run 2/2: current"]
    assert worktrees() == before


def test_bench_rejects_a_bad_overlap_shape() -> None:
    proc = run_bench("--overlap", "8")
    assert proc.returncode == 2
    assert "expected PODSxCLAIMS like 8x8" in proc.stderr


@pytest.mark.skipif(not git_checkout(), reason="not a git checkout with a commit")
def test_bench_rejects_a_baseline_that_names_no_commit() -> None:
    proc = run_bench("--baseline", "no-such-revision-here")
    assert proc.returncode == 2
    assert "--baseline: 'no-such-revision-here' names no commit" in proc.stderr


def test_a_baseline_tree_runs_as_a_module_with_its_sources_first_on_the_path(bench: ModuleType) -> None:
    tree = Path("/tmp/wt")
    command = bench.tree_command("baseline", tree, {"PYTHONPATH": "/elsewhere", "HOME": "/home/x"})
    assert command.argv == (sys.executable, "-m", "vke_gpu_dra")
    assert command.env["PYTHONPATH"].split(os.pathsep) == [
        "/tmp/wt/driver/src", "/tmp/wt/core/src", "/tmp/wt/kube/src", "/elsewhere",
    ]  # fmt: skip
    assert command.env["HOME"] == "/home/x"
    alone = bench.tree_command("baseline", tree, {})
    assert alone.env["PYTHONPATH"] == os.pathsep.join(
        ["/tmp/wt/driver/src", "/tmp/wt/core/src", "/tmp/wt/kube/src"]
    )


def test_a_child_that_imports_the_current_tree_is_refused_as_the_baseline(
    bench: ModuleType, tmp_path: Path
) -> None:
    for source in bench.TREE_SOURCES:
        (tmp_path / source).mkdir(parents=True)  # empty: the packages come from site-packages
    command = bench.tree_command("baseline", tmp_path, dict(os.environ))
    with pytest.raises(RuntimeError, match="not the code in"):
        bench.check_imports_from(command, tmp_path)


def test_strace_summary_counts_fsync_and_fdatasync_calls(bench: ModuleType) -> None:
    summary = """% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 80.00    0.000800          20        40           fsync
 20.00    0.000200          20        10         1 fdatasync
------ ----------- ----------- --------- --------- ----------------
100.00    0.001000          20        50         1 total
"""
    assert bench.parse_strace_summary(summary) == 50
    assert bench.parse_strace_summary(summary.splitlines()[0]) == 0


def test_report_takes_medians_over_runs_and_judges_floor_multiples(bench: ModuleType) -> None:
    target = bench.floor_times(1.2)
    runs = [[bench.Figure("prepare p50", value, "{:.2f} ms", target, floor=1.0)] for value in (1.1, 1.3, 1.5)]
    summary = bench.summarize(runs)["prepare p50"]
    assert (summary.value, summary.multiple) == (1.3, 1.3)
    assert summary.cell() == "1.30 ms (1.30x floor)"
    assert summary.result() == "**missed**"
    met = bench.summarize([[bench.Figure("prepare p50", 1.1, "{:.2f} ms", target, floor=1.0)]])
    assert met["prepare p50"].result() == "met"


def test_report_compares_with_the_baseline_and_says_what_was_not_measured(bench: ModuleType) -> None:
    limit = bench.at_most(4, "")
    current = bench.summarize(
        [[bench.Figure("fsyncs", 3.0, "{:.1f}", limit), bench.Figure("rss", 40, "{:.1f}")]]
    )
    baseline = bench.summarize(
        [[bench.Figure("fsyncs", None, "{:.1f}", limit), bench.Figure("rss", 80, "{:.1f}")]]
    )
    table = rows("\n".join(bench.table(current, baseline, "HEAD~1")))
    assert table["measurement"] == ["current", "baseline HEAD~1", "current / baseline", "target", "result"]
    assert table["fsyncs"] == ["3.0", "n/a", "", "<= 4", "met"]
    assert table["rss"] == ["40.0", "80.0", "0.50", "", ""]
