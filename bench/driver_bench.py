"""Kubelet-plugin benchmark: every performance figure of the plugin, against its target, in one run.

Starts the real plugin process (simulated mode, 8 GPUs) against the project's HTTP fake of the
Kubernetes API on 127.0.0.1, talks to it over its unix sockets like kubelet does, and prints one
Markdown table: start-up (to GetInfo, to the first ResourceSlice), the floor measured in the same run
(a gRPC round trip to a trivial servicer + one GET of a claim of the kind the plugin makes), the
least a prepare that records it durably can take (that servicer doing the GET and one fdatasync'd
record), NodePrepareResources and NodeUnprepareResources latency (1 claim x 1 device), CPU time and fsyncs
per prepare+unprepare cycle, overlapping prepares, ResourceSlice restoration and resident memory.

`--baseline REV` also measures the plugin of commit REV, checked out in a temporary git worktree
and run with `python -m vke_gpu_dra` from it, in runs interleaved with the current plugin's
(`--repeats` of each); the table then shows the medians of both and their ratio.

Run from the repository root: `python bench/driver_bench.py [--baseline REV] [--repeats N]
[--cycles N] [--overlap PxC] [--memory-cycles N]`. The exit code is 0 when every call succeeded
(a missed target is reported in the table, not as a failure).
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import gc
import http.client
import importlib.util
import math
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

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

HERE = Path(__file__).resolve().parent  # git finds the repository from here
CONSOLE_SCRIPT = Path(sys.executable).with_name("dra-gpu-kubelet-plugin")
#: A tree's source folders (driver, core, kube) and the packages the plugin imports from them.
TREE_SOURCES = ("driver/src", "core/src", "kube/src")
TREE_PACKAGES = ("vke_gpu_dra", "vke_gpu_dra_core", "vke_gpu_dra_kube")
NAMESPACE = "default"
#: Upper bound for any single wait (start-up, a restored slice, a stopping process, strace attaching).
WAIT_S = 30.0
#: Deadline for a whole overlap round (kubelet's own call timeout is 45 s).
ROUND_S = 45.0
#: Bound on each git command (rev-parse, worktree add/remove).
GIT_S = 120.0
MEMORY_SAMPLE_EVERY = 1000
FLOOR_SAMPLES = 300
#: Untimed cycles over which fsyncs are counted (strace slows every traced call down).
FSYNC_CYCLES = 10
SMALL_WRITE = b"x" * 600  # about the size of a one-claim checkpoint or CDI spec

# The targets.
GET_INFO_MS = 150.0
FIRST_SLICE_MS = 400.0
PREPARE_P50_X = 1.2
PREPARE_P99_X = 2.0
CPU_PER_CYCLE_MS = 2.0
FSYNCS_PER_CYCLE = 4.0
OVERLAP_WALL_MS = 500.0
RESTORE_MS = 1000.0
RSS_START_MIB = 50.0
RSS_OVERLAP_MIB = 60.0
RSS_GROWTH_MIB = 2.0

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


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of all threads of process `pid` so far (`/proc/<pid>/stat` utime, stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # fields 14 and 15 of stat


def claim_uid(kind: int, n: int) -> str:
    return f"00000000-0000-4000-{8000 + kind:04d}-{n:012d}"


#: The claim the floor reads.
FLOOR_CLAIM: Ref = (NAMESPACE, "floor-claim", claim_uid(9, 1))


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

    def put_claims(self, refs: list[Ref], gpus: int, *, first: int = 0) -> None:
        """Allocated claims of one device each, `gpu-<first + i>` (modulo `gpus`): exclusive when they
        fit on distinct GPUs, else all with admin access (which lets claims share a device)."""
        shared = len(refs) > gpus
        for i, (_, name, uid) in enumerate(refs):
            self.add_claim(claim(name, uid, f"gpu-{(first + i) % gpus}", admin_access=shared))

    def claim_reads(self, name: str) -> list[str]:
        """The paths (with query) of the GETs of claim `name` since the last `drop_claims`."""
        with self.cond:
            paths = [p for m, p in self.requests if m == "GET"]
        return [p for p in paths if urlsplit(p).path.endswith(f"/resourceclaims/{name}")]

    def drop_claims(self, refs: list[Ref]) -> None:
        with self.cond:
            for namespace, name, _ in refs:
                self.claims.pop((namespace, name), None)
            self.requests.clear()


# ----------------------------------------------------------------------------- the plugin's code


@dataclass(frozen=True)
class PluginCommand:
    """How to start one version of the plugin: the command before its flags, and its environment."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] | None = None  # None: the bench's own
    sources: tuple[Path, ...] = ()  # the folders of its packages, compiled to bytecode before it runs

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`python ARGS` in this version's environment (for helpers that must import its code)."""
        return subprocess.run(
            [sys.executable, *args], env=self.env, capture_output=True, text=True, timeout=WAIT_S, check=False
        )


