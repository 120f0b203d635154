"""Driver user-space discovery and the CDI edits built from it, on gcc-built fake driver roots."""

import logging
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest
from vke_gpu_dra import cdi
from vke_gpu_dra.claims.checkpoint import ClaimState
from vke_gpu_dra.discovery.nvml import find_library
from vke_gpu_dra.metrics import Metrics
from vke_gpu_dra.state import DeviceState
from vke_gpu_dra.userspace import (
    NVML_SONAME,
    DriverRoot,
    UserSpaceError,
    UserSpaceSettings,
    discover,
    elf,
    find_binary,
    ldcache,
    node_source,
    setup,
)
from vke_gpu_dra.userspace import find_library as find_soname
from vke_gpu_dra.userspace.edits import MOUNT_OPTIONS, DriverEdits
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import ClaimRef, Device
from vke_gpu_dra_testing import cdi_check

from tests.driver import fake_driver
from tests.driver.claim_objects import claim, result
from tests.driver.devices import full_gpu
from tests.driver.fake_driver import BUS_ID, VERSION

#: Cases that need device nodes made with mknod (root; CI runs as root).
needs_mknod = pytest.mark.skipif(not fake_driver.can_mknod(), reason="mknod needs root (CI runs as root)")
UID = "7e2a1c3b-2222-4333-8444-a55566667777"
DEB = "/usr/lib/x86_64-linux-gnu"


@pytest.fixture(scope="module")
def nvml_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("nvml")


@pytest.fixture
def make_root(tmp_path, nvml_dir):
    def make(**kwargs):
        return fake_driver.build(tmp_path / "root", nvml_build_dir=nvml_dir, **kwargs)

    return make


def gpu(minor=0, uuid="GPU-0b5c3f4e-1111-2222-3333-444455556666"):
    return full_gpu(minor, uuid, {facts.ATTR_TYPE: "gpu", facts.ATTR_PCIE_BUS_ID: BUS_ID})


def edits_for(
    fake, *, host=None, hook=f"/var/lib/kubelet/plugins/{facts.DRIVER_NAME}/nvidia-cdi-hook", **kwargs
):
    root = DriverRoot(fake.path, host or str(fake.path))
    return DriverEdits(discover(root, fake.version, **kwargs), hook, node_source(root), fake.sysfs)


def opts():
    return list(MOUNT_OPTIONS)


# ----------------------------------------------------------------------------------------- ld.so.cache


@pytest.mark.parametrize("fmt", ["new", "old", "compat"])
def test_ld_cache_in_every_format_ldconfig_writes(make_root, fmt):
    fake = make_root()
    cache = fake_driver.ldconfig(fake.path, "-c", fmt)
    data = cache.read_bytes()
    assert data.startswith(ldcache.NEW_MAGIC if fmt == "new" else ldcache.OLD_MAGIC)
    entries = ldcache.parse(data)
    # (a second ldconfig run also lists the development links, as a host's cache does)
    assert {e.key: e.value for e in entries}.items() >= {
        "libcuda.so.1": f"{DEB}/libcuda.so.1",
        "libnvidia-ml.so.1": f"{DEB}/libnvidia-ml.so.1",
        "libnvidia-ptxjitcompiler.so.1": f"{DEB}/libnvidia-ptxjitcompiler.so.1",
    }.items()
    assert all(e.is_native_64bit("x86_64") and not e.is_native_64bit("aarch64") for e in entries)


def test_host_ld_cache_parses():
    entries = ldcache.parse(Path("/etc/ld.so.cache").read_bytes())
    assert any(e.key == "libc.so.6" and e.is_native_64bit() for e in entries)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"garbage-not-a-cache", "unknown magic"),
        (ldcache.NEW_MAGIC + b"\x05\x00", "truncated"),
        (ldcache.OLD_MAGIC + b"\0" + (1000).to_bytes(4, "little"), "claims 1000 entries"),
    ],
)
def test_bad_ld_cache_is_one_clear_error(data, message):
    with pytest.raises(ldcache.LdCacheError, match=message):
        ldcache.parse(data)


