"""A fake NVIDIA driver root built like the real driver installs itself, for tests without a GPU.

gcc-built shared objects with the real SONAMEs and `.so.<version>` file names (libnvidia-ml is the
tests' fake NVML), the root's real `etc/ld.so.cache` written by `ldconfig -r <root>` (which also
makes the SONAME links, as on a host), development links, a gcc-built stub `nvidia-smi` that
dlopen()s `libnvidia-ml.so.1`, further binaries, GSP firmware, the persistenced socket, device
nodes made with mknod, and a fake sysfs with the GPU's DRM nodes.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tests.driver.fake_nvml import build as build_fake_nvml

VERSION: Final = "535.104.05"
STUB_SMI: Final = Path(__file__).with_name("nvidia_smi.c")
#: Libraries of the fake driver: file stem -> SONAME (libnvidia-ml is the fake NVML).
LIBRARIES: Final = {
    "libcuda.so": "libcuda.so.1",
    "libnvidia-ml.so": "libnvidia-ml.so.1",
    "libnvidia-ptxjitcompiler.so": "libnvidia-ptxjitcompiler.so.1",
}
VDPAU: Final = {"libvdpau_nvidia.so": "libvdpau_nvidia.so.1"}
#: Device numbers as the NVIDIA driver registers them (uvm's major is dynamic; 510 here).
CONTROL_NODES: Final = {
    "nvidiactl": (195, 255),
    "nvidia-modeset": (195, 254),
    "nvidia-uvm": (510, 0),
    "nvidia-uvm-tools": (510, 1),
}
LAYOUTS: Final = {"debian": "/usr/lib/x86_64-linux-gnu", "rhel": "/usr/lib64"}
BUS_ID: Final = "0000:3b:00.0"


def gcc() -> str:
    path = shutil.which("gcc")
    if path is None:
        raise RuntimeError("gcc is needed to build the fake driver")
    return path


def _shared_object(target: Path, soname: str) -> None:
    source = target.parent / f".{target.name}.c"
    source.write_text("int fake_driver_library(void) { return 1; }\n")
    subprocess.run(
        [gcc(), "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(target), str(source)],
        check=True,
        capture_output=True,
        text=True,
    )
    source.unlink()


def build_stub_smi(target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [gcc(), "-O1", "-Wall", "-Werror", "-o", str(target), str(STUB_SMI), "-ldl"],
        check=True,
        capture_output=True,
        text=True,
    )
    return target


@dataclass
class FakeRoot:
    path: Path
    version: str
    libdir: str
    sysfs: Path
    nodes: bool
    files: dict[str, Path] = field(default_factory=dict)

    def local(self, container_path: str) -> Path:
        return self.path / container_path.lstrip("/")


def can_mknod() -> bool:
    """Device nodes can be made (root; CI runs as root)."""
    return os.geteuid() == 0


def mknod(path: Path, major: int, minor: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, 0o666 | 0o020000, os.makedev(major, minor))


def build(
    root: Path,
    *,
    layout: str = "debian",
    version: str = VERSION,
    nvml_build_dir: Path | None = None,
    hook: bool = False,
    nodes: bool | None = None,
    gpus: int = 1,
    nvml_config: Mapping[str, object] | None = None,
) -> FakeRoot:
    """Build the fake root at `root` (which must not exist yet). `nvml_config`: the fake libnvidia-ml's
    configuration compiled into it (what it reads without $FAKE_NVML_CONFIG, in any container)."""
    if nodes is None:
        nodes = can_mknod()
    libdir = LAYOUTS[layout]
    fake = FakeRoot(root, version, libdir, root.parent / f"{root.name}-sysfs", nodes)
    lib = fake.local(libdir)
    (lib / "vdpau").mkdir(parents=True)
    nvml = build_fake_nvml(nvml_build_dir or root.parent / f"{root.name}-nvml", builtin=nvml_config)
    for stem, soname in LIBRARIES.items():
        target = lib / f"{stem}.{version}"
        if stem == "libnvidia-ml.so":
            shutil.copy2(nvml, target)
        else:
            _shared_object(target, soname)
        os.symlink(soname, lib / stem)  # development link (the SONAME link comes from ldconfig)
    for stem, soname in VDPAU.items():
        _shared_object(lib / "vdpau" / f"{stem}.{version}", soname)
        os.symlink(f"{stem}.{version}", lib / "vdpau" / soname)
    etc = fake.local("/etc")
    etc.mkdir(parents=True)
    (etc / "ld.so.conf").write_text(f"{libdir}\n")
    fake.files["ldconfig"] = ldconfig(root)
    # binaries
    build_stub_smi(fake.local("/usr/bin/nvidia-smi"))
    for name in ("nvidia-debugdump", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"):
        script = fake.local(f"/usr/bin/{name}")
        script.write_text("#!/bin/sh\nexit 0\n")
        script.chmod(0o755)
    if hook:
        hook_path = fake.local("/usr/bin/nvidia-cdi-hook")
        hook_path.write_text("#!/bin/sh\nexit 0\n")
        hook_path.chmod(0o755)
    # firmware
    firmware = fake.local(f"/lib/firmware/nvidia/{version}")
    firmware.mkdir(parents=True)
    for name in ("gsp_ga10x.bin", "gsp_tu10x.bin"):
        (firmware / name).write_bytes(b"\0" * 16)
    # the persistenced socket
    run = fake.local("/run/nvidia-persistenced")
    run.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(run / "socket"))
    # device nodes and sysfs
    if nodes:
        for name, (major, minor) in CONTROL_NODES.items():
            mknod(fake.local(f"/dev/{name}"), major, minor)
        for i in range(gpus):
            mknod(fake.local(f"/dev/nvidia{i}"), 195, i)
        mknod(fake.local("/dev/dri/card1"), 226, 1)
        mknod(fake.local("/dev/dri/renderD128"), 226, 128)
    drm = fake.sysfs / "bus" / "pci" / "devices" / BUS_ID / "drm"
    for name in ("card1", "renderD128"):
        (drm / name).mkdir(parents=True)
    return fake


def ldconfig(root: Path, *extra: str) -> Path:
    """`ldconfig -r <root>`: the SONAME links and the root's real etc/ld.so.cache."""
    subprocess.run(["ldconfig", "-r", str(root), *extra], check=True, capture_output=True, text=True)
    return root / "etc" / "ld.so.cache"
