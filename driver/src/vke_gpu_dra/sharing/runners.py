"""The commands sharing runs on the node (I/O): `nvidia-smi` of the driver root, one GPU per call, and
`mount`/`umount` of the MPS shm tmpfs; each bounded by a timeout, each failure a `SharingError`."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from ..userspace import BINARY_DIRS, NVML_SONAME, SMI_BINARY, DriverRoot, find_binary, find_library

NVIDIA_SMI_TIMEOUT: Final = 10.0


class SharingError(Exception):
    """A sharing step failed; the manager makes the message its claim's error."""


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


class NvidiaSmi:
    """`nvidia-smi` of the driver root, one GPU per call, bounded by a timeout."""

    def __init__(self, driver_root: Path, *, runner: Runner = subprocess.run) -> None:
        self._root = driver_root
        self._runner = runner

    def run(self, args: Sequence[str], deadline: float) -> None:
        if "-i" not in args:
            raise ValueError("nvidia-smi must be called for one GPU (-i <uuid>)")
        root = DriverRoot(self._root)
        found = find_binary(root, SMI_BINARY)
        if found is None:
            raise SharingError(
                f"nvidia-smi not found under driver root {self._root} ({', '.join(BINARY_DIRS)})"
            )
        binary = root.local(found.resolved)
        env = dict(os.environ)
        library = find_library(root, NVML_SONAME)
        if library is not None:  # as NVIDIA's plugin: preload the driver root's NVML
            env["LD_PRELOAD"] = ":".join(
                p for p in (str(root.local(library)), env.get("LD_PRELOAD", "")) if p
            )
        timeout = min(NVIDIA_SMI_TIMEOUT, deadline - time.monotonic())
        command = [str(binary), *args]
        if timeout <= 0:
            raise SharingError(f"no time left for {' '.join(args)} (kubelet's deadline passed)")
        try:
            done = self._runner(
                command, env=env, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise SharingError(f"nvidia-smi {' '.join(args)} did not finish within {timeout:.1f}s") from None
        except OSError as exc:
            raise SharingError(f"cannot run nvidia-smi {' '.join(args)}: {exc}") from None
        if done.returncode != 0:
            output = " ".join((done.stdout + done.stderr).split())[:300]
            raise SharingError(f"nvidia-smi {' '.join(args)} failed (exit {done.returncode}): {output}")

    def set_compute_mode(self, uuid: str, mode: str, deadline: float) -> None:
        self.run(["-i", uuid, "-c", mode], deadline)

    def set_timeslice(self, uuid: str, value: int, deadline: float) -> None:
        self.run(["compute-policy", "-i", uuid, "--set-timeslice", str(value)], deadline)


def default_shm_size(meminfo: Path = Path("/proc/meminfo")) -> str:
    """Half the node's memory, as NVIDIA sizes the MPS shm tmpfs (fallback 65536k)."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                parts = line.split(":", 1)[1].split()
                return f"{int(parts[0]) // 2}{parts[1][0] if len(parts) > 1 else ''}"
    except (OSError, ValueError, IndexError):
        pass
    return "65536k"


class Mounter:
    """`mount`/`umount` of the MPS shm tmpfs (NVIDIA's options), bounded by a timeout."""

    def __init__(
        self, *, runner: Runner = subprocess.run, shm_size: Callable[[], str] = default_shm_size
    ) -> None:
        self._runner = runner
        self._shm_size = shm_size

    def _run(self, command: list[str]) -> None:
        try:
            done = self._runner(
                command, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SharingError(f"{' '.join(command)} failed: {exc}") from None
        if done.returncode != 0:
            output = " ".join((done.stdout + done.stderr).split())[:300]
            raise SharingError(f"{' '.join(command)} failed (exit {done.returncode}): {output}")

    def mounted(self, path: Path) -> bool:
        """Whether something is mounted on `path` (a reboot unmounts every shm tmpfs)."""
        return path.is_mount()

    def mount_shm(self, path: Path) -> None:
        options = f"rw,nosuid,nodev,noexec,relatime,size={self._shm_size()}"
        self._run(["mount", "-t", "tmpfs", "-o", options, "shm", str(path)])

    def unmount(self, path: Path) -> None:
        if self.mounted(path):
            self._run(["umount", str(path)])
