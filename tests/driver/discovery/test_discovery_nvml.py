import logging
import os
import shutil
import subprocess
import sys
import textwrap

import pynvml
import pytest
from vke_gpu_dra.discovery.nvml import LIBRARY_DIRS, NvmlSource, NvmlUnavailableError, find_library
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Version
from vke_gpu_dra_core.discovery import DeviceSource, DiscoveryError

from tests.driver.fake_nvml import write_config
from tests.driver.slice_check import assert_publishable

GIB = 2**30
A100_40GB = 40960 * 2**20

#: NVML GPU-instance profiles of an A100-SXM4-40GB: index -> id,slices,SMs,CE,dec,enc,jpeg,ofa,MiB.
A100_PROFILES = {
    0: "19,1,14,1,0,0,0,0,4864",
    1: "14,2,28,2,1,0,0,0,9856",
    2: "9,3,42,3,2,0,0,0,19968",
    3: "5,4,56,4,2,0,0,0,19968",
    4: "0,7,98,7,5,0,1,1,40192",
    7: "20,1,14,1,1,0,1,1,4864",
    9: "15,1,14,1,1,0,0,0,9856",
}


pytestmark = pytest.mark.usefixtures("release_pynvml")


@pytest.fixture
def host(tmp_path):
    """Fake sysfs and procfs roots."""
    sysfs, proc = tmp_path / "sys", tmp_path / "proc"
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    (proc / "driver" / "nvidia-caps").mkdir(parents=True)
    return sysfs, proc


@pytest.fixture
def discover(fake_lib, host, tmp_path, monkeypatch):
    """discover(settings): configure the fake and run an NvmlSource over the fake host roots."""

    def run(settings):
        configure(monkeypatch, tmp_path, settings)
        return NvmlSource(library_path=fake_lib, sysfs_root=host[0], proc_root=host[1]).discover()

    return run


def pci_link(sysfs, bdf, root):
    os.symlink(f"../../../devices/{root}/{root[3:]}:00.0/{bdf}", sysfs / "bus" / "pci" / "devices" / bdf)


def configure(monkeypatch, tmp_path, settings):
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(write_config(tmp_path / "fake-nvml.conf", settings)))


def counts(lib):
    import ctypes

    handle = ctypes.CDLL(str(lib))
    return handle.fakeNvmlInitCount(), handle.fakeNvmlShutdownCount()


def test_full_gpus_match_the_vke_sample(fake_lib, host, tmp_path, monkeypatch):
    sysfs, proc = host
    pci_link(sysfs, "0000:65:01.0", "pci0000:64")
    pci_link(sysfs, "0000:3b:00.0", "pci0000:3a")
    configure(
        monkeypatch,
        tmp_path,
        {
            "device_count": 2,
            "driver_version": "535.129.03",
            "cuda_driver_version": 12020,
            "gpu.0.bus_id": "00000000:65:01.0",
            "gpu.0.uuid": "GPU-4b0e1a8c-aaaa-bbbb-cccc-000000000001",
            "gpu.1.bus_id": "00000000:3B:00.0",
            "gpu.1.minor": 4,
            "gpu.1.name": "Tesla T4",
            "gpu.1.arch": 6,
            "gpu.1.cc": "7.5",
            "gpu.1.memory": 15360 * 2**20,
            "gpu.1.brand": 2,
        },
    )
    source = NvmlSource(library_path=fake_lib, sysfs_root=sysfs, proc_root=proc)
    assert isinstance(source, DeviceSource)
    before = counts(fake_lib)
    result = source.discover()
    after = counts(fake_lib)
    assert result.problems == []
    assert [d.name for d in result.devices] == ["gpu-0", "gpu-4"]
    a30 = result.devices[0]
    assert dict(a30.attributes) == {
        facts.ATTR_TYPE: "gpu",
        facts.ATTR_UUID: "GPU-4b0e1a8c-aaaa-bbbb-cccc-000000000001",
        facts.ATTR_PRODUCT_NAME: "NVIDIA A30",
        facts.ATTR_BRAND: "Nvidia",
        facts.ATTR_ARCHITECTURE: "Ampere",
        facts.ATTR_CUDA_COMPUTE_CAPABILITY: Version("8.0.0"),
        facts.ATTR_DRIVER_VERSION: Version("535.129.3"),
        facts.ATTR_CUDA_DRIVER_VERSION: Version("12.2.0"),
        facts.ATTR_PCIE_BUS_ID: "0000:65:01.0",
        facts.ATTR_PCI_BUS_ID: "0000:65:01.0",
        facts.ATTR_PCIE_ROOT: "pci0000:64",
    }
    assert a30.slice_entry()["capacity"] == {"memory": {"value": "24Gi"}}
    assert (a30.minor, a30.device_nodes, a30.simulated) == (0, ("/dev/nvidia0",), False)
    t4 = result.devices[1]
    assert t4.device_nodes == ("/dev/nvidia4",)
    assert (t4.attributes[facts.ATTR_BRAND], t4.attributes[facts.ATTR_ARCHITECTURE]) == ("Tesla", "Turing")
    assert t4.attributes[facts.ATTR_CUDA_COMPUTE_CAPABILITY] == Version("7.5.0")
    assert_publishable(result.devices)
    assert after[0] - before[0] == 1 and after[1] - before[1] == 1  # init and shutdown once each


