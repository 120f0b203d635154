"""`python -m tests.driver.sharing_plugin <plugin flags>`: the plugin's own entry point for process-level
tests of GPU sharing without GPUs.

Two things differ from `python -m vke_gpu_dra`: the simulated GPUs take sharing as real ones do (a
simulated device otherwise has nothing to set, so the stub nvidia-smi of `--nvidia-driver-root` is
never called), and the MPS shm tmpfs is recorded in the file named by `$FAKE_MOUNTS_FILE` instead of
mounted (one path a line; a test removes the file to stand for a reboot).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from vke_gpu_dra import plugin
from vke_gpu_dra.__main__ import main
from vke_gpu_dra.config import Config
from vke_gpu_dra.sharing.manager import SharingManager
from vke_gpu_dra.sharing.runners import Mounter
from vke_gpu_dra_core.discovery import DeviceSource, DiscoveryResult


class ShareableSource:
    """The simulated source's GPUs as real ones (`/dev/nvidia<N>`), so that prepare applies their sharing."""

    def __init__(self, inner: DeviceSource) -> None:
        self._inner = inner

    def discover(self) -> DiscoveryResult:
        found = self._inner.discover()
        devices = []
        for d in found.devices:
            minor = int(d.name.removeprefix("gpu-"))
            nodes = (f"/dev/nvidia{minor}",)
            devices.append(dataclasses.replace(d, simulated=False, minor=minor, device_nodes=nodes))
        return dataclasses.replace(found, devices=devices)


class FileMounts(Mounter):
    """Mounts kept as lines of a file, which outlives the process as a mount outlives the plugin."""

    def __init__(self, table: Path) -> None:
        super().__init__(runner=self._record, shm_size=lambda: "1000k")
        self._table = table
        self._lock = threading.Lock()

    def _paths(self) -> set[str]:
        return set(self._table.read_text().splitlines()) if self._table.exists() else set()

    def _record(self, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        with self._lock:
            paths = self._paths()
            if command[0] == "mount":
                paths.add(command[-1])
            elif command[0] == "umount":
                paths.discard(command[-1])
            self._table.write_text("".join(f"{p}\n" for p in sorted(paths)))
        return subprocess.CompletedProcess(command, 0, "", "")

    def mounted(self, path: Path) -> bool:
        with self._lock:
            return str(path) in self._paths()


def _install() -> None:
    make_source = plugin.make_source
    build_manager = plugin.Plugin._sharing_manager

    def shareable_source(config: Config, *, dynamic_mig: bool = False) -> DeviceSource:
        return ShareableSource(make_source(config, dynamic_mig=dynamic_mig))

    def manager_with_file_mounts(self: plugin.Plugin) -> SharingManager:
        manager = build_manager(self)
        manager.mounter = FileMounts(Path(os.environ["FAKE_MOUNTS_FILE"]))
        return manager

    plugin.make_source = shareable_source
    plugin.Plugin._sharing_manager = manager_with_file_mounts  # type: ignore[method-assign]


if __name__ == "__main__":
    _install()
    sys.exit(main())
