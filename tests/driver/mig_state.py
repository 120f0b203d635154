"""A node's device state with dynamic MIG over the fake NVML, for in-process and process-level tests.

`open_state(root, lib)` discovers the fake's GPUs (MIG mode on: published whole plus placements), builds
the partition manager over NVML and opens `DeviceState` on `root` (checkpoint, CDI specs, the MIG
capability table under `root/proc`). Run as a script (`python -m tests.driver.mig_state ROOT LIB ACTION
UID DEVICE...`) it prepares or unprepares one claim, for the kill -9 tests.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from vke_gpu_dra.discovery.mig_lifecycle import MigLifecycle
from vke_gpu_dra.discovery.nvml import NvmlSource
from vke_gpu_dra.partitions.backends import NvmlMigBackend
from vke_gpu_dra.partitions.setup import DynamicMig, nvml_dynamic_mig
from vke_gpu_dra.state import DeviceState
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import ClaimRef

from tests.driver.claim_objects import claim, result

POOL = "node-a"


def write_mig_minors(proc: Path, gpus: int = 2) -> None:
    """The kernel module's capability table: an access node for every GI and CI id of `gpus` GPUs."""
    lines, minor = [], 1
    for gpu in range(gpus):
        for gi in range(15):
            lines.append(f"gpu{gpu}/gi{gi}/access {minor}")
            minor += 1
            for ci in range(8):
                lines.append(f"gpu{gpu}/gi{gi}/ci{ci}/access {minor}")
                minor += 1
    path = proc / "driver" / "nvidia-caps" / "mig-minors"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def open_state(root: Path, lib: Path, *, boot_id: str | None = None) -> tuple[DeviceState, DynamicMig]:
    sysfs, proc = root / "sys", root / "proc"
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
    write_mig_minors(proc)
    devices = (
        NvmlSource(library_path=lib, sysfs_root=sysfs, proc_root=proc, dynamic_mig=True).discover().devices
    )
    lifecycle = MigLifecycle(library_path=lib)
    dynamic = nvml_dynamic_mig(devices, NvmlMigBackend(lifecycle, proc), lifecycle)
    state = DeviceState(
        driver_name=facts.DRIVER_NAME,
        pool_name=POOL,
        devices=dynamic.devices,
        cdi_root=root / "cdi",
        plugin_data_dir=root / "data",
        partitions=dynamic.manager,
        boot_id=boot_id,
    )
    return state, dynamic


def claim_of(uid: str, *devices: str) -> dict[str, Any]:
    return claim(uid, *(result(d, pool=POOL) for d in devices), name=f"c-{uid}")


def ref(uid: str) -> ClaimRef:
    return ClaimRef("default", f"c-{uid}", uid)


def main(argv: list[str]) -> None:
    root, lib, action, uid, *devices = argv
    state, _ = open_state(Path(root), Path(lib))
    if action == "prepare":
        state.prepare(ref(uid), claim_of(uid, *devices))
    else:
        state.unprepare(ref(uid))


if __name__ == "__main__":
    main(sys.argv[1:])