def mig_settings(**extra):
    settings = {
        "device_count": 1,
        "gpu.0.name": "NVIDIA A100-SXM4-40GB",
        "gpu.0.memory": A100_40GB,
        "gpu.0.mig_mode": 1,
        "gpu.0.mig_max": 7,
        "gpu.0.uuid": "GPU-parent",
        **{f"gpu.0.profile.{i}": row for i, row in A100_PROFILES.items()},
        # slot: uuid, GI id, CI id, profile index, placement start, placement size, CI slices
        "gpu.0.mig.0": "MIG-a,1,0,2,4,4,3",
        "gpu.0.mig.2": "MIG-b,5,0,1,0,2,2",
        "gpu.0.mig.3": "MIG-c,9,0,0,2,1,1",
        "gpu.0.mig.4": "MIG-d,10,0,7,3,1,1",
    }
    settings.update(extra)
    return settings


def test_mig_gpu_publishes_only_its_mig_devices(fake_lib, host, tmp_path, monkeypatch):
    sysfs, proc = host
    pci_link(sysfs, "0000:3b:00.0", "pci0000:3a")
    (proc / "driver" / "nvidia-caps" / "mig-minors").write_text(
        "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu0/gi5/access 48\n"
        "gpu0/gi5/ci0/access 49\ngpu0/gi9/access 93\ngpu0/gi9/ci0/access 94\n"
    )
    configure(monkeypatch, tmp_path, mig_settings())
    result = NvmlSource(library_path=fake_lib, sysfs_root=sysfs, proc_root=proc).discover()
    assert result.problems == []
    by_name = {d.name: d for d in result.devices}
    assert sorted(by_name) == ["gpu-0-mig-14-0-2", "gpu-0-mig-19-2-1", "gpu-0-mig-20-3-1", "gpu-0-mig-9-4-4"]
    big = by_name["gpu-0-mig-9-4-4"]
    assert big.device_type == facts.DEVICE_TYPE_MIG and big.uuid == "MIG-a"
    assert big.attributes[facts.ATTR_TYPE] == facts.DEVICE_TYPE_MIG
    assert big.attributes[facts.ATTR_PARENT_UUID] == "GPU-parent"
    assert big.attributes[facts.ATTR_PROFILE] == "3g.20gb"
    assert big.attributes[facts.ATTR_PRODUCT_NAME] == "NVIDIA A100-SXM4-40GB"
    assert big.attributes[facts.ATTR_PCIE_ROOT] == "pci0000:3a"
    assert big.slice_entry()["capacity"] == {
        facts.CAPACITY_COPY_ENGINES: {"value": "3"},
        facts.CAPACITY_DECODERS: {"value": "2"},
        facts.CAPACITY_ENCODERS: {"value": "0"},
        facts.CAPACITY_JPEG_ENGINES: {"value": "0"},
        facts.CAPACITY_MEMORY: {"value": "19968Mi"},
        facts.CAPACITY_MULTIPROCESSORS: {"value": "42"},
        facts.CAPACITY_OFA_ENGINES: {"value": "0"},
        **{f"{facts.CAPACITY_MEMORY_SLICE_PREFIX}{i}": {"value": "1"} for i in range(4, 8)},
    }
    assert big.device_nodes == (
        "/dev/nvidia0",
        "/dev/nvidia-caps/nvidia-cap12",
        "/dev/nvidia-caps/nvidia-cap13",
    )
    assert by_name["gpu-0-mig-14-0-2"].attributes[facts.ATTR_PROFILE] == "2g.10gb"
    assert by_name["gpu-0-mig-19-2-1"].attributes[facts.ATTR_PROFILE] == "1g.5gb"
    assert by_name["gpu-0-mig-20-3-1"].attributes[facts.ATTR_PROFILE] == "1g.5gb+me"
    # no caps entries for GI 10: published with the parent node only
    assert by_name["gpu-0-mig-20-3-1"].device_nodes == ("/dev/nvidia0",)
    assert_publishable(result.devices)


