"""The table's rows of one run: each figure with its unit, its target and the floor it is a multiple of."""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass

from .floor import Floor
from .fsyncs import FsyncCount
from .idle import Idle
from .probes import percentile
from .settings import (
    CPU_PER_CYCLE_MS,
    FIRST_SLICE_MS,
    FSYNCS_PER_CYCLE,
    GET_INFO_MS,
    IDLE_X,
    OVERLAP_WALL_MS,
    PREPARE_P50_X,
    PREPARE_P99_X,
    RESTORE_MS,
    RSS_GROWTH_MIB,
    RSS_OVERLAP_MIB,
    RSS_START_MIB,
)
from .workloads import Cycles, Overlap


@dataclass(frozen=True)
class Target:
    limit: float
    text: str  # as printed: "<= 150 ms", "<= 1.2x floor"
    of_floor: bool = False  # the limit applies to the value as a multiple of the floor
    strict: bool = False  # "<" rather than "<="

    def met(self, value: float, multiple: float | None) -> bool:
        x = multiple if self.of_floor else value
        if x is None:
            return False
        return x < self.limit if self.strict else x <= self.limit


def at_most(limit: float, unit: str) -> Target:
    return Target(limit, f"<= {limit:g} {unit}".rstrip())


def below(limit: float, unit: str) -> Target:
    return Target(limit, f"< {limit:g} {unit}".rstrip(), strict=True)


def floor_times(limit: float) -> Target:
    return Target(limit, f"<= {limit:g}x floor", of_floor=True)


@dataclass(frozen=True)
class Figure:
    """One row of the table, from one run."""

    label: str
    value: float | None  # in the unit of `fmt`; None: not measured
    fmt: str  # "{:.2f} ms"
    target: Target | None = None
    floor: float | None = None  # shown as a multiple of this floor (same unit)
    note: str = ""
    compared: bool = True  # False: no current / baseline ratio (a count or a difference near 0)


def to_ms(seconds: float) -> float:
    return seconds * 1000


@dataclass
class Measured:
    floor: Floor
    get_info_s: float
    first_slice_s: float
    cycles: Cycles
    cpu_s: float
    fsyncs: FsyncCount
    overlap: Overlap
    restores: list[float]
    rss_start: float
    rss_samples: list[float]
    idle: Idle | None = None


MS = "{:.2f} ms"
MIB = "{:.1f} MiB"


def lifecycle_figures(m: Measured, restores: int) -> list[Figure]:
    out = [
        Figure("process start -> registration answers GetInfo", to_ms(m.get_info_s), MS,
               at_most(GET_INFO_MS, "ms")),
        Figure("process start -> first ResourceSlice in the API server", to_ms(m.first_slice_s), MS,
               at_most(FIRST_SLICE_MS, "ms")),
    ]  # fmt: skip
    if restores:
        what = f"ResourceSlice deleted -> restored ({restores} deletions)"
        out += [
            Figure(f"{what}, median", to_ms(statistics.median(m.restores)), MS),
            Figure(f"{what}, max", to_ms(max(m.restores)), MS, below(RESTORE_MS, "ms")),
        ]
    return out


def floor_figures(m: Measured) -> list[Figure]:
    f = m.floor
    floor = to_ms(f.total_s)
    get = "trivial servicer doing the claim GET, as one round trip (not the floor)"
    durable = "trivial servicer + claim GET + one fdatasync'd record (the least a durable prepare does)"
    return [
        Figure("floor: gRPC round trip, unix socket, trivial servicer, p50", to_ms(f.grpc_s), MS),
        Figure("floor: GET of a claim from the fake, as the plugin reads it, p50", to_ms(f.http_s), MS,
               note=f.read_kind),
        Figure("floor: total (gRPC round trip + claim GET)", floor, MS),
        Figure("one fsync'd 600-byte write in the plugin's data directory, p50 (not in the floor)",
               to_ms(f.fsync_s), MS),
        Figure(f"{get}, p50", to_ms(f.get_p50_s), MS, floor=floor),
        Figure(f"{durable}, p50", to_ms(f.durable_p50_s), MS, floor=floor),
        Figure(f"{durable}, p99", to_ms(f.durable_p99_s), MS, floor=floor),
    ]  # fmt: skip


