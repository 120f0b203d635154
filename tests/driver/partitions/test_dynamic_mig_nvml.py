"""Dynamic MIG over NVML (the fake NVML's MIG API, profiles from the catalog): the NVML call sequence of
a prepare and an unprepare, two MIG devices of one GPU in one claim, a GPU with MIG mode off, and kill -9
at every NVML step of a create and a destroy followed by a restart."""

from __future__ import annotations

import ctypes
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from vke_gpu_dra.cdi import claim_spec_path
from vke_gpu_dra.claims.checkpoint import ClaimState
from vke_gpu_dra.discovery.mig_lifecycle import MigLifecycle
from vke_gpu_dra.discovery.nvml import NvmlSource
from vke_gpu_dra.partitions.records import MigDevices
from vke_gpu_dra.partitions.setup import nvml_dynamic_mig_at
from vke_gpu_dra.state import checkpoint_store

from tests.driver.fake_nvml import mig_settings, write_config
from tests.driver.mig_state import claim_of, open_state, ref

A100_80 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
GPU0 = "GPU-00000000-0000-4000-8000-000000000000"
GPU1 = "GPU-00000000-0000-4000-8000-000000000001"
REPO = Path(__file__).resolve().parents[3]


pytestmark = pytest.mark.usefixtures("release_pynvml")


def settings(mode0: int = 1, mode1: int = 1, **extra: object) -> dict[str, object]:
    return {
        "device_count": 2,
        **mig_settings(0, A100_80),
        **mig_settings(1, H100),
        "gpu.0.mig_mode": mode0,
        "gpu.1.mig_mode": mode1,
        **extra,
    }


@pytest.fixture
def configure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def run(values: dict[str, object]) -> None:
        monkeypatch.setenv("FAKE_NVML_CONFIG", str(write_config(tmp_path / "fake-nvml.conf", values)))
        monkeypatch.setenv("FAKE_NVML_MIG_STATE", str(tmp_path / "mig-state"))

    return run


def call_log(lib: Path) -> list[str]:
    handle = ctypes.CDLL(str(lib))
    handle.fakeNvmlMigCallLog.restype = ctypes.c_char_p
    return [line.split(" ")[0] for line in handle.fakeNvmlMigCallLog().decode().splitlines()]


CHANGES = {
    "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlGpuInstanceCreateComputeInstance",
    "nvmlComputeInstanceDestroy",
    "nvmlGpuInstanceDestroy",
}


def changes(lib: Path) -> list[str]:
    return [c for c in call_log(lib) if c in CHANGES]


def instances(lib: Path, gpu: str) -> tuple[list, list]:
    with MigLifecycle(library_path=lib).session() as mig:
        return mig.instances(gpu), mig.gpu_instances_without_compute(gpu)


def test_prepare_creates_and_unprepare_destroys_in_nvmls_order(
    configure, fake_lib: Path, tmp_path: Path
) -> None:
    configure(settings())
    state, _ = open_state(tmp_path / "node", fake_lib)
    ctypes.CDLL(str(fake_lib)).fakeNvmlMigClearCallLog()
    prepared = state.prepare(ref("u1"), claim_of("u1", "gpu-1-mig-1g10gb-19-0", "gpu-1-mig-3g40gb-9-4"))
    assert [p.device_name for p in prepared] == ["gpu-1-mig-1g10gb-19-0", "gpu-1-mig-3g40gb-9-4"]
    assert changes(fake_lib) == [
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "nvmlGpuInstanceCreateComputeInstance",
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "nvmlGpuInstanceCreateComputeInstance",
    ]
    created, empty = instances(fake_lib, GPU1)
    assert [(i.profile_id, i.placement.start) for i in created] == [(19, 0), (9, 4)] and empty == []
    # two devices of one GPU in one claim: two CDI devices, each with its own capability nodes
    spec = yaml.safe_load(claim_spec_path(tmp_path / "node" / "cdi", "u1").read_text())
    nodes = {d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]] for d in spec["devices"]}
    assert list(nodes) == ["u1-gpu-1-mig-1g10gb-19-0", "u1-gpu-1-mig-3g40gb-9-4"]
    first, second = nodes.values()
    assert first[0] == second[0] == "/dev/nvidia1"
    assert len(first) == len(second) == 3 and set(first[1:]).isdisjoint(second[1:])
    assert all(p.startswith("/dev/nvidia-caps/nvidia-cap") for p in first[1:] + second[1:])
    (entry,) = checkpoint_store(tmp_path / "node" / "data").load().entries.values()
    assert entry.state is ClaimState.PREPARE_COMPLETED
    assert sorted(r.uuid for r in MigDevices.of(entry)) == sorted(i.uuid for i in created)  # type: ignore[type-var]
    ctypes.CDLL(str(fake_lib)).fakeNvmlMigClearCallLog()
    state.unprepare(ref("u1"))
    assert changes(fake_lib) == [
        "nvmlComputeInstanceDestroy",
        "nvmlGpuInstanceDestroy",
        "nvmlComputeInstanceDestroy",
        "nvmlGpuInstanceDestroy",
    ]
    assert instances(fake_lib, GPU1) == ([], [])
    assert checkpoint_store(tmp_path / "node" / "data").load().entries == {}