def test_soname_read_from_the_elf_file(make_root):
    fake = make_root()
    assert elf.file_soname(fake.local(f"{DEB}/libcuda.so.{VERSION}")) == "libcuda.so.1"
    assert elf.file_soname(fake.local("/usr/bin/nvidia-smi")) is None  # an executable has none
    with pytest.raises(elf.ElfError, match="not an ELF file"):
        elf.file_soname(fake.local("/usr/bin/nvidia-debugdump"))


# --------------------------------------------------------------------------------------- the spec


def expected_debian(fake, host):
    """NVIDIA's common edits for this root (parity sheet §8a), with hostPath = host root + containerPath."""
    h = host.rstrip("/")
    libs = [
        f"{DEB}/libcuda.so.{VERSION}",
        f"{DEB}/libnvidia-ml.so.{VERSION}",
        f"{DEB}/libnvidia-ptxjitcompiler.so.{VERSION}",
        f"{DEB}/vdpau/libvdpau_nvidia.so.{VERSION}",
    ]
    firmware = [
        f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin",
        f"/lib/firmware/nvidia/{VERSION}/gsp_tu10x.bin",
    ]
    binaries = [
        "/usr/bin/nvidia-smi",
        "/usr/bin/nvidia-debugdump",
        "/usr/bin/nvidia-cuda-mps-control",
        "/usr/bin/nvidia-cuda-mps-server",
    ]
    hook = {
        "hookName": "createContainer",
        "path": f"/var/lib/kubelet/plugins/{facts.DRIVER_NAME}/nvidia-cdi-hook",
        "env": ["NVIDIA_CTK_DEBUG=false"],
    }
    links = [
        f"libcuda.so.1::{DEB}/libcuda.so",
        f"libcuda.so.{VERSION}::{DEB}/libcuda.so.1",
        f"libnvidia-ml.so.{VERSION}::{DEB}/libnvidia-ml.so.1",
        f"libnvidia-ml.so.1::{DEB}/libnvidia-ml.so",
        f"libnvidia-ptxjitcompiler.so.{VERSION}::{DEB}/libnvidia-ptxjitcompiler.so.1",
        f"libnvidia-ptxjitcompiler.so.1::{DEB}/libnvidia-ptxjitcompiler.so",
        f"libvdpau_nvidia.so.{VERSION}::{DEB}/vdpau/libvdpau_nvidia.so.1",
    ]
    return {
        "env": [
            f"NVIDIA_CTK_LIBCUDA_DIR={DEB}",
            "NVIDIA_VISIBLE_DEVICES=void",
            f"DRA_RESOURCE_CLAIM_UID={UID}",
        ],
        "deviceNodes": [
            {"path": f"/dev/{n}", "hostPath": f"{h}/dev/{n}"}
            for n in ("nvidiactl", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools")
        ],
        "mounts": [
            {"hostPath": f"{h}{p}", "containerPath": p, "options": opts()}
            for p in [*libs, *firmware, *binaries]
        ]
        + [
            {
                "hostPath": f"{h}/run/nvidia-persistenced/socket",
                "containerPath": "/run/nvidia-persistenced/socket",
                "options": ["nosuid", "nodev", "rbind", "rprivate", "noexec"],
            }
        ],
        "hooks": [
            {
                **hook,
                "args": ["nvidia-cdi-hook", "create-symlinks", *[a for x in links for a in ("--link", x)]],
            },
            {**hook, "args": ["nvidia-cdi-hook", "enable-cuda-compat", f"--host-driver-version={VERSION}"]},
            {
                **hook,
                "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", DEB, "--folder", f"{DEB}/vdpau"],
            },
            {**hook, "args": ["nvidia-cdi-hook", "disable-device-node-modification"]},
        ],
    }


@needs_mknod
@pytest.mark.parametrize("host", ["/run/nvidia/driver", None])
def test_debian_root_gives_nvidias_common_edits(make_root, host):
    fake = make_root()
    host = host or str(fake.path)
    spec = cdi.build_claim_spec(UID, [gpu()], driver=edits_for(fake, host=host, release="6.1.0"))
    assert spec["cdiVersion"] == "0.5.0"
    assert spec["containerEdits"] == expected_debian(fake, host)
    assert spec["devices"][0]["containerEdits"] == {
        "deviceNodes": [
            {"path": p, "hostPath": f"{host}{p}"}
            for p in ("/dev/nvidia0", "/dev/dri/card1", "/dev/dri/renderD128")
        ]
    }
    cdi_check.validate_spec(spec)


