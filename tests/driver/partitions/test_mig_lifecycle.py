"""MIG lifecycle over NVML, against the fake NVML's MIG API (profiles from the core MIG catalog)."""

import ctypes
import os
import subprocess
import sys
import textwrap

import pynvml
import pytest
from vke_gpu_dra.discovery.mig_lifecycle import (
    MigInUseError,
    MigLifecycle,
    MigLifecycleError,
    MigNotEnabledError,
    MigPlacementTakenError,
)
from vke_gpu_dra.discovery.nvml import NvmlSource
from vke_gpu_dra_core.mig_partitions import (
    MigPlacement,
    builtin_mig_catalog,
    mig_product,
    product_partitions,
)

from tests.driver.fake_nvml import mig_settings, write_config

A100_80 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
GPU0 = "GPU-00000000-0000-4000-8000-000000000000"
GPU1 = "GPU-00000000-0000-4000-8000-000000000001"


pytestmark = pytest.mark.usefixtures("release_pynvml")


@pytest.fixture
def configure(tmp_path, monkeypatch, fake_lib):
    """configure(settings): write the fake's configuration; its MIG state lives in tmp_path."""

    def run(settings):
        monkeypatch.setenv("FAKE_NVML_CONFIG", str(write_config(tmp_path / "fake-nvml.conf", settings)))
        monkeypatch.setenv("FAKE_NVML_MIG_STATE", str(tmp_path / "mig-state"))
        return MigLifecycle(library_path=fake_lib)

    return run


def two_gpus(mode0=1, mode1=1):
    return {
        "device_count": 2,
        **mig_settings(0, A100_80),
        **mig_settings(1, H100),
        "gpu.0.mig_mode": mode0,
        "gpu.1.mig_mode": mode1,
    }


def call_log(lib):
    handle = ctypes.CDLL(str(lib))
    handle.fakeNvmlMigCallLog.restype = ctypes.c_char_p
    return [line.split(" ")[0] for line in handle.fakeNvmlMigCallLog().decode().splitlines()]


def clear_log(lib):
    ctypes.CDLL(str(lib)).fakeNvmlMigClearCallLog()


@pytest.mark.parametrize(("gpu", "product"), [(GPU0, A100_80), (GPU1, H100)])
def test_nvml_profiles_and_placements_are_the_catalogs(configure, gpu, product):
    mig = configure(two_gpus())
    with mig.session() as session:
        reported = session.profiles(gpu)
    catalog = mig_product(product)
    assert sorted(reported, key=lambda p: p.index) == sorted(catalog.profiles, key=lambda p: p.index)
    # the partitions built from what NVML reports are those built from the catalog
    from vke_gpu_dra_core.mig_partitions import gpu_partitions

    assert gpu_partitions(0, reported) == product_partitions(product, 0)


@pytest.mark.parametrize("product", sorted(builtin_mig_catalog()))
def test_every_catalogued_product_is_served_by_the_fake_and_fills_up(configure, product):
    mig = configure({"device_count": 1, **mig_settings(0, product), "gpu.0.mig_mode": 1})
    catalog = mig_product(product)
    with mig.session() as session:
        [gpu] = session.gpus()
        reported = session.profiles(GPU0)
        # the layout of the guide's 7g diagram: 4g at 0, 3g at 4 (memory slices 0-3 and 4-7)
        four = next(p for p in catalog.profiles if p.slices == 4)
        three = next(p for p in catalog.profiles if p.slices == 3)
        session.create(GPU0, profile_id=four.profile_id, start=0)
        session.create(GPU0, profile_id=three.profile_id, start=4)
        with pytest.raises(MigPlacementTakenError):
            session.create(GPU0, profile_id=catalog.profiles[0].profile_id, start=0)
        placements = sorted((i.placement.start, i.placement.size) for i in session.instances(GPU0))
        assert placements == [(0, 4), (4, 4)]
    assert (gpu.product_name, gpu.mig_capable, gpu.mig_enabled) == (product, True, True)
    assert sorted(reported, key=lambda p: p.index) == sorted(catalog.profiles, key=lambda p: p.index)


