"""What the bench is set to: its paths, the bounds of its waits, its sample counts and its targets."""

from __future__ import annotations

import sys
from pathlib import Path

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
#: Idle CPU, as a multiple of a bare gRPC Python server's beside it.
IDLE_X = 1.2
#: Seconds the plugin is left alone for the idle figure.
IDLE_SECONDS = 10.0

Ref = tuple[str, str, str]  # (namespace, name, uid) as kubelet sends a claim