def current_command() -> PluginCommand:
    if not CONSOLE_SCRIPT.exists():
        raise SystemExit(f"{CONSOLE_SCRIPT} not found: install the driver (pip install -e ./driver)")
    sources = []
    for package in TREE_PACKAGES:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, package
        sources.append(Path(next(iter(spec.submodule_search_locations))))
    return PluginCommand("current", (str(CONSOLE_SCRIPT),), sources=tuple(sources))


def tree_command(name: str, tree: Path, environ: Mapping[str, str]) -> PluginCommand:
    """The plugin of the source tree `tree`: `python -m vke_gpu_dra` with the tree's source folders
    first on PYTHONPATH (before the editable installs of the current tree in site-packages)."""
    paths = [str(tree / source) for source in TREE_SOURCES]
    if environ.get("PYTHONPATH"):
        paths.append(environ["PYTHONPATH"])
    env = {**environ, "PYTHONPATH": os.pathsep.join(paths)}
    sources = tuple(tree / source for source in TREE_SOURCES)
    return PluginCommand(name, (sys.executable, "-m", "vke_gpu_dra"), env, sources)


def compile_sources(command: PluginCommand) -> None:
    """Bytecode for the plugin's own modules, as an installed copy has it (pip compiles at install; the
    image runs with PYTHONDONTWRITEBYTECODE=1, as this machine may): without it every start would compile
    them from source."""
    for folder in command.sources:
        if not compileall.compile_dir(str(folder), quiet=1):
            raise RuntimeError(f"{command.name}: cannot compile the modules in {folder}")


def check_imports_from(command: PluginCommand, tree: Path) -> None:
    """Fails unless a child started like `command` imports the plugin's packages from `tree`."""
    code = "import importlib\n" + "".join(
        f"print(importlib.import_module({package!r}).__file__)\n" for package in TREE_PACKAGES
    )
    proc = command.run("-c", code)
    files = proc.stdout.split()
    if proc.returncode != 0 or len(files) != len(TREE_PACKAGES):
        raise RuntimeError(f"{command.name}: cannot import {', '.join(TREE_PACKAGES)}:\n{proc.stderr}")
    outside = [f for f in files if not Path(f).resolve().is_relative_to(tree.resolve())]
    if outside:
        raise RuntimeError(f"{command.name}: imports {', '.join(outside)}, not the code in {tree}")


def git(*args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(HERE), *args], capture_output=True, text=True, timeout=GIT_S, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def resolve_commit(rev: str) -> str | None:
    """The commit id `rev` names in this repository, None when it names none."""
    try:
        return git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except (RuntimeError, OSError):
        return None


@contextlib.contextmanager
def worktree(commit: str) -> Iterator[Path]:
    """`commit` checked out (detached) in a temporary git worktree, removed afterwards."""
    parent = Path(tempfile.mkdtemp(prefix="drab-base-"))
    tree = parent / "tree"
    try:
        git("worktree", "add", "--detach", "--quiet", str(tree), commit)
        yield tree
    finally:
        with contextlib.suppress(RuntimeError):
            git("worktree", "remove", "--force", str(tree))
        shutil.rmtree(parent, ignore_errors=True)
        if f"worktree {tree}\n" in git("worktree", "list", "--porcelain") + "\n":
            git("worktree", "prune")  # its folder is gone: drop the worktree's record too