def test_gpus_report_mig_capability_and_mode(configure):
    mig = configure({**two_gpus(mode1=0), "device_count": 3})
    with mig.session() as session:
        gpus = session.gpus()
    assert [(g.uuid, g.product_name, g.mig_capable, g.mig_enabled) for g in gpus] == [
        (GPU0, A100_80, True, True),
        (GPU1, H100, True, False),
        ("GPU-00000000-0000-4000-8000-000000000002", "NVIDIA A30", False, False),
    ]


def test_create_a_placement_then_destroy_it_with_nvmls_call_sequence(configure, fake_lib):
    mig = configure(two_gpus())
    with mig.session() as session:
        clear_log(fake_lib)
        created = session.create(GPU1, profile_id=19, start=3)
        create_calls = call_log(fake_lib)
        assert session.instances(GPU1) == [created]
        clear_log(fake_lib)
        session.destroy(GPU1, created.gi_id, created.ci_id)
        destroy_calls = call_log(fake_lib)
        assert session.instances(GPU1) == []
    assert (created.parent_uuid, created.profile_id, created.placement) == (GPU1, 19, MigPlacement(3, 1))
    assert created.uuid.startswith("MIG-") and created.ci_id == 0
    sequence = [c for c in create_calls if "ProfileInfo" not in c]
    assert sequence == [
        "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "nvmlGpuInstanceCreateComputeInstance",
        "nvmlGpuInstanceGetInfo",
        "nvmlComputeInstanceGetInfo_v2",
    ]
    assert [
        c for c in destroy_calls if c.startswith(("nvmlComputeInstanceDestroy", "nvmlGpuInstanceDestroy"))
    ] == [
        "nvmlComputeInstanceDestroy",
        "nvmlGpuInstanceDestroy",
    ]
    assert destroy_calls.index("nvmlComputeInstanceDestroy") < destroy_calls.index("nvmlGpuInstanceDestroy")


def test_overlapping_placement_is_refused_and_a_free_one_is_not(configure):
    mig = configure(two_gpus())
    with mig.session() as session:
        two_g = session.create(GPU0, profile_id=14, start=2)  # 2g.20gb: memory slices 2-3
        with pytest.raises(MigPlacementTakenError, match="nvmlDeviceCreateGpuInstanceWithPlacement failed"):
            session.create(GPU0, profile_id=19, start=3)
        with pytest.raises(MigPlacementTakenError):
            session.create(GPU0, profile_id=9, start=0)  # 3g.40gb: memory slices 0-3
        beside = session.create(GPU0, profile_id=19, start=4)
        assert [i.placement for i in session.instances(GPU0)] == [two_g.placement, beside.placement]
        assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(pynvml.nvmlDeviceGetHandleByIndex(0), 0) == 0
        with pytest.raises(MigLifecycleError, match="no placement starting at 1; allowed: 0, 2, 4"):
            session.create(GPU0, profile_id=14, start=1)
        with pytest.raises(
            MigLifecycleError, match="no GPU-instance profile 42; allowed: 19, 14, 9, 5, 0, 20, 15"
        ):
            session.create(GPU0, profile_id=42, start=0)


def test_destroying_a_gpu_instance_with_a_compute_instance_is_refused(configure):
    mig = configure(two_gpus())
    with mig.session() as session:
        created = session.create(GPU1, profile_id=15, start=6)
        with pytest.raises(MigInUseError, match="nvmlGpuInstanceDestroy failed"):
            session.destroy_gpu_instance(GPU1, created.gi_id)
        session.destroy_compute_instance_only(GPU1, created.gi_id, created.ci_id)
        assert session.gpu_instances_without_compute(GPU1) == [(created.gi_id, MigPlacement(6, 2))]
        session.destroy_gpu_instance(GPU1, created.gi_id)
        assert session.gpu_instances_without_compute(GPU1) == []
        session.destroy(GPU1, created.gi_id, created.ci_id)  # already gone: nothing to do