def test_compute_instance_smaller_than_its_gpu_instance(discover):
    settings = mig_settings(**{"gpu.0.mig.0": "MIG-a,1,0,2,0,4,1"})
    for slot in (2, 3, 4):
        settings.pop(f"gpu.0.mig.{slot}")
    result = discover(settings)
    assert [d.attributes[facts.ATTR_PROFILE] for d in result.devices] == ["1c.3g.20gb"]


def test_mig_enabled_without_mig_devices_is_reported(discover):
    settings = {k: v for k, v in mig_settings().items() if ".mig." not in k}
    settings["device_count"] = 2
    result = discover(settings)
    assert [d.name for d in result.devices] == ["gpu-1"]
    assert result.problems == [
        "GPU index 0 (GPU-parent): MIG is enabled but there are no MIG devices; nothing published",
    ]


@pytest.mark.parametrize(
    ("fail", "problem"),
    [
        ("nvmlDeviceGetUUID:999", "GPU index 1: nvmlDeviceGetUUID failed: Unknown Error; GPU left out"),
        (
            "nvmlDeviceGetHandleByIndex_v2:15",
            "GPU index 1: nvmlDeviceGetHandleByIndex failed: GPU is lost; GPU left out",
        ),
        (
            "nvmlDeviceGetMemoryInfo:15",
            "GPU index 1 (GPU-00000000-0000-4000-8000-000000000001): "
            "nvmlDeviceGetMemoryInfo failed: GPU is lost; GPU left out",
        ),
        (
            "nvmlDeviceGetPciInfo_v3:3",
            "GPU index 1 (GPU-00000000-0000-4000-8000-000000000001): "
            "nvmlDeviceGetPciInfo failed: Not Supported; GPU left out",
        ),
        ("nvmlDeviceGetMigMode:999", "nvmlDeviceGetMigMode failed: Unknown Error; GPU left out"),
    ],
)
def test_a_failing_gpu_is_reported_and_left_out(discover, fail, problem):
    result = discover({"device_count": 3, "gpu.1.fail": fail})
    assert [d.name for d in result.devices] == ["gpu-0", "gpu-2"]
    assert len(result.problems) == 1 and result.problems[0].endswith(problem)


def test_unknown_enum_values_leave_the_gpu_out(discover):
    result = discover({"device_count": 2, "gpu.0.arch": 42, "gpu.1.brand": 99})
    assert result.devices == []
    assert result.problems[0].startswith(
        "GPU index 0 (GPU-00000000-0000-4000-8000-000000000000): unknown architecture value 42 (known: "
    )
    assert "unknown brand value 99" in result.problems[1]


def test_a_failing_mig_device_is_reported_and_left_out(discover):
    result = discover(mig_settings(**{"gpu.0.mig.3.fail": "nvmlComputeInstanceGetInfo_v2:999"}))
    assert len(result.devices) == 3
    assert result.problems == [
        "GPU index 0 (GPU-parent) MIG slot 3 (MIG-c): nvmlComputeInstanceGetInfo failed: Unknown Error; "
        "MIG device left out",
    ]