def test_a_gpu_with_mig_mode_off_is_published_whole(
    configure, fake_lib: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    configure(settings(mode0=0))
    with caplog.at_level(logging.WARNING):
        state, dynamic = open_state(tmp_path / "node", fake_lib)
    names = [d.name for d in state.devices]
    assert [n for n in names if n.startswith("gpu-0")] == ["gpu-0"]
    assert "gpu-1-mig-1g10gb-19-0" in names and "gpu-1" in names
    assert [g.whole.name for g in dynamic.manager.gpus] == ["gpu-1"]
    assert "supports MIG but its MIG mode is off" in caplog.text


def test_a_gpu_without_mig_support_is_published_as_without_the_gate(
    configure, fake_lib: Path, tmp_path: Path
) -> None:
    values = settings()
    values.update({"gpu.0.mig_mode": -1})  # NOT_SUPPORTED, as on a GPU without MIG
    configure(values)
    state, dynamic = open_state(tmp_path / "node", fake_lib)
    assert [d.name for d in state.devices if d.name.startswith("gpu-0")] == ["gpu-0"]
    assert [g.whole.name for g in dynamic.manager.gpus] == ["gpu-1"]


def run_step(root: Path, lib: Path, *args: str) -> int:
    return subprocess.run(
        [sys.executable, "-m", "tests.driver.mig_state", str(root), str(lib), *args],
        cwd=REPO,
        env=dict(os.environ),
        capture_output=True,
        check=False,
    ).returncode


@pytest.mark.parametrize(
    ("crash", "action"),
    [
        ("nvmlDeviceCreateGpuInstanceWithPlacement", "prepare"),
        ("nvmlGpuInstanceCreateComputeInstance", "prepare"),
        ("nvmlComputeInstanceDestroy", "unprepare"),
        ("nvmlGpuInstanceDestroy", "unprepare"),
    ],
)
def test_kill_9_in_a_create_or_destroy_leaves_nothing_a_restart_does_not_clean(
    configure, fake_lib: Path, tmp_path: Path, crash: str, action: str
) -> None:
    root = tmp_path / "node"
    device = "gpu-1-mig-4g40gb-5-0"
    configure(settings())
    if action == "unprepare":
        assert run_step(root, fake_lib, "prepare", "u1", device) == 0
        assert len(instances(fake_lib, GPU1)[0]) == 1
    configure(settings(mig_crash_after=crash))
    assert run_step(root, fake_lib, action, "u1", device) == -9
    configure(settings())
    # the restart: no GPU instance without compute instance, every instance owned by a checkpoint entry
    state, _ = open_state(root, fake_lib)
    entries = state.entries()
    owned = [(r.parent_uuid, r.profile_id, r.start) for e in entries.values() for r in MigDevices.of(e)]
    created, empty = instances(fake_lib, GPU1)
    assert empty == []
    assert all((GPU1, i.profile_id, i.placement.start) in owned for i in created)
    assert list(entries) == ["u1"]  # the claim's entry stays until kubelet's unprepare succeeds
    # kubelet's retry of the interrupted call finishes it; its unprepare leaves nothing at all
    if action == "prepare":
        state.prepare(ref("u1"), claim_of("u1", device))
        assert len(instances(fake_lib, GPU1)[0]) == 1
    state.unprepare(ref("u1"))
    assert instances(fake_lib, GPU1) == ([], [])
    assert instances(fake_lib, GPU0) == ([], [])
    assert state.entries() == {}


def test_a_restart_destroys_an_instance_no_claim_owns(configure, fake_lib: Path, tmp_path: Path) -> None:
    configure(settings())
    with MigLifecycle(library_path=fake_lib).session() as mig:
        mig.create(GPU0, profile_id=19, start=6)
    open_state(tmp_path / "node", fake_lib)
    assert instances(fake_lib, GPU0) == ([], [])


def test_a_reboot_creates_the_prepared_mig_devices_again(configure, fake_lib: Path, tmp_path: Path) -> None:
    configure(settings())
    root = tmp_path / "node"
    state, _ = open_state(root, fake_lib, boot_id="boot-1")
    state.prepare(ref("u1"), claim_of("u1", "gpu-0-mig-2g20gb-14-4"))
    assert len(instances(fake_lib, GPU0)[0]) == 1
    (tmp_path / "mig-state").unlink()  # the reboot: the fake's MIG state is gone, as the GPU's is
    state, _ = open_state(root, fake_lib, boot_id="boot-2")
    assert state.reboot is not None and state.reboot.restored == ("u1",)
    (after,) = instances(fake_lib, GPU0)[0]
    assert (after.profile_id, after.placement.start) == (14, 4)
    (entry,) = state.entries().values()
    record = MigDevices.of(entry).records[0]
    assert (record.uuid, record.gi_id, record.ci_id) == (after.uuid, after.gi_id, after.ci_id)
    spec = yaml.safe_load(claim_spec_path(root / "cdi", "u1").read_text())
    (device,) = spec["devices"]
    assert [n["path"] for n in device["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidia0",
        *record.caps_nodes,
    ]


def test_the_plugins_nvml_set_up_finds_nvml_under_the_driver_root(
    configure, fake_lib: Path, tmp_path: Path
) -> None:
    """What the plugin calls in nvml mode: NVML looked up under --nvidia-driver-root, as discovery does."""
    configure(settings(mode0=0))
    driver_root = tmp_path / "driver-root"
    (driver_root / "usr" / "lib64").mkdir(parents=True)
    (driver_root / "usr" / "lib64" / "libnvidia-ml.so.1").write_bytes(fake_lib.read_bytes())
    sysfs = tmp_path / "sys"
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    source = NvmlSource(driver_root=driver_root, sysfs_root=sysfs, dynamic_mig=True)
    dynamic = nvml_dynamic_mig_at(driver_root, source.discover().devices)
    assert [g.whole.name for g in dynamic.manager.gpus] == ["gpu-1"]
    assert [d.name for d in dynamic.devices][:3] == ["gpu-0", "gpu-1", "gpu-1-mig-1g10gb-19-0"]
    assert len(dynamic.devices) == 2 + len(dynamic.manager.gpus[0].placements)
