"""The figures of the runs: nearest-rank percentiles, one Markdown table per release, the JSON."""

from __future__ import annotations

import argparse
import math
import os
import statistics
from collections.abc import Sequence
from typing import Any

from .runs import Run


def percentile(samples: Sequence[float], pct: float) -> float:
    """Nearest rank: the smallest sample with at least `pct` percent of the samples at or below it."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _p50_p99(samples: Sequence[float]) -> str:
    return f"{_ms(percentile(samples, 50))} / {_ms(percentile(samples, 99))}"


def failures(failed: dict[str, str]) -> str:
    if not failed:
        return "none"
    reasons = sorted(set(failed.values()))
    return f"{len(failed)}: {', '.join(failed)} ({'; '.join(reasons)})"


def figures(run: Run, args: argparse.Namespace) -> dict[str, str]:
    """One row per figure: its label and this run's value."""
    overhead = percentile(run.gpu, 50) - percentile(run.floor, 50)
    return {
        f"pod without claims (floor), create -> Running, p50 / p99 ({args.pods} pods)": _p50_p99(run.floor),
        f"pod with one GPU claim, create -> Running, p50 / p99 ({args.pods} pods)": _p50_p99(run.gpu),
        "claim overhead: GPU p50 - floor p50": _ms(overhead),
        "pod with one GPU claim, create -> bound to the node, p50 / p99": _p50_p99(run.gpu_bound),
        f"{args.burst} GPU pods at once: first create -> all Running": _ms(run.burst_gpu_all),
        f"{args.burst} GPU pods at once: per pod, p50 / p99": _p50_p99(run.burst_gpu),
        f"{args.burst} pods without claims at once: first create -> all Running": _ms(run.burst_floor_all),
        f"{args.burst} pods without claims at once: per pod, p50 / p99": _p50_p99(run.burst_floor),
        "pods whose claims the kubelet failed to prepare at first (kubelet.log)": failures(
            run.failed_prepares
        ),
        "load average (1 min) before / after": f"{run.load[0]:.2f} / {run.load[1]:.2f}",
    }


def table(release: str, runs: dict[str, Run], args: argparse.Namespace) -> str:
    rows = {name: figures(run, args) for name, run in runs.items()}
    labels = list(next(iter(rows.values())))
    lines = [
        f"kubelet {release} (containerd 2.1.9, runc 1.4.4, {os.cpu_count()} CPUs), "
        f"{args.gpus} simulated GPUs",
        "",
        "| figure | " + " | ".join(runs) + " |",
        "|---|" + "---|" * len(runs),
    ]
    lines += [f"| {label} | " + " | ".join(rows[name][label] for name in runs) + " |" for label in labels]
    return "\n".join(lines)


def as_json(run: Run) -> dict[str, Any]:
    def summary(samples: Sequence[float]) -> dict[str, Any]:
        return {"n": len(samples), "p50": percentile(samples, 50), "p99": percentile(samples, 99),
                "mean": statistics.fmean(samples), "samples": list(samples)}  # fmt: skip

    return {
        "floor": summary(run.floor), "gpu": summary(run.gpu), "gpu_bound": summary(run.gpu_bound),
        "overhead_p50": percentile(run.gpu, 50) - percentile(run.floor, 50),
        "burst_gpu": {**summary(run.burst_gpu), "all_running": run.burst_gpu_all},
        "burst_floor": {**summary(run.burst_floor), "all_running": run.burst_floor_all},
        "load": list(run.load), "failed_prepares": run.failed_prepares,
    }  # fmt: skip