def test_mig_mode_off_or_unsupported_refuses_creation(configure):
    mig = configure({**two_gpus(mode1=0), "device_count": 3})
    with mig.session() as session:
        with pytest.raises(
            MigNotEnabledError, match=f"GPU {GPU1}: nvmlDeviceGetGpuInstancePossiblePlacements"
        ):
            session.create(GPU1, profile_id=19, start=0)
        with pytest.raises(MigNotEnabledError, match="no GPU-instance profiles"):
            session.create("GPU-00000000-0000-4000-8000-000000000002", profile_id=19, start=0)
        # MIG mode cannot change while a GPU instance exists
        session.create(GPU0, profile_id=0, start=0)
        with pytest.raises(pynvml.NVMLError_InUse):
            pynvml.nvmlDeviceSetMigMode(pynvml.nvmlDeviceGetHandleByIndex(0), 0)
        pynvml.nvmlDeviceSetMigMode(pynvml.nvmlDeviceGetHandleByIndex(1), 1)
        assert session.create(GPU1, profile_id=19, start=0).placement == MigPlacement(0, 1)


def test_created_devices_are_what_discovery_publishes_and_outlive_the_session(configure, fake_lib, tmp_path):
    mig = configure(two_gpus())
    with mig.session() as session:
        created = session.create(GPU0, profile_id=14, start=4)
    with mig.session() as session:
        assert session.instances(GPU0) == [created]
    sysfs, proc = tmp_path / "sys", tmp_path / "proc"
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    result = NvmlSource(library_path=fake_lib, sysfs_root=sysfs, proc_root=proc).discover()
    mig_devices = [d for d in result.devices if d.attributes.get("uuid") == created.uuid]
    assert len(mig_devices) == 1
    assert mig_devices[0].attributes["profile"] == "2g.20gb"


def test_a_kill_during_create_leaves_a_gpu_instance_a_restart_finds(configure, fake_lib, tmp_path):
    """The process dies right after the GI exists: the next session sees it, without a compute instance."""
    configure({**two_gpus(), "mig_crash_after": "nvmlDeviceCreateGpuInstanceWithPlacement"})
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from vke_gpu_dra.discovery.mig_lifecycle import MigLifecycle
        with MigLifecycle(library_path=Path({str(fake_lib)!r})).session() as session:
            session.create({GPU1!r}, profile_id=9, start=4)
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script], env=dict(os.environ), capture_output=True, check=False
    )
    assert run.returncode == -9
    mig = configure(two_gpus())
    with mig.session() as session:
        assert session.instances(GPU1) == []
        assert session.gpu_instances_without_compute(GPU1) == [(1, MigPlacement(4, 4))]
        session.destroy(GPU1, 1, None)
        assert session.gpu_instances_without_compute(GPU1) == []


class _ProfileInfoV3(ctypes.Structure):
    """nvmlGpuInstanceProfileInfo_v3_t as nvml.h lays it out (pynvml has no v3)."""

    _fields_ = [
        *((name, ctypes.c_uint) for name in ("version", "id", "sliceCount", "instanceCount")),
        *((name, ctypes.c_uint) for name in ("multiprocessorCount", "copyEngineCount", "decoderCount")),
        *((name, ctypes.c_uint) for name in ("encoderCount", "jpegCount", "ofaCount")),
        ("memorySizeMB", ctypes.c_ulonglong),
        ("name", ctypes.c_char * 96),
        ("capabilities", ctypes.c_uint),
    ]


def test_the_fake_answers_every_profile_info_version_alike(configure, fake_lib):
    mig = configure(two_gpus())
    with mig.session():
        handle = pynvml.nvmlDeviceGetHandleByIndex(1)
        v1 = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, 9, version=1)
        v2 = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, 9)
        by_id = pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(handle, 15)
        v3 = _ProfileInfoV3(version=0x03000098)
        rc = ctypes.CDLL(str(fake_lib)).nvmlDeviceGetGpuInstanceProfileInfoV(handle, 9, ctypes.byref(v3))
    assert rc == 0
    for info in (v1, v2, by_id, v3):
        assert (info.id, info.sliceCount, info.multiprocessorCount, info.memorySizeMB) == (15, 1, 26, 20096)
    assert (v2.name, v3.name, v2.instanceCount, v3.instanceCount) == ("MIG 1g.20gb", b"MIG 1g.20gb", 4, 4)