def prepare_figures(m: Measured) -> list[Figure]:
    c, floor = m.cycles, to_ms(m.floor.total_s)
    n = len(c.prepare)
    what = f"1 claim x 1 device ({n} cycles)"
    return [
        Figure(f"NodePrepareResources, {what}, p50", to_ms(percentile(c.prepare, 50)), MS,
               floor_times(PREPARE_P50_X), floor),
        Figure(f"NodePrepareResources, {what}, p99", to_ms(percentile(c.prepare, 99)), MS,
               floor_times(PREPARE_P99_X), floor),
        Figure(f"NodeUnprepareResources, {what}, p50", to_ms(percentile(c.unprepare, 50)), MS),
        Figure(f"NodeUnprepareResources, {what}, p99", to_ms(percentile(c.unprepare, 99)), MS),
        Figure(f"plugin CPU time (user + system) per prepare+unprepare cycle ({n} cycles)",
               to_ms(m.cpu_s / n), MS, at_most(CPU_PER_CYCLE_MS, "ms")),
        Figure("fsync + fdatasync calls per prepare+unprepare cycle", m.fsyncs.per_cycle, "{:.1f}",
               at_most(FSYNCS_PER_CYCLE, ""), note=m.fsyncs.how),
    ]  # fmt: skip


def overlap_figures(m: Measured, shape: tuple[int, int], gpus: int) -> list[Figure]:
    pods, claims = shape
    o = m.overlap
    sharing = "exclusive, distinct GPUs" if pods * claims <= gpus else f"admin access, sharing {gpus} GPUs"
    rounds = len(o.walls)
    what = (
        f"{pods * claims} overlapping prepares ({pods} calls x {claims} claims, {sharing}; {rounds} rounds)"
    )
    return [
        Figure(f"{what}: wall time, median", to_ms(statistics.median(o.walls)), MS),
        Figure(f"{what}: wall time, max", to_ms(max(o.walls)), MS, below(OVERLAP_WALL_MS, "ms")),
        Figure(f"{what}: per-call latency, p50", to_ms(percentile(o.calls, 50)), MS),
        Figure(f"{what}: per-call latency, p99", to_ms(percentile(o.calls, 99)), MS),
        Figure(f"{what}: failed claims", o.failed, "{:.0f}", at_most(0, ""), compared=False),
    ]  # fmt: skip


def memory_figures(m: Measured, shape: tuple[int, int], memory_cycles: int) -> list[Figure]:
    pods, claims = shape
    out = [
        Figure("RSS after start", m.rss_start, MIB, at_most(RSS_START_MIB, "MiB")),
        Figure(f"RSS after {pods * claims} overlapping prepares (max over the rounds)",
               max(m.overlap.rss), MIB, at_most(RSS_OVERLAP_MIB, "MiB")),
    ]  # fmt: skip
    if memory_cycles:
        first, last = m.rss_samples[0], m.rss_samples[-1]
        out += [
            Figure(f"RSS before {memory_cycles} more prepare/unprepare cycles", first, MIB),
            Figure("RSS after them", last, MIB),
            Figure("RSS after them, max of the samples", max(m.rss_samples), MIB),
            Figure(f"RSS growth over the {memory_cycles} cycles", last - first, "{:+.1f} MiB",
                   below(RSS_GROWTH_MIB, "MiB"), compared=False),
        ]  # fmt: skip
    return out


def idle_figures(m: Measured) -> list[Figure]:
    if m.idle is None:
        return []
    what = f"idle CPU, nothing to do ({m.idle.seconds:.0f} s)"
    return [
        Figure(f"{what}: a bare gRPC Python server beside it", m.idle.bare_ms_per_s, "{:.3f} ms/s"),
        Figure(f"{what}: the plugin", m.idle.plugin_ms_per_s, "{:.3f} ms/s", floor_times(IDLE_X),
               m.idle.bare_ms_per_s),
    ]  # fmt: skip


def figures(m: Measured, args: argparse.Namespace) -> list[Figure]:
    return [
        *lifecycle_figures(m, args.restores),
        *idle_figures(m),
        *floor_figures(m),
        *prepare_figures(m),
        *overlap_figures(m, args.overlap, args.gpus),
        *memory_figures(m, args.overlap, args.memory_cycles),
    ]