@needs_mknod
def test_every_injected_path_exists_under_the_root(make_root):
    fake = make_root()
    spec = cdi.build_claim_spec(UID, [gpu()], driver=edits_for(fake))
    edits = [spec["containerEdits"], spec["devices"][0]["containerEdits"]]
    for mount in spec["containerEdits"]["mounts"]:
        assert Path(mount["hostPath"]).exists(), mount
        assert mount["hostPath"].startswith(str(fake.path))
    for node in [n for e in edits for n in e["deviceNodes"]]:
        assert Path(node["hostPath"]).is_char_device(), node


def test_root_slash_keeps_host_paths_equal_to_container_paths(make_root, tmp_path):
    fake = make_root()
    root = DriverRoot(fake.path, "/")
    edits = DriverEdits(discover(root, VERSION), "/hook", node_source(root, tmp_path / "hostdev"), fake.sysfs)
    assert all(m["hostPath"] == m["containerPath"] for m in edits.mounts())
    assert edits.control_nodes() == []  # the host's /dev (here an empty stand-in) has none


def test_rhel_lib64_layout(make_root):
    fake = make_root(layout="rhel")
    us = discover(DriverRoot(fake.path, "/"), VERSION)
    assert us.libcuda_dir == "/usr/lib64"
    assert [lib.path for lib in us.libraries] == [
        f"/usr/lib64/{n}.{VERSION}" for n in ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so")
    ] + [f"/usr/lib64/vdpau/libvdpau_nvidia.so.{VERSION}"]


def test_without_ld_cache_the_standard_directories_are_searched(make_root):
    fake = make_root(layout="rhel")
    fake.local("/etc/ld.so.cache").unlink()
    assert discover(DriverRoot(fake.path, "/"), VERSION).libcuda_dir == "/usr/lib64"


def test_directories_and_dangling_links_named_like_libraries_are_skipped(make_root):
    fake = make_root()
    (fake.local(f"{DEB}/libnvidia-gpucomp.so.{VERSION}")).mkdir()  # NVIDIA #1272
    os.symlink("gone.so", fake.local(f"{DEB}/libnvidia-cfg.so.{VERSION}"))  # dangling
    fake.local("/usr/lib64/libnvidia-ml.so.1").mkdir(parents=True)  # before the real one in NVML's order
    us = discover(DriverRoot(fake.path, "/"), VERSION)
    names = [lib.name for lib in us.libraries]
    assert f"libnvidia-gpucomp.so.{VERSION}" not in names and f"libnvidia-cfg.so.{VERSION}" not in names
    assert len(names) == 4
    assert find_library(fake.path) == fake.local(f"{DEB}/libnvidia-ml.so.1")


def test_a_library_is_found_through_the_ld_cache_before_the_standard_directories(make_root):
    fake = make_root()
    decoy = fake.local(f"/usr/lib64/{NVML_SONAME}")  # first of LIBRARY_DIRS, not in the cache
    decoy.parent.mkdir(parents=True)
    decoy.write_bytes(b"\0")
    root = DriverRoot(fake.path, "/host")
    assert find_soname(root, NVML_SONAME) == f"{DEB}/libnvidia-ml.so.{VERSION}"
    fake.local("/etc/ld.so.cache").unlink()
    assert find_soname(root, NVML_SONAME) == f"/usr/lib64/{NVML_SONAME}"
    decoy.unlink()
    decoy.mkdir()  # a directory named like the library is skipped
    assert find_soname(root, NVML_SONAME) == f"{DEB}/libnvidia-ml.so.{VERSION}"
    assert find_soname(root, "libnvidia-absent.so.1") is None


