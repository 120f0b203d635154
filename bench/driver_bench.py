"""Kubelet-plugin benchmark: the real plugin process against the fake API server and a kubelet-like client.

Starts `dra-gpu-kubelet-plugin` (console entry point, simulated mode, 8 GPUs) against the project's
HTTP fake of the Kubernetes API on 127.0.0.1, talks to it over its unix sockets like kubelet does,
and prints one Markdown table: NodePrepareResources latency (1 claim x 1 device, a fresh allocated
claim per cycle), overlapping prepares, start-up, ResourceSlice restoration, resident memory, and
the floor measured in the same run (gRPC round trip over a unix socket + one HTTP GET to the fake
+ as many fsync'd small writes as a prepare does fsyncs).

Run from the repository root: `python bench/driver_bench.py [--cycles N] [--overlap PxC]
[--memory-cycles N]`. The exit code is 0 when every call succeeded (targets missed are reported in
the table, not as failures).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import http.client
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from vke_gpu_dra.kubelet._proto.dra.v1 import api_pb2 as dra_pb2
from vke_gpu_dra.kubelet._proto.dra.v1 import api_pb2_grpc as dra_grpc
from vke_gpu_dra.kubelet._proto.pluginregistration.v1 import api_pb2 as reg_pb2
from vke_gpu_dra.kubelet._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from vke_gpu_dra.kubelet.registration import registration_socket_name
from vke_gpu_dra_core import facts
from vke_gpu_dra_testing.fake_apiserver import TOKEN, FakeAPIServer
from vke_gpu_dra_testing.kubelet_client import Kubelet
from vke_gpu_dra_testing.plugin_env import NODE, claim, plugin_args, wait_until

CONSOLE_SCRIPT = Path(sys.executable).with_name("dra-gpu-kubelet-plugin")
NAMESPACE = "default"
#: Upper bound for any single wait (start-up, a restored slice, a stopping process).
WAIT_S = 30.0
#: Deadline for a whole overlap round (kubelet's own call timeout is 45 s).
ROUND_S = 45.0
MEMORY_SAMPLE_EVERY = 1000
FLOOR_SAMPLES = 300
SMALL_WRITE = b"x" * 600  # about the size of a one-claim checkpoint or CDI spec

Ref = tuple[str, str, str]  # (namespace, name, uid) as kubelet sends a claim


# ------------------------------------------------------------------------------------------- helpers


def percentile(samples: list[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def claim_uid(kind: int, n: int) -> str:
    return f"00000000-0000-4000-{8000 + kind:04d}-{n:012d}"


class TimedFake(FakeAPIServer):
    """The fake API server, remembering when (monotonic clock) each watch event was emitted."""

    def __init__(self) -> None:
        super().__init__()
        self.emitted: list[tuple[float, str, str]] = []  # (time, ADDED/MODIFIED/DELETED, name)

    def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        self.emitted.append((time.monotonic(), kind, obj["metadata"]["name"]))
        super()._emit(kind, obj)

    def first_added_after(self, since: float) -> float | None:
        with self.cond:
            return next((t for t, kind, _ in self.emitted if kind == "ADDED" and t >= since), None)

    def put_claims(self, refs: list[Ref], gpus: int) -> None:
        for i, (_, name, uid) in enumerate(refs):
            # more claims than GPUs: with admin access, as monitoring claims may share a device
            self.add_claim(claim(name, uid, f"gpu-{i % gpus}", admin_access=True))

    def drop_claims(self, refs: list[Ref]) -> None:
        with self.cond:
            for namespace, name, _ in refs:
                self.claims.pop((namespace, name), None)
            self.requests.clear()


# ----------------------------------------------------------------------------------- the floor


class TrivialDRA(dra_grpc.DRAPluginServicer):
    """Answers like the plugin (one device per claim) without doing anything."""

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        response = dra_pb2.NodePrepareResourcesResponse()
        for c in request.claims:
            response.claims[c.uid].devices.add(
                request_names=["gpu"], pool_name=NODE, device_name="gpu-0",
                cdi_device_ids=[f"{facts.CDI_VENDOR}/{facts.CDI_CLASS_CLAIM}={c.uid}-gpu-0"],
            )  # fmt: skip
        return response


def serve_floor(socket_path: str) -> int:
    """`--floor-server`: a trivial DRA servicer in its own process, until stdin closes."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    dra_grpc.add_DRAPluginServicer_to_server(TrivialDRA(), server)
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    print("ready", flush=True)
    sys.stdin.read()
    server.stop(0).wait()
    return 0


