"""A fake driver root with a stub `nvidia-smi` that records its arguments and fails on demand, and a
mount table for the MPS shm tmpfs that records instead of mounting."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path
from typing import Any

from vke_gpu_dra.sharing.runners import Mounter
from vke_gpu_dra_core.device_model import Device

from .devices import full_gpu, mig_device

STUB = """#!/bin/sh
# Stub nvidia-smi: one line per call, then fail when the arguments contain the text in fail-on.
# With a path in watch: also one line per call in seen, "<arguments>\t<present|absent>" (that path).
root="$(dirname "$0")/../.."
echo "$*" >> "$root/nvidia-smi.calls"
if [ -s "$root/nvidia-smi.watch" ]; then
  if [ -e "$(cat "$root/nvidia-smi.watch")" ]; then seen=present; else seen=absent; fi
  printf '%s\t%s\n' "$*" "$seen" >> "$root/nvidia-smi.seen"
fi
if [ -s "$root/nvidia-smi.fail-on" ] && echo "$*" | grep -q -F -f "$root/nvidia-smi.fail-on"; then
  echo "Unable to set the compute mode for GPU: Insufficient Permissions" >&2
  exit 4
fi
exit 0
"""


class FakeDriverRoot:
    def __init__(self, root: Path) -> None:
        self.root = root
        binary = root / "usr" / "bin" / "nvidia-smi"
        binary.parent.mkdir(parents=True, exist_ok=True)
        binary.write_text(STUB)
        binary.chmod(binary.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)

    def calls(self) -> list[str]:
        path = self.root / "nvidia-smi.calls"
        return path.read_text().splitlines() if path.exists() else []

    def clear(self) -> None:
        (self.root / "nvidia-smi.calls").unlink(missing_ok=True)

    def fail_on(self, text: str) -> None:
        (self.root / "nvidia-smi.fail-on").write_text(text + "\n" if text else "")

    def watch(self, path: Path) -> None:
        """Record with every later call whether `path` exists (`seen`)."""
        (self.root / "nvidia-smi.watch").write_text(str(path))

    def seen(self) -> list[tuple[str, str]]:
        """(arguments, "present" or "absent") per call since `watch`."""
        path = self.root / "nvidia-smi.seen"
        lines = path.read_text().splitlines() if path.exists() else []
        return [(args, seen) for args, seen in (line.rsplit("\t", 1) for line in lines)]


class FakeMounts(Mounter):
    """The shm tmpfs mounts without mounting: records each command and knows what is mounted, so a
    retry sees the mount the first attempt made; `reboot()` forgets them all, as a reboot does."""

    def __init__(self) -> None:
        super().__init__(runner=self._record, shm_size=lambda: "1000k")
        self.commands: list[list[str]] = []
        self.paths: set[Path] = set()

    def _record(self, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.commands.append(command)
        if command[0] == "mount":
            self.paths.add(Path(command[-1]))
        elif command[0] == "umount":
            self.paths.discard(Path(command[-1]))
        return subprocess.CompletedProcess(command, 0, "", "")

    def mounted(self, path: Path) -> bool:
        return path in self.paths

    def reboot(self) -> None:
        self.paths.clear()


def gpu(index: int) -> Device:
    return full_gpu(index, f"GPU-{index:08d}-aaaa")


def mig(index: int) -> Device:
    return mig_device(index, f"MIG-{index:08d}-bbbb")