def test_nvml_is_looked_up_as_every_other_library(make_root):
    # The plugin's NVML loader and the CDI user-space share one search: ld.so.cache first, then the
    # standard directories, and links resolved inside the root (an absolute link does not point at
    # the plugin container's own /usr).
    fake = make_root()
    decoy = fake.local(f"/usr/lib64/{NVML_SONAME}")  # first of LIBRARY_DIRS, not in the cache
    decoy.parent.mkdir(parents=True)
    decoy.write_bytes(b"\0")
    assert find_library(fake.path) == fake.local(f"{DEB}/{NVML_SONAME}")
    fake.local("/etc/ld.so.cache").unlink()
    assert find_library(fake.path) == decoy
    decoy.unlink()
    link = fake.local(f"{DEB}/{NVML_SONAME}")
    link.unlink()
    os.symlink(f"{DEB}/libnvidia-ml.so.{VERSION}", link)  # absolute, as some distributions ship it
    assert find_library(fake.path) == link


def test_absolute_links_resolve_inside_the_root(make_root):
    fake = make_root()
    real = fake.local("/opt/nvidia/bin")
    real.mkdir(parents=True)
    fake.local("/usr/bin/nvidia-smi").rename(real / "nvidia-smi")
    os.symlink("/opt/nvidia/bin/nvidia-smi", fake.local("/usr/bin/nvidia-smi"))
    found = find_binary(DriverRoot(fake.path, "/host"), "nvidia-smi")
    assert found is not None and (found.path, found.resolved) == (
        "/usr/bin/nvidia-smi",
        "/opt/nvidia/bin/nvidia-smi",
    )
    assert find_binary(DriverRoot(fake.path, "/"), "nvidia-imex") is None


def test_without_a_hook_each_library_is_also_mounted_under_its_soname(make_root):
    fake = make_root()
    edits = edits_for(fake, hook=None)
    assert edits.hooks() == []
    host = str(fake.path)
    aliases = {
        m["containerPath"]: m["hostPath"]
        for m in edits.mounts()
        if not m["containerPath"].endswith(VERSION)
        and "/lib/firmware" not in m["containerPath"]
        and "/bin/" not in m["containerPath"]
        and "/run/" not in m["containerPath"]
    }
    assert aliases == {
        f"{DEB}/libcuda.so.1": f"{host}{DEB}/libcuda.so.{VERSION}",
        f"{DEB}/libnvidia-ml.so.1": f"{host}{DEB}/libnvidia-ml.so.{VERSION}",
        f"{DEB}/libnvidia-ptxjitcompiler.so.1": f"{host}{DEB}/libnvidia-ptxjitcompiler.so.{VERSION}",
        f"{DEB}/vdpau/libvdpau_nvidia.so.1": f"{host}{DEB}/vdpau/libvdpau_nvidia.so.{VERSION}",
    }


@needs_mknod
def test_mig_device_gets_parent_and_capability_nodes_with_host_paths(make_root):
    fake = make_root()
    for minor in (12, 13):
        fake_driver.mknod(fake.local(f"/dev/nvidia-caps/nvidia-cap{minor}"), 237, minor)
    mig = Device(
        name="gpu-0-mig-19-0-1",
        device_type=facts.DEVICE_TYPE_MIG,
        uuid="MIG-1",
        attributes={facts.ATTR_TYPE: "mig", facts.ATTR_PCIE_BUS_ID: BUS_ID},
        capacity={},
        minor=0,
        device_nodes=("/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"),
    )
    spec = cdi.build_claim_spec(UID, [mig], driver=edits_for(fake, host="/h"))
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [
        {"path": p, "hostPath": f"/h{p}"}
        for p in ("/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13")
    ]
    assert spec["containerEdits"]["mounts"] == expected_debian(fake, "/h")["mounts"]


@needs_mknod
def test_control_nodes_are_checked_at_every_prepare(make_root):
    fake = make_root()
    fake.local("/dev/nvidia-uvm").unlink()
    fake.local("/dev/nvidia-uvm-tools").unlink()
    fake.local("/dev/nvidia-modeset").unlink()
    fake.local("/dev/nvidia-modeset").touch()  # not a device node: left out
    edits = edits_for(fake)
    assert [n["path"] for n in edits.control_nodes()] == ["/dev/nvidiactl"]
    fake_driver.mknod(fake.local("/dev/nvidia-uvm"), 510, 0)  # created later, by the first CUDA process
    assert [n["path"] for n in edits.control_nodes()] == ["/dev/nvidiactl", "/dev/nvidia-uvm"]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda fake: fake.local(f"{DEB}/libcuda.so.{VERSION}").unlink(),
            f"has no regular file libcuda.so.{VERSION}",
        ),
        (lambda fake: subprocess.run(["rm", "-rf", str(fake.path)], check=True), "is not a directory"),
    ],
)
def test_bad_roots_give_one_clear_message(make_root, mutate, message):
    fake = make_root()
    mutate(fake)
    with pytest.raises(UserSpaceError, match=message) as info:
        discover(DriverRoot(fake.path, "/"), VERSION)
    assert str(fake.path) in str(info.value)