@pytest.mark.parametrize(("value", "published"), [(0, "None"), (1, "HMM"), (2, "ATS")])
def test_addressing_mode_is_published_on_gpus_and_their_mig_devices(discover, value, published):
    settings = mig_settings(
        **{"device_count": 2, "gpu.0.addressing_mode": value, "gpu.1.addressing_mode": value}
    )
    result = discover(settings)
    assert result.problems == []
    assert {d.attributes[facts.ATTR_ADDRESSING_MODE] for d in result.devices} == {published}
    assert {d.device_type for d in result.devices} == {facts.DEVICE_TYPE_GPU, facts.DEVICE_TYPE_MIG}
    assert_publishable(result.devices)


def test_addressing_mode_not_supported_is_no_attribute(discover):
    result = discover({"device_count": 1})  # the fake answers NOT_SUPPORTED, as a PCIe server does
    assert result.problems == []
    assert facts.ATTR_ADDRESSING_MODE not in result.devices[0].attributes


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        (
            {"gpu.1.fail": "nvmlDeviceGetAddressingMode:999"},
            "nvmlDeviceGetAddressingMode failed: Unknown Error",
        ),
        ({"gpu.1.addressing_mode": 7}, "unknown addressing mode value 7 (known: 0 None, 1 HMM, 2 ATS)"),
    ],
)
def test_addressing_mode_failure_leaves_the_gpu_out(discover, settings, problem):
    result = discover({"device_count": 2, **settings})
    assert [d.name for d in result.devices] == ["gpu-0"]
    assert result.problems == [
        f"GPU index 1 (GPU-00000000-0000-4000-8000-000000000001): {problem}; GPU left out"
    ]


def test_missing_pcie_root_is_omitted_with_a_warning(fake_lib, host, tmp_path, monkeypatch, caplog):
    configure(monkeypatch, tmp_path, {"device_count": 1})
    with caplog.at_level(logging.WARNING):
        result = NvmlSource(library_path=fake_lib, sysfs_root=host[0], proc_root=host[1]).discover()
    assert facts.ATTR_PCIE_ROOT not in result.devices[0].attributes
    assert result.problems == []
    assert any(f"{facts.ATTR_PCIE_ROOT} omitted" in r.getMessage() for r in caplog.records)
    assert_publishable(result.devices)


def test_bad_driver_version_publishes_nothing(discover):
    result = discover({"device_count": 1, "driver_version": "r535"})
    assert result.devices == []
    assert result.problems == [
        "no GPUs published: version 'r535' is not MAJOR[.MINOR[.PATCH]] with decimal parts",
    ]


def test_driver_not_loaded_is_a_clear_error(fake_lib, tmp_path, monkeypatch):
    configure(monkeypatch, tmp_path, {"init_error": 9})
    with pytest.raises(NvmlUnavailableError, match="NVIDIA kernel driver is not loaded") as err:
        NvmlSource(library_path=fake_lib).discover()
    assert isinstance(err.value, DiscoveryError)


def test_library_found_under_the_driver_root(fake_lib, host, tmp_path, monkeypatch):
    root = tmp_path / "driver-root"
    (root / "usr" / "lib" / "x86_64-linux-gnu").mkdir(parents=True)
    (root / "lib64").mkdir(parents=True)
    shutil.copy(fake_lib, root / "usr" / "lib" / "x86_64-linux-gnu" / "libnvidia-ml.so.1")
    shutil.copy(fake_lib, root / "lib64" / "libnvidia-ml.so.1")
    assert find_library(root) == root / "usr" / "lib" / "x86_64-linux-gnu" / "libnvidia-ml.so.1"
    assert LIBRARY_DIRS[0] == "usr/lib64"
    configure(monkeypatch, tmp_path, {"device_count": 1})
    result = NvmlSource(driver_root=root, sysfs_root=host[0], proc_root=host[1]).discover()
    assert [d.name for d in result.devices] == ["gpu-0"]


def test_library_missing_everywhere_is_a_clear_error(tmp_path, monkeypatch):
    def no_library(name, *args, **kwargs):
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(pynvml, "CDLL", no_library)  # the default loader finds nothing either
    message = r"libnvidia-ml\.so\.1 not found in .*driver-root \(usr/lib64"
    with pytest.raises(NvmlUnavailableError, match=message):
        NvmlSource(driver_root=tmp_path / "driver-root").discover()