def time_calls(call: Callable[[], object], samples: int) -> list[float]:
    for _ in range(min(20, samples)):
        call()
    out = []
    for _ in range(samples):
        started = time.perf_counter()
        call()
        out.append(time.perf_counter() - started)
    return out


def grpc_floor(root: Path, samples: int) -> float:
    sock = root / "floor.sock"
    proc = subprocess.Popen(
        [sys.executable, __file__, "--floor-server", str(sock)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", "floor server failed"
        with grpc.insecure_channel(f"unix:{sock}") as ch:
            stub = dra_grpc.DRAPluginStub(ch)
            request = dra_pb2.NodePrepareResourcesRequest(
                claims=[dra_pb2.Claim(namespace=NAMESPACE, name="c", uid=claim_uid(9, 0))]
            )
            call = lambda: stub.NodePrepareResources(request, timeout=10)  # noqa: E731
            return statistics.median(time_calls(call, samples))
    finally:
        proc.communicate(input="", timeout=WAIT_S)


def http_floor(fake: TimedFake, samples: int) -> float:
    ref = (NAMESPACE, "floor-claim", claim_uid(9, 1))
    fake.put_claims([ref], 1)
    host, port = fake.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    path = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims/{ref[1]}"
    headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"}

    def get() -> None:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        response.read()
        assert response.status == 200, response.status

    try:
        return statistics.median(time_calls(get, samples))
    finally:
        conn.close()
        fake.drop_claims([ref])


@contextlib.contextmanager
def counting_fsyncs() -> Iterator[list[int]]:
    calls: list[int] = []
    real = os.fsync

    def counted(fd: int) -> None:
        calls.append(fd)
        real(fd)

    os.fsync = counted  # type: ignore[assignment]
    try:
        yield calls
    finally:
        os.fsync = real


def count_fsyncs(root: Path, gpus: int) -> tuple[int, int]:
    """fsyncs of one prepare and one unprepare of a 1-device claim, counted on the real DeviceState."""
    from vke_gpu_dra.state import DeviceState  # noqa: PLC0415
    from vke_gpu_dra_core.device_model import ClaimRef  # noqa: PLC0415
    from vke_gpu_dra_core.discovery.simulated import SimulatedSource  # noqa: PLC0415

    devices = SimulatedSource(gpus, "NVIDIA A30", NODE).discover().devices
    state = DeviceState(
        driver_name=facts.DRIVER_NAME, pool_name=NODE, devices=devices,
        cdi_root=root / "count-cdi", plugin_data_dir=root / "count-data",
    )  # fmt: skip
    uid = claim_uid(9, 2)
    ref = ClaimRef(NAMESPACE, "count", uid)
    with counting_fsyncs() as prepared:
        state.prepare(ref, claim("count", uid, "gpu-0"))
    with counting_fsyncs() as unprepared:
        state.unprepare(ref)
    return len(prepared), len(unprepared)


def fsync_floor(directory: Path, count: int, samples: int) -> float:
    """Median time of `count` fsync'd small writes in `directory`."""
    path = directory / ".bench-fsync"

    def writes() -> None:
        for _ in range(count):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, SMALL_WRITE)
                os.fsync(fd)
            finally:
                os.close(fd)

    try:
        return statistics.median(time_calls(writes, samples))
    finally:
        path.unlink(missing_ok=True)


@dataclass
class Floor:
    grpc_s: float
    http_s: float
    fsyncs: int
    unprepare_fsyncs: int
    fsync_s: float

    @property
    def total_s(self) -> float:
        return self.grpc_s + self.http_s + self.fsync_s


def measure_floor(root: Path, fake: TimedFake, data_dir: Path, gpus: int, samples: int) -> Floor:
    fsyncs, unprepare_fsyncs = count_fsyncs(root, gpus)
    return Floor(
        grpc_s=grpc_floor(root, samples),
        http_s=http_floor(fake, samples),
        fsyncs=fsyncs,
        unprepare_fsyncs=unprepare_fsyncs,
        fsync_s=fsync_floor(data_dir, fsyncs, max(10, samples // 6)),
    )


# -------------------------------------------------------------------------------- the plugin


@dataclass
class PluginRun:
    proc: subprocess.Popen[bytes]
    started: float
    reg_socket: Path
    data_dir: Path
    log_path: Path
    kubelet: Kubelet | None = None

    def stop(self) -> int | None:
        if self.kubelet is not None:
            self.kubelet.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(WAIT_S)
        return self.proc.returncode


def launch_plugin(root: Path, gpus: int) -> PluginRun:
    if not CONSOLE_SCRIPT.exists():
        raise SystemExit(f"{CONSOLE_SCRIPT} not found: install the driver (pip install -e ./driver)")
    log_path = root / "plugin.log"
    with log_path.open("wb") as log:
        started = time.monotonic()
        proc = subprocess.Popen([str(CONSOLE_SCRIPT), *plugin_args(root, gpus=gpus)], stdout=log, stderr=log)
    return PluginRun(
        proc, started, root / "registry" / registration_socket_name(facts.DRIVER_NAME),
        root / "plugins" / facts.DRIVER_NAME, log_path,
    )  # fmt: skip


def try_get_info(reg_socket: Path) -> bool:
    """One GetInfo on a fresh channel with its own subchannel (no shared reconnect back-off)."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    with grpc.insecure_channel(f"unix:{reg_socket}", options=options) as ch:
        try:
            reg_grpc.RegistrationStub(ch).GetInfo(reg_pb2.InfoRequest(), timeout=0.5)
        except grpc.RpcError:
            return False
    return True


def wait_get_info(run: PluginRun) -> float:
    """Seconds from process start to the first answered GetInfo."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and run.proc.poll() is None:
        if run.reg_socket.exists() and try_get_info(run.reg_socket):
            return time.monotonic() - run.started
        time.sleep(0.002)
    raise RuntimeError(f"the plugin did not answer GetInfo; see {run.log_path}:\n{run.log_path.read_text()}")


def wait_first_slice(run: PluginRun, fake: TimedFake) -> float:
    if not wait_until(lambda: fake.first_added_after(run.started) is not None, WAIT_S, 0.001):
        raise RuntimeError("no ResourceSlice was created")
    added = fake.first_added_after(run.started)
    assert added is not None
    return added - run.started


# ----------------------------------------------------------------------------------- workloads


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
    """`count` cycles: a fresh allocated claim in the API, prepare, unprepare, claim deleted."""
    for n in range(count):
        refs = [(NAMESPACE, f"c{kind}-{n}", claim_uid(kind, n))]
        fake.put_claims(refs, gpus)
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


def overlap_round(kubelet: Kubelet, fake: TimedFake, gpus: int, shape: tuple[int, int], rnd: int) -> Overlap:
    """`pods` concurrent NodePrepareResources calls (one client thread each) of `claims` claims each."""
    pods, claims = shape
    per_pod = [
        [(NAMESPACE, f"o{rnd}-{p}-{c}", claim_uid(100 + rnd, p * claims + c)) for c in range(claims)]
        for p in range(pods)
    ]
    for refs in per_pod:
        fake.put_claims(refs, gpus)
    kubelet.dra_channel()  # connected before the clock starts
    barrier = threading.Barrier(pods)
    spans: list[tuple[float, float]] = []
    failures: list[BaseException] = []

    def pod(refs: list[Ref]) -> None:
        try:
            barrier.wait(WAIT_S)
            started = time.perf_counter()
            result = kubelet.prepare(refs)
            spans.append((started, time.perf_counter()))
            check_prepared(result, refs)
        except BaseException as err:  # reported by the main thread
            failures.append(err)

    threads = [threading.Thread(target=pod, args=(refs,), daemon=True) for refs in per_pod]
    for t in threads:
        t.start()
    for t in threads:
        t.join(ROUND_S)
    if failures or len(spans) != pods:
        raise RuntimeError(f"overlap round {rnd} failed: {failures or 'calls did not finish'}")
    for refs in per_pod:
        check_unprepared(kubelet.unprepare(refs), refs)
        fake.drop_claims(refs)
    wall = max(end for _, end in spans) - min(start for start, _ in spans)
    return Overlap([wall], [end - start for start, end in spans])


def run_overlap(kubelet: Kubelet, fake: TimedFake, gpus: int, shape: tuple[int, int], rounds: int) -> Overlap:
    total = Overlap()
    for rnd in range(rounds):
        one = overlap_round(kubelet, fake, gpus, shape, rnd)
        total.walls += one.walls
        total.calls += one.calls
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
        run_cycles(run.kubelet, fake, gpus, step, kind=2 + done // MEMORY_SAMPLE_EVERY, into=Cycles())
        done += step
        samples.append(rss_mib(run.proc.pid))
    return samples


# ------------------------------------------------------------------------------------------ report


@dataclass
class Results:
    args: argparse.Namespace
    floor: Floor
    cycles: Cycles
    overlap: Overlap
    get_info_s: float
    first_slice_s: float
    restores: list[float]
    rss_start: float
    rss_samples: list[float]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def floor_rows(r: Results) -> list[tuple[str, str, str, str]]:
    f = r.floor
    return [
        ("floor: gRPC round trip, unix socket, trivial servicer, p50", ms(f.grpc_s), "", ""),
        ("floor: HTTP GET of a claim from the fake, p50", ms(f.http_s), "", ""),
        (f"floor: {f.fsyncs} fsync'd small writes (fsyncs per prepare; unprepare {f.unprepare_fsyncs}), p50",
         ms(f.fsync_s), "", ""),
        ("floor: total", ms(f.total_s), "", ""),
    ]  # fmt: skip


def prepare_rows(r: Results) -> list[tuple[str, str, str, str]]:
    f, c = r.floor.total_s, r.cycles
    p50, p99 = percentile(c.prepare, 50), percentile(c.prepare, 99)
    n = len(c.prepare)
    return [
        (f"NodePrepareResources, 1 claim x 1 device, p50 ({n} cycles)", f"{ms(p50)} ({p50 / f:.2f}x floor)",
         "", ""),
        (f"NodePrepareResources, 1 claim x 1 device, p99 ({n} cycles)", f"{ms(p99)} ({p99 / f:.2f}x floor)",
         "<= 3x floor", verdict(p99 <= 3 * f)),
        ("NodeUnprepareResources, 1 claim, p50 / p99",
         f"{ms(percentile(c.unprepare, 50))} / {ms(percentile(c.unprepare, 99))}", "", ""),
    ]  # fmt: skip


def overlap_rows(r: Results) -> list[tuple[str, str, str, str]]:
    pods, claims = r.args.overlap
    o = r.overlap
    what = (
        f"{pods * claims} overlapping prepares ({pods} concurrent calls x {claims} claims, "
        f"{len(o.walls)} rounds)"
    )
    worst = max(o.walls)
    return [
        (f"{what}: wall time, median / max", f"{ms(statistics.median(o.walls))} / {ms(worst)}", "< 1 s",
         verdict(worst < 1.0)),
        (f"{what}: per-call latency p50 / p99",
         f"{ms(percentile(o.calls, 50))} / {ms(percentile(o.calls, 99))}", "", ""),
    ]  # fmt: skip


def lifecycle_rows(r: Results) -> list[tuple[str, str, str, str]]:
    rows = [
        (
            "process start -> registration answers GetInfo",
            ms(r.get_info_s),
            "< 1 s",
            verdict(r.get_info_s < 1.0),
        ),
        ("process start -> first ResourceSlice created", ms(r.first_slice_s), "", ""),
    ]
    if r.restores:
        worst = max(r.restores)
        rows.append(
            (
                f"ResourceSlice deleted -> restored, median / max ({len(r.restores)} deletions)",
                f"{ms(statistics.median(r.restores))} / {ms(worst)}",
                "< 1 s",
                verdict(worst < 1.0),
            )
        )
    return rows  # fmt: skip


def memory_rows(r: Results) -> list[tuple[str, str, str, str]]:
    rows = [("RSS after start", f"{r.rss_start:.1f} MiB", "< 80 MiB", verdict(r.rss_start < 80))]
    first, last = r.rss_samples[0], r.rss_samples[-1]
    cycles = r.args.memory_cycles
    if cycles:
        growth = last - first
        rows.append(
            (
                f"RSS after {cycles} more prepare/unprepare cycles (before them: {first:.1f} MiB)",
                f"{last:.1f} MiB ({growth:+.1f} MiB; max {max(r.rss_samples):.1f})",
                "< 80 MiB, flat",
                verdict(last < 80 and growth < 2.0),
            )
        )
    return rows  # fmt: skip


def print_table(r: Results) -> None:
    a = r.args
    print(f"driver bench: {a.gpus} simulated GPUs, {a.cycles} cycles, overlap {a.overlap[0]}x{a.overlap[1]} "
          f"x {a.overlap_rounds} rounds, {a.memory_cycles} memory cycles")  # fmt: skip
    print()
    print("| measurement | value | target | result |")
    print("|---|---|---|---|")
    for row in floor_rows(r) + prepare_rows(r) + overlap_rows(r) + lifecycle_rows(r) + memory_rows(r):
        print("| " + " | ".join(row) + " |")


# ---------------------------------------------------------------------------------------------- main


def shape(value: str) -> tuple[int, int]:
    pods, sep, claims = value.partition("x")
    if not sep or not pods.isdigit() or not claims.isdigit() or int(pods) < 1 or int(claims) < 1:
        raise argparse.ArgumentTypeError(f"expected PODSxCLAIMS like 8x8, got {value!r}")
    return int(pods), int(claims)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cycles", type=int, default=1000, help="prepare/unprepare cycles timed (default 1000)")
    p.add_argument("--overlap", type=shape, default=(8, 8), help="concurrent calls x claims per call (8x8)")
    p.add_argument("--overlap-rounds", type=int, default=10, help="rounds of overlapping prepares (10)")
    p.add_argument(
        "--memory-cycles", type=int, default=10000, help="cycles between two RSS readings (10000; 0: none)"
    )
    p.add_argument("--restores", type=int, default=5, help="ResourceSlice deletions timed (5)")
    p.add_argument("--gpus", type=int, default=8, help="simulated GPUs (8)")
    p.add_argument("--floor-samples", type=int, default=FLOOR_SAMPLES, help="samples per floor part")
    p.add_argument("--floor-server", metavar="SOCKET", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.cycles < 1 or args.overlap_rounds < 1 or args.memory_cycles < 0 or args.restores < 0:
        p.error("--cycles and --overlap-rounds must be >= 1, --memory-cycles and --restores >= 0")
    return args


def measure(args: argparse.Namespace, root: Path, fake: TimedFake) -> Results:
    fake.add_node(NODE)
    fake.write_kubeconfig(root / "kubeconfig")
    run = launch_plugin(root, args.gpus)
    try:
        get_info_s = wait_get_info(run)
        first_slice_s = wait_first_slice(run, fake)
        rss_start = rss_mib(run.proc.pid)
        run.kubelet = Kubelet(run.reg_socket)
        run.kubelet.register()
        gc.freeze()  # the bench's own full collections would stall the fake and the client
        floor = measure_floor(root, fake, run.data_dir, args.gpus, args.floor_samples)
        cycles = Cycles()
        run_cycles(run.kubelet, fake, args.gpus, args.cycles, kind=1, into=cycles)
        overlap = run_overlap(run.kubelet, fake, args.gpus, args.overlap, args.overlap_rounds)
        restores = slice_restores(fake, args.restores)
        rss_samples = memory_cycles(run, fake, args.gpus, args.memory_cycles)
    finally:
        code = run.stop()
    if code != 0:
        raise RuntimeError(f"the plugin exited with {code}; see its log:\n{run.log_path.read_text()[-4000:]}")
    return Results(args, floor, cycles, overlap, get_info_s, first_slice_s, restores, rss_start, rss_samples)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.floor_server:
        return serve_floor(args.floor_server)
    root = Path(tempfile.mkdtemp(prefix="drab", dir="/tmp"))  # short: unix socket paths <= 107 bytes
    fake = TimedFake()
    fake.start()  # on 127.0.0.1 only
    try:
        results = measure(args, root, fake)
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)
    print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