# ------------------------------------------------------------------------ start-up and prepared claims


def settings(fake, tmp_path, **kwargs):
    values = {
        "simulated": False,
        "version": VERSION,
        "hook_path": None,
        "plugin_data_dir": tmp_path / "plugin",
    }
    if fake is not None:
        values.update(root=DriverRoot(fake.path, "/"), sysfs_root=fake.sysfs)
    values.update(kwargs)
    return UserSpaceSettings(**values)


def metric(metrics, name):
    return [line for line in generate_latest(metrics.registry).decode().splitlines() if line.startswith(name)]


def test_host_hook_is_copied_into_the_plugin_data_dir(make_root, tmp_path):
    fake = make_root(hook=True)
    metrics = Metrics()
    edits = setup(settings(fake, tmp_path), metrics)
    target = tmp_path / "plugin" / "nvidia-cdi-hook"
    assert edits is not None and edits.hook_path == str(target)
    assert target.read_bytes() == fake.local("/usr/bin/nvidia-cdi-hook").read_bytes()
    assert os.stat(target).st_mode & 0o777 == 0o755
    assert metric(metrics, "vke_gpu_dra_cdi_hooks_enabled") == ["vke_gpu_dra_cdi_hooks_enabled 1.0"]
    assert metric(metrics, "vke_gpu_dra_driver_userspace_ready") == ["vke_gpu_dra_driver_userspace_ready 1.0"]


def test_explicit_hook_path_is_used_and_a_missing_one_falls_back(make_root, tmp_path, caplog):
    fake = make_root()
    hook = tmp_path / "hook"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    assert setup(settings(fake, tmp_path, hook_path=hook), Metrics()).hook_path == str(hook)
    metrics = Metrics()
    with caplog.at_level(logging.WARNING):
        edits = setup(settings(fake, tmp_path, hook_path=tmp_path / "nope"), metrics)
    assert edits.hook_path is None
    assert any(
        "--nvidia-cdi-hook-path" in r.getMessage() and "nope" in r.getMessage() for r in caplog.records
    )
    assert metric(metrics, "vke_gpu_dra_cdi_hooks_enabled") == ["vke_gpu_dra_cdi_hooks_enabled 0.0"]


def test_no_hook_is_logged_and_counted(make_root, tmp_path, caplog):
    fake = make_root()
    metrics = Metrics()
    with caplog.at_level(logging.WARNING):
        edits = setup(settings(fake, tmp_path), metrics)
    assert edits.hook_path is None
    lines = [r.getMessage() for r in caplog.records if "mounted under its SONAME" in r.getMessage()]
    assert len(lines) == 1 and str(fake.path) in lines[0]
    assert metric(metrics, "vke_gpu_dra_cdi_hooks_enabled") == ["vke_gpu_dra_cdi_hooks_enabled 0.0"]


def test_self_check_names_the_root_and_what_is_missing(make_root, tmp_path, caplog):
    fake = make_root()
    fake.local("/usr/bin/nvidia-smi").unlink()
    fake.local(f"{DEB}/libnvidia-ml.so.{VERSION}").unlink()
    metrics = Metrics()
    with caplog.at_level(logging.ERROR):
        edits = setup(settings(fake, tmp_path), metrics)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [
        f"driver root {fake.path} (host /) lacks libnvidia-ml.so.1, nvidia-smi: "
        "containers will not get them through CDI"
    ]
    assert edits is not None and edits.userspace is not None  # the rest is still mounted
    assert metric(metrics, "vke_gpu_dra_driver_userspace_ready") == ["vke_gpu_dra_driver_userspace_ready 0.0"]
    assert sorted(metric(metrics, "vke_gpu_dra_driver_userspace_missing{")) == [
        'vke_gpu_dra_driver_userspace_missing{item="libnvidia-ml.so.1"} 1.0',
        'vke_gpu_dra_driver_userspace_missing{item="nvidia-smi"} 1.0',
    ]