# ----------------------------------------------------------------------------------- the floor


class FloorPrepareWork:
    """What a prepare must do besides the round trip: one keep-alive GET of the claim, as the plugin reads
    it; with `directory`, then one fdatasync'd 600-byte record written in place into a preallocated file
    there (no metadata changes: the cheapest durable write there is)."""

    FILE_BYTES = 1 << 20

    def __init__(self, url: str, path: str, directory: str | None = None) -> None:
        host, port = urlsplit(url).netloc.split(":")
        self._conn = http.client.HTTPConnection(host, int(port), timeout=10)
        self._path = path
        self._headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"}
        self._file: Path | None = None
        self._fd = -1
        if directory is not None:
            self._file = Path(directory) / ".bench-durable-floor"
            self._fd = os.open(self._file, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            os.write(self._fd, bytes(self.FILE_BYTES))
            os.fsync(self._fd)
        self._offset = 0

    def __call__(self) -> None:
        self._conn.request("GET", self._path, headers=self._headers)
        response = self._conn.getresponse()
        response.read()
        assert response.status == 200, response.status
        if self._file is not None:
            os.pwrite(self._fd, SMALL_WRITE, self._offset)
            os.fdatasync(self._fd)
            self._offset = (self._offset + len(SMALL_WRITE)) % (self.FILE_BYTES - len(SMALL_WRITE))

    def close(self) -> None:
        self._conn.close()
        if self._file is not None:
            os.close(self._fd)
            self._file.unlink(missing_ok=True)


class TrivialDRA(dra_grpc.DRAPluginServicer):
    """Answers like the plugin (one device per claim) without doing anything, or doing only `work`."""

    def __init__(self, work: Callable[[], None] | None = None) -> None:
        self._work = work

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        response = dra_pb2.NodePrepareResourcesResponse()
        for c in request.claims:
            if self._work is not None:
                self._work()
            response.claims[c.uid].devices.add(
                request_names=["gpu"], pool_name=NODE, device_name="gpu-0",
                cdi_device_ids=[f"{facts.CDI_VENDOR}/{facts.CDI_CLASS_CLAIM}={c.uid}-gpu-0"],
            )  # fmt: skip
        return response


def serve_floor(socket_path: str, work_args: list[str] | None) -> int:
    """`--floor-server`: a trivial DRA servicer in its own process, until stdin closes; with
    `--floor-work URL PATH [DIR]`, each claim also does `FloorPrepareWork`."""
    work = FloorPrepareWork(*work_args) if work_args else None
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    dra_grpc.add_DRAPluginServicer_to_server(TrivialDRA(work), server)
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    print("ready", flush=True)
    sys.stdin.read()
    server.stop(0).wait()
    if work is not None:
        work.close()
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


def grpc_floor(root: Path, samples: int, work: list[str] | None = None) -> list[float]:
    """Round trips of a one-claim NodePrepareResources to the trivial servicer (doing `FloorPrepareWork` with
    `work`: URL, PATH[, DIR])."""
    sock = root / "floor.sock"
    extra = ["--floor-work", *work] if work else []
    proc = subprocess.Popen(
        [sys.executable, __file__, "--floor-server", str(sock), *extra],
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
            return time_calls(call, samples)
    finally:
        proc.communicate(input="", timeout=WAIT_S)


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


def read_kind(query: str) -> str:
    return "resourceVersion=0, watch cache" if "resourceVersion=0" in query.split("&") else "quorum read"


def floor_claim_path(query: str) -> str:
    path = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims/{FLOOR_CLAIM[1]}"
    return f"{path}?{query}" if query else path


def http_floor(fake: TimedFake, query: str, samples: int) -> float:
    """Median of one keep-alive GET of the floor's claim with `query`, as the plugin reads claims."""
    get = FloorPrepareWork(fake.url, floor_claim_path(query))
    try:
        return statistics.median(time_calls(get, samples))
    finally:
        get.close()


def fsync_write(directory: Path, samples: int) -> float:
    """Median time of one fsync'd small write (open, write, fsync, close) in `directory`."""
    path = directory / ".bench-fsync"

    def write() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, SMALL_WRITE)
            os.fsync(fd)
        finally:
            os.close(fd)

    try:
        return statistics.median(time_calls(write, samples))
    finally:
        path.unlink(missing_ok=True)


@dataclass
class Floor:
    grpc_s: float
    http_s: float
    read_kind: str
    fsync_s: float  # one fsync'd small write: reported, not part of the floor
    # The trivial servicer doing `FloorPrepareWork` (reported, not part of the floor): the GET alone, p50;
    # the GET and the durable record, p50 and p99.
    get_p50_s: float
    durable_p50_s: float
    durable_p99_s: float

    @property
    def total_s(self) -> float:
        return self.grpc_s + self.http_s


def measure_floor(root: Path, fake: TimedFake, data_dir: Path, query: str, samples: int) -> Floor:
    fake.put_claims([FLOOR_CLAIM], 1)
    try:
        claim = [fake.url, floor_claim_path(query)]
        durable = grpc_floor(root, samples, [*claim, str(data_dir)])
        return Floor(
            grpc_s=statistics.median(grpc_floor(root, samples)),
            http_s=http_floor(fake, query, samples),
            read_kind=read_kind(query),
            fsync_s=fsync_write(data_dir, max(10, samples // 3)),
            get_p50_s=percentile(grpc_floor(root, samples, claim), 50),
            durable_p50_s=percentile(durable, 50),
            durable_p99_s=percentile(durable, 99),
        )
    finally:
        fake.drop_claims([FLOOR_CLAIM])


# ---------------------------------------------------------------------------------------- fsyncs


@dataclass(frozen=True)
class FsyncCount:
    per_cycle: float | None  # None: could not be counted
    how: str


def strace_fsyncs(pid: int, out: Path, during: Callable[[], None]) -> int | None:
    """fsync + fdatasync calls of all threads of process `pid` while `during` runs, counted by
    `strace -f -c`; None when strace is not installed or cannot attach."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    command = [strace, "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", str(out), "-p", str(pid)]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    try:
        ready, _, _ = select.select([proc.stderr], [], [], WAIT_S)
        line = proc.stderr.readline() if ready else ""
        if "attached" not in line:  # not permitted (ptrace), or it did not answer
            return None
        during()
    finally:
        proc.send_signal(signal.SIGINT)  # detaches and writes the summary
        try:
            proc.communicate(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
    if proc.returncode not in (0, -signal.SIGINT):  # it ends by the signal it was sent, once detached
        raise RuntimeError(f"strace exited with {proc.returncode}")
    return parse_strace_summary(out.read_text())


def parse_strace_summary(text: str) -> int:
    """Calls of fsync and fdatasync in a `strace -c` summary (columns: % time, seconds, usecs/call,
    calls, [errors], syscall)."""
    total = 0
    for line in text.splitlines():
        columns = line.split()
        if len(columns) >= 5 and columns[-1] in ("fsync", "fdatasync"):
            total += int(columns[3])
    return total


def in_process_fsyncs(root: Path) -> tuple[int, int]:
    """`--count-fsyncs`: fsync and fdatasync calls of one prepare and one unprepare of a 1-device claim,
    counted by wrapping both around the real DeviceState (of the code on this process's path)."""
    from vke_gpu_dra.state import DeviceState  # noqa: PLC0415
    from vke_gpu_dra_core.device_model import ClaimRef  # noqa: PLC0415
    from vke_gpu_dra_core.discovery.simulated import SimulatedSource  # noqa: PLC0415

    devices = SimulatedSource(1, "NVIDIA A30", NODE).discover().devices
    state = DeviceState(
        driver_name=facts.DRIVER_NAME, pool_name=NODE, devices=devices,
        cdi_root=root / "cdi", plugin_data_dir=root / "data",
    )  # fmt: skip
    uid = claim_uid(9, 2)
    ref = ClaimRef(NAMESPACE, "count", uid)
    calls: list[int] = []
    real = {name: getattr(os, name) for name in ("fsync", "fdatasync")}

    def counting(name: str) -> Callable[[int], None]:
        def counted(fd: int) -> None:
            calls.append(fd)
            real[name](fd)

        return counted

    for name in real:
        setattr(os, name, counting(name))
    try:
        state.prepare(ref, claim("count", uid, "gpu-0"))
        prepared = len(calls)
        state.unprepare(ref)
    finally:
        for name, function in real.items():
            setattr(os, name, function)
    return prepared, len(calls) - prepared


def count_fsyncs(run: PluginRun, fake: TimedFake, gpus: int, root: Path) -> FsyncCount:
    """fsyncs per prepare+unprepare cycle: in the plugin process with strace where it can attach,
    else on the same version's DeviceState in a separate process."""

    def cycles() -> None:
        assert run.kubelet is not None
        run_cycles(run.kubelet, fake, gpus, FSYNC_CYCLES, kind=3, into=Cycles())

    counted = strace_fsyncs(run.proc.pid, root / "strace.txt", cycles)
    if counted is not None:
        return FsyncCount(counted / FSYNC_CYCLES, f"strace -f on the plugin process, {FSYNC_CYCLES} cycles")
    scratch = root / "count"
    scratch.mkdir()
    proc = run.command.run(__file__, "--count-fsyncs", str(scratch))
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return FsyncCount(None, f"strace cannot attach; in-process count failed: {last}")
    prepare, unprepare = (int(n) for n in proc.stdout.split())
    return FsyncCount(prepare + unprepare, "strace cannot attach: counted around DeviceState in process")


# -------------------------------------------------------------------------------- the plugin


@dataclass
class PluginRun:
    command: PluginCommand
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


def launch_plugin(root: Path, gpus: int, command: PluginCommand) -> PluginRun:
    log_path = root / "plugin.log"
    argv = [*command.argv, *plugin_args(root, gpus=gpus)]
    with log_path.open("wb") as log:
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdout=log, stderr=log, env=command.env)
    return PluginRun(
        command, proc, started, root / "registry" / registration_socket_name(facts.DRIVER_NAME),
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


# ------------------------------------------------------------------------------------- figures


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


def figures(m: Measured, args: argparse.Namespace) -> list[Figure]:
    return [
        *lifecycle_figures(m, args.restores),
        *floor_figures(m),
        *prepare_figures(m),
        *overlap_figures(m, args.overlap, args.gpus),
        *memory_figures(m, args.overlap, args.memory_cycles),
    ]


# -------------------------------------------------------------------------------------- report


@dataclass(frozen=True)
class Summary:
    """One row over several runs: medians of the value and of its floor multiple."""

    figure: Figure  # the first run's (label, format, target, note)
    value: float | None
    multiple: float | None

    def cell(self) -> str:
        if self.value is None:
            text = "n/a"
        else:
            text = self.figure.fmt.format(self.value)
            if self.multiple is not None:
                text += f" ({self.multiple:.2f}x floor)"
        return f"{text}; {self.figure.note}" if self.figure.note else text

    def result(self) -> str:
        target = self.figure.target
        if target is None:
            return ""
        if self.value is None:
            return "not measured"
        return "met" if target.met(self.value, self.multiple) else "**missed**"


def median_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present and len(present) == len(values) else None


def summarize(runs: list[list[Figure]]) -> dict[str, Summary]:
    """Per label (in the first run's order): the medians over `runs`."""
    by_label: dict[str, list[Figure]] = {}
    for run in runs:
        for fig in run:
            by_label.setdefault(fig.label, []).append(fig)
    out = {}
    for label, figs in by_label.items():
        multiples = [f.value / f.floor if f.value is not None and f.floor else None for f in figs]
        has_floor = figs[0].floor is not None
        out[label] = Summary(
            figs[0], median_or_none([f.value for f in figs]), median_or_none(multiples) if has_floor else None
        )
    return out


def ratio(current: Summary, baseline: Summary | None) -> str:
    if baseline is None or not current.figure.compared or current.value is None or baseline.value is None:
        return ""
    if current.value <= 0 or baseline.value <= 0:
        return ""
    return f"{current.value / baseline.value:.2f}"


def table(current: dict[str, Summary], baseline: dict[str, Summary] | None, baseline_name: str) -> list[str]:
    if baseline is None:
        lines = ["| measurement | value | target | result |", "|---|---|---|---|"]
        for label, s in current.items():
            lines.append(f"| {label} | {s.cell()} | {s.figure.target.text if s.figure.target else ''} | "
                         f"{s.result()} |")  # fmt: skip
        return lines
    lines = [
        f"| measurement | current | baseline {baseline_name} | current / baseline | target | result |",
        "|---|---|---|---|---|---|",
    ]
    for label, s in current.items():
        b = baseline.get(label)
        lines.append(
            f"| {label} | {s.cell()} | {b.cell() if b else 'n/a'} | {ratio(s, b)} | "
            f"{s.figure.target.text if s.figure.target else ''} | {s.result()} |"
        )
    return lines


# ---------------------------------------------------------------------------------------------- main


def shape(value: str) -> tuple[int, int]:
    pods, sep, claims = value.partition("x")
    if not sep or not pods.isdigit() or not claims.isdigit() or int(pods) < 1 or int(claims) < 1:
        raise argparse.ArgumentTypeError(f"expected PODSxCLAIMS like 8x8, got {value!r}")
    return int(pods), int(claims)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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


def measure(args: argparse.Namespace, command: PluginCommand, root: Path, fake: TimedFake) -> Measured:
    fake.add_node(NODE)
    fake.write_kubeconfig(root / "kubeconfig")
    run = launch_plugin(root, args.gpus, command)
    try:
        get_info_s = wait_get_info(run)
        first_slice_s = wait_first_slice(run, fake)
        rss_start = rss_mib(run.proc.pid)
        run.kubelet = Kubelet(run.reg_socket)
        run.kubelet.register()
        gc.freeze()  # the bench's own full collections would stall the fake and the client
        query = claim_read_query(run.kubelet, fake, args.gpus)
        floor = measure_floor(root, fake, run.data_dir, query, args.floor_samples)
        cycles = Cycles()
        cpu_before = cpu_seconds(run.proc.pid)
        run_cycles(run.kubelet, fake, args.gpus, args.cycles, kind=1, into=cycles)
        cpu_s = cpu_seconds(run.proc.pid) - cpu_before
        fsyncs = count_fsyncs(run, fake, args.gpus, root)
        overlap = run_overlap(run, fake, args.gpus, args.overlap, args.overlap_rounds)
        restores = slice_restores(fake, args.restores)
        rss_samples = memory_cycles(run, fake, args.gpus, args.memory_cycles)
    finally:
        code = run.stop()
    if code != 0:
        raise RuntimeError(f"the plugin exited with {code}; see its log:\n{run.log_path.read_text()[-4000:]}")
    return Measured(floor, get_info_s, first_slice_s, cycles, cpu_s, fsyncs, overlap, restores, rss_start,
                    rss_samples)  # fmt: skip


def measure_once(args: argparse.Namespace, command: PluginCommand) -> tuple[list[Figure], int]:
    """One run of `command`'s plugin (a fresh fake API server and a fresh directory): its figures and
    how many claims failed to prepare."""
    root = Path(tempfile.mkdtemp(prefix="drab", dir="/tmp"))  # short: unix socket paths <= 107 bytes
    fake = TimedFake()
    fake.start()  # on 127.0.0.1 only
    try:
        measured = measure(args, command, root, fake)
        return figures(measured, args), measured.overlap.failed
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)


def measure_all(
    args: argparse.Namespace, commands: list[PluginCommand]
) -> tuple[dict[str, list[list[Figure]]], int]:
    """`args.repeats` runs of each command, interleaved (one of each in turn): the figures of each run
    by command name, and the claims that failed to prepare in all of them."""
    runs: dict[str, list[list[Figure]]] = {c.name: [] for c in commands}
    failed = 0
    total = args.repeats * len(commands)
    for i in range(args.repeats):
        for j, command in enumerate(commands):
            print(f"run {i * len(commands) + j + 1}/{total}: {command.name}", file=sys.stderr, flush=True)
            figs, failures = measure_once(args, command)
            runs[command.name].append(figs)
            failed += failures
    return runs, failed


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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
