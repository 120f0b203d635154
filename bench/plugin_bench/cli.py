"""The command line: `bench/driver_bench.py`'s options, the helper modes it starts itself in, the header
and the table."""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path

from . import __doc__ as DESCRIPTION
from .floor import serve_floor
from .fsyncs import in_process_fsyncs
from .report import summarize, table
from .runs import measure_all
from .settings import FLOOR_SAMPLES, HERE, IDLE_SECONDS
from .trees import (
    check_imports_from,
    compile_sources,
    current_command,
    resolve_commit,
    tree_command,
    worktree,
)


def shape(value: str) -> tuple[int, int]:
    pods, sep, claims = value.partition("x")
    if not sep or not pods.isdigit() or not claims.isdigit() or int(pods) < 1 or int(claims) < 1:
        raise argparse.ArgumentTypeError(f"expected PODSxCLAIMS like 8x8, got {value!r}")
    return int(pods), int(claims)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(DESCRIPTION or "").splitlines()[0])
    p.add_argument("--baseline", metavar="REV", help="also measure the plugin of commit REV (e.g. HEAD~1)")
    p.add_argument("--repeats", type=int, default=1, help="runs of each plugin, interleaved; medians (1)")
    p.add_argument("--cycles", type=int, default=1000, help="prepare/unprepare cycles timed (default 1000)")
    p.add_argument("--overlap", type=shape, default=(8, 8), help="concurrent calls x claims per call (8x8)")
    p.add_argument("--overlap-rounds", type=int, default=10, help="rounds of overlapping prepares (10)")
    p.add_argument(
        "--memory-cycles", type=int, default=10000, help="cycles between two RSS readings (10000; 0: none)"
    )
    p.add_argument("--restores", type=int, default=5, help="ResourceSlice deletions timed (5)")
    p.add_argument("--gpus", type=int, default=8, help="simulated GPUs (8)")
    p.add_argument(
        "--idle-seconds",
        type=float,
        default=IDLE_SECONDS,
        help=f"seconds left alone for idle CPU ({IDLE_SECONDS:g}; 0: none)",
    )
    p.add_argument("--floor-samples", type=int, default=FLOOR_SAMPLES, help="samples per floor part")
    p.add_argument("--floor-server", metavar="SOCKET", help=argparse.SUPPRESS)
    p.add_argument("--floor-work", nargs="+", metavar="URL PATH [DIR]", help=argparse.SUPPRESS)
    p.add_argument("--count-fsyncs", metavar="DIR", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.cycles < 1 or args.overlap_rounds < 1 or args.repeats < 1 or args.gpus < 1:
        p.error("--cycles, --overlap-rounds, --repeats and --gpus must be >= 1")
    if args.memory_cycles < 0 or args.restores < 0:
        p.error("--memory-cycles and --restores must be >= 0")
    if args.floor_samples < 1:
        p.error("--floor-samples must be >= 1")
    if args.baseline is not None:
        args.baseline_commit = resolve_commit(args.baseline)
        if args.baseline_commit is None:
            p.error(f"--baseline: {args.baseline!r} names no commit of the git repository of {HERE}")
    return args


def header(args: argparse.Namespace) -> str:
    pods, claims = args.overlap
    text = (
        f"driver bench: {args.gpus} simulated GPUs, {args.cycles} cycles, overlap {pods}x{claims} "
        f"x {args.overlap_rounds} rounds, {args.memory_cycles} memory cycles"
    )
    if args.baseline is not None:
        text += (
            f"; current = this working tree, baseline = {args.baseline} ({args.baseline_commit[:12]}); "
            f"{args.repeats} interleaved runs of each, medians"
        )
    elif args.repeats > 1:
        text += f"; medians of {args.repeats} runs"
    return text


def main(argv: list[str] | None = None, *, script: Path) -> int:
    """The bench, run as `script` (bench/driver_bench.py), which it also starts as its helpers
    (`--floor-server`, `--count-fsyncs`)."""
    args = parse_args(argv)
    args.script = script
    if args.floor_server:
        return serve_floor(args.floor_server, args.floor_work)
    if args.count_fsyncs:
        print(*in_process_fsyncs(Path(args.count_fsyncs)))
        return 0
    current = current_command()
    with contextlib.ExitStack() as stack:
        commands = [current]
        if args.baseline is not None:
            tree = stack.enter_context(worktree(args.baseline_commit))
            baseline = tree_command("baseline", tree, os.environ)
            check_imports_from(baseline, tree)
            commands = [baseline, current]
        for command in commands:
            compile_sources(command)
        runs, failed = measure_all(args, commands)
    print(header(args))
    print()
    base = summarize(runs["baseline"]) if "baseline" in runs else None
    for line in table(summarize(runs["current"]), base, args.baseline or ""):
        print(line)
    return 1 if failed else 0  # failed prepares are in the table too