def test_unloadable_library_path_is_a_clear_error(tmp_path):
    bogus = tmp_path / "libnvidia-ml.so.1"
    bogus.write_text("not an ELF file")
    with pytest.raises(NvmlUnavailableError, match=r"cannot load NVML library .*libnvidia-ml\.so\.1"):
        NvmlSource(library_path=bogus).discover()


def test_default_loader_with_ld_library_path(fake_lib, tmp_path):
    """No path configured: pynvml's own dlopen("libnvidia-ml.so.1") finds the fake via LD_LIBRARY_PATH."""
    config = write_config(tmp_path / "conf", {"device_count": 2, "gpu.1.minor": 7})
    code = textwrap.dedent("""
        from vke_gpu_dra.discovery.nvml import NvmlSource
        result = NvmlSource().discover()
        print(",".join(d.name for d in result.devices))
    """)
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_lib.parent), "FAKE_NVML_CONFIG": str(config)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "gpu-0,gpu-7"


def pci_function(sysfs, bdf, root, numa):
    """A GPU's PCI function as sysfs has it: its directory under the root (with numa_node), linked from
    bus/pci/devices."""
    target = sysfs / "devices" / root / f"{root[3:]}:00.0" / bdf
    target.mkdir(parents=True)
    (target / "numa_node").write_text(f"{numa}\n")
    pci_link(sysfs, bdf, root)


def test_numa_node_is_published_beside_the_pci_attributes(fake_lib, host, tmp_path, monkeypatch, caplog):
    sysfs, proc = host
    pci_function(sysfs, "0000:3b:00.0", "pci0000:3a", 1)
    pci_function(sysfs, "0000:65:01.0", "pci0000:64", -1)
    configure(
        monkeypatch,
        tmp_path,
        {"device_count": 2, "gpu.0.bus_id": "00000000:3B:00.0", "gpu.1.bus_id": "00000000:65:01.0"},
    )
    with caplog.at_level(logging.WARNING):
        result = NvmlSource(library_path=fake_lib, sysfs_root=sysfs, proc_root=proc).discover()
    on_node, no_affinity = result.devices
    assert on_node.attributes[facts.ATTR_NUMA_NODE] == 1
    assert on_node.slice_entry()["attributes"][facts.ATTR_NUMA_NODE] == {"int": 1}
    assert on_node.attributes[facts.ATTR_PCIE_ROOT] == "pci0000:3a"
    # -1: the platform reports no NUMA affinity, so no attribute (and nothing to warn about).
    assert facts.ATTR_NUMA_NODE not in no_affinity.attributes
    assert no_affinity.attributes[facts.ATTR_PCIE_ROOT] == "pci0000:64"
    assert not [r for r in caplog.records if "numaNode" in r.getMessage()]
    assert_publishable(result.devices)


def test_mig_devices_carry_their_gpus_numa_node(fake_lib, host, tmp_path, monkeypatch):
    sysfs, proc = host
    pci_function(sysfs, "0000:3b:00.0", "pci0000:3a", 0)
    configure(monkeypatch, tmp_path, mig_settings(**{"gpu.0.bus_id": "00000000:3B:00.0"}))
    result = NvmlSource(library_path=fake_lib, sysfs_root=sysfs, proc_root=proc).discover()
    assert len(result.devices) == 4
    assert {d.attributes[facts.ATTR_NUMA_NODE] for d in result.devices} == {0}


def test_unreadable_numa_node_is_omitted_with_a_warning(fake_lib, host, tmp_path, monkeypatch, caplog):
    configure(monkeypatch, tmp_path, {"device_count": 1})
    with caplog.at_level(logging.WARNING):
        result = NvmlSource(library_path=fake_lib, sysfs_root=host[0], proc_root=host[1]).discover()
    assert result.problems == []
    assert facts.ATTR_NUMA_NODE not in result.devices[0].attributes
    assert any(f"{facts.ATTR_NUMA_NODE} omitted" in r.getMessage() for r in caplog.records)
