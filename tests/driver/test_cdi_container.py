"""A claim's CDI spec applied the way a runtime applies it, with the kernel's own mechanisms.

No container runtime: a minimal image (the host's loader and libc copied in, nothing else; no
ld.so.cache), the spec's mounts bind-mounted and its device nodes made in a private mount namespace
(`unshare -m`), its environment set, then `chroot` into the image and run the spec's `nvidia-smi`:
a gcc-built stub that dlopen()s `libnvidia-ml.so.1` by SONAME (the tests' fake NVML) and prints
`GPU 0: <product> (UUID: GPU-...)` like `nvidia-smi -L`.
"""

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from vke_gpu_dra import cdi
from vke_gpu_dra.userspace import DriverEdits, DriverRoot, discover, node_source
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Device
from vke_gpu_dra_testing import cdi_check

from tests.driver import fake_driver
from tests.driver.fake_driver import BUS_ID, VERSION

UID = "3c4d5e6f-3333-4444-8555-b66677778888"
GPU_UUID = "GPU-1c2d3e4f-5a6b-7c8d-9e0f-a1b2c3d4e5f6"
PRODUCT = "NVIDIA A30"
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"


def _namespaces_work() -> str | None:
    if os.geteuid() != 0:
        return "mount namespaces and mknod need root (CI runs as root)"
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "true"], capture_output=True, text=True, check=False
    )
    return None if probe.returncode == 0 else f"unshare -m is not permitted here: {probe.stderr.strip()}"


pytestmark = pytest.mark.skipif(_namespaces_work() is not None, reason=str(_namespaces_work()))


def minimal_image(image: Path, binary: Path) -> Path:
    """An image holding only what `binary` links against (loader, libc), copied from the host."""
    ldd = subprocess.run(["ldd", str(binary)], check=True, capture_output=True, text=True).stdout
    for line in ldd.splitlines():
        parts = line.split()
        path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0]
        if path.startswith("/"):
            target = image / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.realpath(path), target)
    for directory in ("usr/bin", "dev", "etc", "tmp"):
        (image / directory).mkdir(parents=True, exist_ok=True)
    fake_driver_config = image / "etc" / "fake-nvml.conf"
    fake_driver_config.write_text(f"device_count=1\ngpu.0.name={PRODUCT}\ngpu.0.uuid={GPU_UUID}\n")
    return image


def apply_script(spec: dict, image: Path, *, then: str = "") -> str:
    """Shell commands that apply the spec's mounts and device nodes under `image`, then run nvidia-smi."""
    edits = [spec["containerEdits"], *[d["containerEdits"] for d in spec["devices"]]]
    lines = [
        "set -e",
        f"mount -t tmpfs -o mode=755 tmpfs {shlex.quote(str(image / 'dev'))}",
    ]  # as a runtime's /dev
    for mount in [m for e in edits for m in e.get("mounts", [])]:
        target = shlex.quote(str(image) + mount["containerPath"])
        flags = [o for o in mount["options"] if o in ("ro", "nosuid", "nodev", "noexec")]
        lines += [
            f"mkdir -p $(dirname {target})",
            f"[ -e {target} ] || touch {target}",
            f"mount --bind {shlex.quote(mount['hostPath'])} {target}",
            f"mount -o remount,bind,{','.join(flags)} {target}",
        ]
    for node in [n for e in edits for n in e.get("deviceNodes", [])]:
        st = os.stat(node["hostPath"])
        target = shlex.quote(str(image) + node["path"])
        lines += [
            f"mkdir -p $(dirname {target})",
            f"mknod -m 666 {target} c {os.major(st.st_rdev)} {os.minor(st.st_rdev)}",
        ]
    env = [*spec["containerEdits"]["env"], "FAKE_NVML_CONFIG=/etc/fake-nvml.conf", "PATH=/usr/bin"]
    lines.append(then)
    lines.append(
        f"exec env -i {' '.join(shlex.quote(e) for e in env)} {CHROOT} {shlex.quote(str(image))} nvidia-smi"
    )
    return "\n".join(lines) + "\n"


def run_in_namespace(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def claim_spec(tmp_path: Path, layout: str, hook: str | None) -> tuple[dict, Path]:
    fake = fake_driver.build(tmp_path / "root", layout=layout)
    root = DriverRoot(fake.path, str(fake.path))
    edits = DriverEdits(discover(root, VERSION), hook, node_source(root), fake.sysfs)
    gpu = Device(
        name="gpu-0",
        device_type=facts.DEVICE_TYPE_GPU,
        uuid=GPU_UUID,
        attributes={facts.ATTR_TYPE: "gpu", facts.ATTR_PCIE_BUS_ID: BUS_ID},
        capacity={},
        minor=0,
        device_nodes=("/dev/nvidia0",),
    )
    spec = cdi.build_claim_spec(UID, [gpu], driver=edits)
    cdi_check.validate_spec(spec)
    return spec, minimal_image(tmp_path / "image", fake.local("/usr/bin/nvidia-smi"))


def test_soname_fallback_lets_nvidia_smi_find_nvml(tmp_path):
    spec, image = claim_spec(tmp_path, "debian", hook=None)
    done = run_in_namespace(apply_script(spec, image, then=f"test -c {image}/dev/nvidiactl"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"GPU 0: {PRODUCT} (UUID: {GPU_UUID})\n"
    # the mounts lived in the namespace only: outside it the image holds the empty mount points
    assert [p.stat().st_size for p in (image / "usr" / "lib").rglob("libnvidia-ml*")] == [0, 0]


def test_image_whose_loader_does_not_search_the_folder_needs_update_ldcache(tmp_path):
    spec, image = claim_spec(tmp_path, "rhel", hook=None)  # libraries in /usr/lib64; the loader is Debian's
    failed = run_in_namespace(apply_script(spec, image))
    assert failed.returncode == 9
    assert "libnvidia-ml.so.1: cannot open shared object file" in failed.stderr
    # What the update-ldcache hook does inside the container: add the spec's library folders to the
    # image's ld.so.cache.
    folders = ["/usr/lib64", "/usr/lib64/vdpau"]
    (image / "etc" / "ld.so.conf").write_text("".join(f"{f}\n" for f in folders))
    hooked = run_in_namespace(apply_script(spec, image, then=f"ldconfig -r {shlex.quote(str(image))}"))
    assert hooked.returncode == 0, hooked.stderr
    assert hooked.stdout == f"GPU 0: {PRODUCT} (UUID: {GPU_UUID})\n"