@needs_mknod
def test_root_without_libcuda_still_gives_device_node_edits(make_root, tmp_path, caplog):
    fake = make_root()
    fake.local(f"{DEB}/libcuda.so.{VERSION}").unlink()
    with caplog.at_level(logging.ERROR):
        edits = setup(settings(fake, tmp_path, root=DriverRoot(fake.path, str(fake.path))), Metrics())
    assert edits.userspace is None and edits.mounts() == [] and edits.hooks() == []
    assert next(n["path"] for n in edits.control_nodes()) == "/dev/nvidiactl"
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1  # NVML and nvidia-smi are there: only libcuda is named
    assert errors[0].startswith(f"driver root {fake.path} (host {fake.path}) lacks libcuda.so.{VERSION}: ")
    assert f"has no regular file libcuda.so.{VERSION}" in errors[0]


def test_simulated_mode_uses_a_fake_root_only_when_given(make_root, tmp_path):
    assert (
        setup(settings(make_root(), tmp_path, simulated=True, root=DriverRoot(Path("/"), "/")), Metrics())
        is None
    )
    fake_root = DriverRoot(tmp_path / "root", str(tmp_path / "root"))
    edits = setup(settings(None, tmp_path, simulated=True, root=fake_root, sysfs_root=tmp_path), Metrics())
    assert edits is not None and edits.userspace is not None and edits.userspace.root == fake_root


def test_prepared_claim_resolves_to_devices_with_the_common_edits(make_root, tmp_path):
    fake = make_root()
    cdi_root, data = tmp_path / "cdi", tmp_path / "plugin"
    edits = setup(settings(fake, tmp_path, root=DriverRoot(fake.path, str(fake.path))), Metrics())
    # a base spec NVIDIA's plugin left in the same directory (its device names are gpu-N)
    cdi_root.mkdir()
    nvidia_base = cdi_root / f"{facts.CDI_VENDOR}-{facts.CDI_CLASS_DEVICE}_base.yaml"
    nvidia_base.write_text(
        f"cdiVersion: 0.5.0\nkind: {facts.CDI_VENDOR}/{facts.CDI_CLASS_DEVICE}\n"
        "devices: [{name: gpu-0, containerEdits: {deviceNodes: [{path: /dev/nvidia0}]}}]\n"
    )
    state = DeviceState(
        driver_name=facts.DRIVER_NAME,
        pool_name="node-a",
        devices=[gpu()],
        cdi_root=cdi_root,
        plugin_data_dir=data,
        driver_edits=edits,
    )
    prepared = state.prepare(ClaimRef("default", "c", UID), claim(UID, result("gpu-0")))
    assert state.entries()[UID].state is ClaimState.PREPARE_COMPLETED
    spec = cdi.load_spec(cdi.base_spec_path(cdi_root))
    kind, _, name = prepared[0].cdi_device_ids[0].partition("=")
    assert (
        kind == spec["kind"] == f"{facts.CDI_VENDOR}/{facts.CDI_CLASS_BASE}"
    )  # never NVIDIA's base-spec kind .../device
    assert name in [d["name"] for d in spec["devices"]]
    base = cdi.load_spec(nvidia_base)
    ours = {f"{spec['kind']}={d['name']}" for d in spec["devices"]}
    assert ours.isdisjoint({f"{base['kind']}={d['name']}" for d in base["devices"]})
    assert list(cdi.list_claim_specs(cdi_root)) == []  # neither base spec is taken for a claim's
    assert "NVIDIA_VISIBLE_DEVICES=void" in spec["containerEdits"]["env"]
    mounted = [m["containerPath"] for m in spec["containerEdits"]["mounts"]]
    assert f"{DEB}/libnvidia-ml.so.1" in mounted and "/usr/bin/nvidia-smi" in mounted
    assert yaml.safe_load(cdi.base_spec_path(cdi_root).read_text()) == spec
