"""fsync and fdatasync calls per prepare+unprepare cycle: strace on the plugin process, else counted around
the DeviceState of the same version in a separate process."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vke_gpu_dra_core import facts
from vke_gpu_dra_testing.plugin_env import NODE, claim

from .plugin import PluginRun
from .probes import claim_uid
from .settings import FSYNC_CYCLES, NAMESPACE, WAIT_S
from .timed_fake import TimedFake
from .workloads import Cycles, run_cycles


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


def count_fsyncs(run: PluginRun, fake: TimedFake, gpus: int, root: Path, *, script: Path) -> FsyncCount:
    """fsyncs per prepare+unprepare cycle: in the plugin process with strace where it can attach,
    else on the same version's DeviceState in a separate process (`script --count-fsyncs`)."""

    def cycles() -> None:
        assert run.kubelet is not None
        run_cycles(run.kubelet, fake, gpus, FSYNC_CYCLES, kind=3, into=Cycles())

    counted = strace_fsyncs(run.proc.pid, root / "strace.txt", cycles)
    if counted is not None:
        return FsyncCount(counted / FSYNC_CYCLES, f"strace -f on the plugin process, {FSYNC_CYCLES} cycles")
    scratch = root / "count"
    scratch.mkdir()
    proc = run.command.run(str(script), "--count-fsyncs", str(scratch))
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return FsyncCount(None, f"strace cannot attach; in-process count failed: {last}")
    prepare, unprepare = (int(n) for n in proc.stdout.split())
    return FsyncCount(prepare + unprepare, "strace cannot attach: counted around DeviceState in process")
