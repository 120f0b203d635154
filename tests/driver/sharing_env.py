"""A fake driver root with a stub `nvidia-smi` that records its arguments and fails on demand."""

from __future__ import annotations

import stat
from pathlib import Path

from vke_gpu_dra_core.device_model import Device

from .devices import full_gpu, mig_device

STUB = """#!/bin/sh
# Stub nvidia-smi: one line per call, then fail when the arguments contain the text in fail-on.
root="$(dirname "$0")/../.."
echo "$*" >> "$root/nvidia-smi.calls"
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


def gpu(index: int) -> Device:
    return full_gpu(index, f"GPU-{index:08d}-aaaa")


def mig(index: int) -> Device:
    return mig_device(index, f"MIG-{index:08d}-bbbb")
