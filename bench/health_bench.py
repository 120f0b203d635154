"""GPU health benchmark: how fast a fatal XID makes a GPU unallocatable, and how fast it comes back.

Runs the plugin in-process with NVML discovery and health watching on the tests' fake libnvidia-ml
(built with gcc from tests/driver/fake_nvml) against the project's fake API server, once emulating
Kubernetes 1.34 (no device taints: the device is left out of the slice) and once 1.36 (device taints:
the device gets `gpu.nvidia.com/xid=79` NoSchedule). Each round injects XID 79 on GPU 1 and measures
the time until the published slice makes the GPU unallocatable, then lifts nothing but waits for the
recovery window (`--window`) and measures the time until it is allocatable again. Prints one Markdown
table; the target for "unallocatable" is 10 s.

Run from the repository root: `python bench/health_bench.py [--rounds N] [--window S]`.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pynvml
from vke_gpu_dra.config import parse_config
from vke_gpu_dra.discovery.nvml import NvmlSource
from vke_gpu_dra.plugin import Plugin
from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer
from vke_gpu_dra_testing.plugin_env import NODE, plugin_args, wait_until

TARGET_S = 10.0
XID_79 = 79
WHOLE_GPU = 0xFFFFFFFF


def repository() -> Path:
    """The work tree this benchmark belongs to, as git names it."""
    here = Path(__file__).resolve().parent
    top = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], cwd=here, capture_output=True, text=True, check=True
    )
    return Path(top.stdout.strip())


def build_fake_nvml(out_dir: Path) -> Path:
    """The tests' fake libnvidia-ml, built by their own helper (run from the repository root)."""
    code = (
        "import sys; from pathlib import Path; from tests.driver.fake_nvml import build; "
        "print(build(Path(sys.argv[1])))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(out_dir)],
        cwd=repository(),
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(done.stdout.strip())


def write_config(path: Path, settings: dict[str, object]) -> Path:
    """The fake's configuration file: one `key=value` line per setting."""
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


def unallocatable(server: FakeAPIServer, device: str) -> bool:
    """The device is absent from the node's slices, or carries a NoSchedule/NoExecute taint."""
    for s in server.slices_of(NODE):
        for d in s["spec"].get("devices", []):
            if d["name"] == device:
                return any(t.get("effect") in ("NoSchedule", "NoExecute") for t in d.get("taints") or [])
    return True


def run_version(
    version: str, lib_path: Path, tmp: Path, rounds: int, window: int
) -> tuple[list[float], list[float], float]:
    """Seconds to unallocatable and back per XID round; from a GPU falling off the bus to unallocatable."""
    lib = ctypes.CDLL(str(lib_path))
    lib.fakeNvmlReset()
    os.environ["FAKE_NVML_CONFIG"] = str(write_config(tmp / "fake-nvml.conf", {"device_count": 2}))
    (tmp / "driver-root").mkdir(exist_ok=True)
    to_bad: list[float] = []
    to_good: list[float] = []
    with FakeAPIServer() as server:
        server.k8s_version = version
        server.write_kubeconfig(tmp / "kubeconfig")
        server.add_node(NODE)
        args = [
            *plugin_args(tmp, gpus=2),
            "--device-source", "nvml",
            "--nvidia-driver-root", str(tmp / "driver-root"),
            "--health-recovery-window", str(window),
        ]  # fmt: skip
        plugin = Plugin(
            parse_config(args, environ={}), source=NvmlSource(library_path=lib_path), stop_grace=5
        )
        plugin.start()
        try:
            assert plugin.slices is not None and plugin.slices.wait_synced(30)
            for _ in range(rounds):
                start = time.monotonic()
                lib.fakeNvmlInjectEvent(1, ctypes.c_ulonglong(pynvml.nvmlEventTypeXidCriticalError),
                                        ctypes.c_ulonglong(XID_79), WHOLE_GPU, WHOLE_GPU)  # fmt: skip
                if not wait_until(lambda: unallocatable(server, "gpu-1"), timeout=60):
                    raise SystemExit(f"{version}: gpu-1 never became unallocatable")
                to_bad.append(time.monotonic() - start)
                start = time.monotonic()
                if not wait_until(lambda: not unallocatable(server, "gpu-1"), timeout=window + 60):
                    raise SystemExit(f"{version}: gpu-1 never came back")
                to_good.append(time.monotonic() - start)
            start = time.monotonic()
            lib.fakeNvmlSetLost(0, 1)  # gpu-0 falls off the bus: found by the periodic probe
            if not wait_until(lambda: unallocatable(server, "gpu-0"), timeout=60):
                raise SystemExit(f"{version}: lost gpu-0 never became unallocatable")
            lost = time.monotonic() - start
            lib.fakeNvmlSetLost(0, 0)
        finally:
            plugin.stop()
            with pynvml.libLoadLock:
                pynvml.nvmlLib = None
                pynvml._nvmlGetFunctionPointer_cache.clear()
    return to_bad, to_good, lost


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="XIDs injected per server version")
    parser.add_argument("--window", type=int, default=2, help="recovery window in seconds")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # the plugin's warnings (no driver root, no sysfs) are expected
    if args.rounds < 1 or args.window < 0:
        parser.error("--rounds must be 1 or more and --window 0 or more")
    with tempfile.TemporaryDirectory(prefix="hb", dir="/tmp") as tmp_dir:
        tmp = Path(tmp_dir)
        lib_path = build_fake_nvml(tmp / "nvml")
        print("| measurement | value | target | result |")
        print("|---|---|---|---|")
        for version, how in (("1.34.0", "left out of the slice"), ("1.36.0", "tainted NoSchedule")):
            work = tmp / version
            work.mkdir()
            to_bad, to_good, lost = run_version(version, lib_path, work, args.rounds, args.window)
            rows = [
                (
                    f"{version}: XID 79 -> GPU {how}, max of {args.rounds} "
                    f"(median {statistics.median(to_bad):.3f} s)",
                    max(to_bad),
                    TARGET_S,
                ),
                (
                    f"{version}: -> allocatable again ({args.window} s window), max of {args.rounds}",
                    max(to_good),
                    args.window + TARGET_S,
                ),
                (f"{version}: GPU lost (probe every 5 s) -> GPU {how}", lost, TARGET_S),
            ]
            for name, value, target in rows:
                print(
                    f"| {name} | {value:.3f} s | {target:.0f} s | {'ok' if value <= target else 'MISSED'} |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
