"""What the bench asks of the plugin as kubelet would: prepare/unprepare cycles, overlapping prepares,
ResourceSlice deletions, long runs for memory."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from vke_gpu_dra_testing.kubelet_client import Kubelet
from vke_gpu_dra_testing.plugin_env import NODE, wait_until

from .plugin import PluginRun
from .probes import claim_uid, rss_mib
from .settings import MEMORY_SAMPLE_EVERY, NAMESPACE, ROUND_S, WAIT_S, Ref
from .timed_fake import TimedFake


def claim_read_query(kubelet: Kubelet, fake: TimedFake, gpus: int) -> str:
    """One untimed prepare and unprepare; the query of the plugin's GET of the claim ('' for none)."""
    ref = (NAMESPACE, "warm-up", claim_uid(9, 3))
    fake.put_claims([ref], gpus)
    check_prepared(kubelet.prepare([ref]), [ref])
    reads = fake.claim_reads(ref[1])
    check_unprepared(kubelet.unprepare([ref]), [ref])
    fake.drop_claims([ref])
    if not reads:
        raise RuntimeError("the plugin prepared a claim without reading it from the API server")
    return urlsplit(reads[0]).query


def check_prepared(result: dict[str, Any], refs: list[Ref]) -> None:
    for _, name, uid in refs:
        entry = result.get(uid)
        if entry is None or entry["error"] or len(entry["devices"]) != 1:
            raise RuntimeError(f"prepare of {name} failed: {entry}")


def check_unprepared(result: dict[str, str], refs: list[Ref]) -> None:
    errors = {uid: result.get(uid) for _, _, uid in refs if result.get(uid) != ""}
    if errors:
        raise RuntimeError(f"unprepare failed: {errors}")


@dataclass
class Cycles:
    prepare: list[float] = field(default_factory=list)
    unprepare: list[float] = field(default_factory=list)


def run_cycles(kubelet: Kubelet, fake: TimedFake, gpus: int, count: int, *, kind: int, into: Cycles) -> None:
    """`count` cycles: a fresh allocated claim (exclusive) in the API, prepare, unprepare, claim deleted."""
    for n in range(count):
        refs = [(NAMESPACE, f"c{kind}-{n}", claim_uid(kind, n))]
        fake.put_claims(refs, gpus, first=n)
        started = time.perf_counter()
        result = kubelet.prepare(refs)
        into.prepare.append(time.perf_counter() - started)
        check_prepared(result, refs)
        started = time.perf_counter()
        unprepared = kubelet.unprepare(refs)
        into.unprepare.append(time.perf_counter() - started)
        check_unprepared(unprepared, refs)
        fake.drop_claims(refs)


@dataclass
class Overlap:
    walls: list[float] = field(default_factory=list)
    calls: list[float] = field(default_factory=list)
    failed: int = 0  # claims whose prepare failed
    rss: list[float] = field(default_factory=list)  # MiB, right after each round's prepares


def overlap_round(run: PluginRun, fake: TimedFake, gpus: int, shape: tuple[int, int], rnd: int) -> Overlap:
    """`pods` concurrent NodePrepareResources calls (one client thread each) of `claims` claims each;
    the claims get distinct GPUs when there are enough, else all have admin access."""
    kubelet = run.kubelet
    assert kubelet is not None
    pods, claims = shape
    per_pod = [
        [(NAMESPACE, f"o{rnd}-{p}-{c}", claim_uid(100 + rnd, p * claims + c)) for c in range(claims)]
        for p in range(pods)
    ]
    fake.put_claims([ref for refs in per_pod for ref in refs], gpus)
    kubelet.dra_channel()  # connected before the clock starts
    barrier = threading.Barrier(pods)
    spans: list[tuple[float, float]] = []
    failed: list[str] = []
    errors: list[BaseException] = []

    def pod(refs: list[Ref]) -> None:
        try:
            barrier.wait(WAIT_S)
            started = time.perf_counter()
            result = kubelet.prepare(refs)
            spans.append((started, time.perf_counter()))
            failed.extend(uid for _, _, uid in refs if (result.get(uid) or {"error": "no answer"})["error"])
        except BaseException as err:  # reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=pod, args=(refs,), daemon=True) for refs in per_pod]
    for t in threads:
        t.start()
    for t in threads:
        t.join(ROUND_S)
    if errors or len(spans) != pods:
        raise RuntimeError(f"overlap round {rnd} failed: {errors or 'calls did not finish'}")
    rss = rss_mib(run.proc.pid)
    for refs in per_pod:
        check_unprepared(kubelet.unprepare(refs), refs)
    fake.drop_claims([ref for refs in per_pod for ref in refs])
    wall = max(end for _, end in spans) - min(start for start, _ in spans)
    return Overlap([wall], [end - start for start, end in spans], len(failed), [rss])


def run_overlap(run: PluginRun, fake: TimedFake, gpus: int, shape: tuple[int, int], rounds: int) -> Overlap:
    total = Overlap()
    for rnd in range(rounds):
        one = overlap_round(run, fake, gpus, shape, rnd)
        total.walls += one.walls
        total.calls += one.calls
        total.failed += one.failed
        total.rss += one.rss
    return total


def slice_restores(fake: TimedFake, count: int) -> list[float]:
    """Delete the node's slice `count` times; seconds until the plugin created it again."""
    out = []
    for _ in range(count):
        if not wait_until(lambda: len(fake.slices_of(NODE)) == 1, WAIT_S, 0.001):
            raise RuntimeError("the node does not have exactly one ResourceSlice")
        name = fake.slices_of(NODE)[0]["metadata"]["name"]
        deleted = time.monotonic()
        fake.delete_slice(name)
        if not wait_until(lambda: fake.first_added_after(deleted) is not None, WAIT_S, 0.001):  # noqa: B023
            raise RuntimeError(f"slice {name} was not restored within {WAIT_S} s")
        restored = fake.first_added_after(deleted)
        assert restored is not None
        out.append(restored - deleted)
    return out


def memory_cycles(run: PluginRun, fake: TimedFake, gpus: int, count: int) -> list[float]:
    """RSS (MiB) before and after every MEMORY_SAMPLE_EVERY cycles."""
    assert run.kubelet is not None
    samples = [rss_mib(run.proc.pid)]
    done = 0
    while done < count:
        step = min(MEMORY_SAMPLE_EVERY, count - done)
        run_cycles(run.kubelet, fake, gpus, step, kind=1000 + done // MEMORY_SAMPLE_EVERY, into=Cycles())
        done += step
        samples.append(rss_mib(run.proc.pid))
    return samples
