"""One run: a fresh fake API server, directory and plugin process, measured in order; the runs of the
current plugin and the baseline's, interleaved."""

from __future__ import annotations

import argparse
import gc
import shutil
import sys
import tempfile
from pathlib import Path

from vke_gpu_dra_testing.kubelet_client import Kubelet
from vke_gpu_dra_testing.plugin_env import NODE

from .figures import Figure, Measured, figures
from .floor import measure_floor
from .fsyncs import count_fsyncs
from .idle import measure_idle
from .plugin import launch_plugin, wait_first_slice, wait_get_info
from .probes import cpu_seconds, rss_mib
from .timed_fake import TimedFake
from .trees import PluginCommand
from .workloads import Cycles, claim_read_query, memory_cycles, run_cycles, run_overlap, slice_restores


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
        idle = (
            measure_idle(root, run.proc.pid, args.idle_seconds, script=args.script)
            if args.idle_seconds
            else None
        )
        gc.freeze()  # the bench's own full collections would stall the fake and the client
        query = claim_read_query(run.kubelet, fake, args.gpus)
        floor = measure_floor(root, fake, run.data_dir, query, args.floor_samples, script=args.script)
        cycles = Cycles()
        cpu_before = cpu_seconds(run.proc.pid)
        run_cycles(run.kubelet, fake, args.gpus, args.cycles, kind=1, into=cycles)
        cpu_s = cpu_seconds(run.proc.pid) - cpu_before
        fsyncs = count_fsyncs(run, fake, args.gpus, root, script=args.script)
        overlap = run_overlap(run, fake, args.gpus, args.overlap, args.overlap_rounds)
        restores = slice_restores(fake, args.restores)
        rss_samples = memory_cycles(run, fake, args.gpus, args.memory_cycles)
    finally:
        code = run.stop()
    if code != 0:
        raise RuntimeError(f"the plugin exited with {code}; see its log:\n{run.log_path.read_text()[-4000:]}")
    return Measured(floor, get_info_s, first_slice_s, cycles, cpu_s, fsyncs, overlap, restores, rss_start,
                    rss_samples, idle)  # fmt: skip


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
