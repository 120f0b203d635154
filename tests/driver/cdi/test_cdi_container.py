"""A claim's CDI spec applied the way a runtime applies it, with the kernel's own mechanisms.

No container runtime: a minimal image (the host's loader and libc copied in, nothing else; no
ld.so.cache), the edits a runtime injects for the container's CDI devices (`cdi_check.inject`: the
spec's own edits, then each device's) applied: mounts bind-mounted and device nodes made in a
private mount namespace (`unshare -m`), the environment set (`cdi_check.container_env`), then
`chroot` into the image and run the spec's `nvidia-smi`:
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


def apply_script(spec: dict, image: Path, *, then: str = "", devices: list[str] | None = None) -> str:
    """Shell commands that apply what a runtime injects for the spec's `devices` (default: all of
    them, fully qualified CDI IDs) under `image`, then run nvidia-smi."""
    ids = devices if devices is not None else [f"{spec['kind']}={d['name']}" for d in spec["devices"]]
    edits = cdi_check.inject([spec], ids)
    lines = [
        "set -e",
        f"mount -t tmpfs -o mode=755 tmpfs {shlex.quote(str(image / 'dev'))}",
    ]  # as a runtime's /dev
    # a runtime replaces a mount or a device node met again at the same container path
    for mount in {m["containerPath"]: m for m in edits["mounts"]}.values():
        target = shlex.quote(str(image) + mount["containerPath"])
        flags = [o for o in mount["options"] if o in ("ro", "nosuid", "nodev", "noexec")]
        lines += [
            f"mkdir -p $(dirname {target})",
            f"[ -e {target} ] || touch {target}",
            f"mount --bind {shlex.quote(mount['hostPath'])} {target}",
            f"mount -o remount,bind,{','.join(flags)} {target}",
        ]
    for node in {n["path"]: n for n in edits["deviceNodes"]}.values():
        st = os.stat(node["hostPath"])
        target = shlex.quote(str(image) + node["path"])
        lines += [
            f"mkdir -p $(dirname {target})",
            f"mknod -m 666 {target} c {os.major(st.st_rdev)} {os.minor(st.st_rdev)}",
        ]
    base = ["FAKE_NVML_CONFIG=/etc/fake-nvml.conf", "PATH=/usr/bin"]
    env = [f"{k}={v}" for k, v in cdi_check.container_env(edits, base).items()]
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


def gpu(minor: int, uuid: str = GPU_UUID) -> Device:
    return Device(
        name=f"gpu-{minor}",
        device_type=facts.DEVICE_TYPE_GPU,
        uuid=uuid,
        attributes={facts.ATTR_TYPE: "gpu", facts.ATTR_PCIE_BUS_ID: BUS_ID},
        capacity={},
        minor=minor,
        device_nodes=(f"/dev/nvidia{minor}",),
    )


def claim_spec(tmp_path: Path, layout: str, hook: str | None, gpus: int = 1) -> tuple[dict, Path]:
    fake = fake_driver.build(tmp_path / "root", layout=layout, gpus=gpus)
    root = DriverRoot(fake.path, str(fake.path))
    edits = DriverEdits(discover(root, VERSION), hook, node_source(root), fake.sysfs)
    devices = [gpu(0)] + [gpu(i, f"GPU-{i:08x}-0000-4000-8000-000000000000") for i in range(1, gpus)]
    spec = cdi.build_claim_spec(UID, devices, driver=edits)
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


def test_a_container_given_one_device_of_a_two_gpu_claim_gets_only_its_node(tmp_path):
    # Real GPUs: a container sees the device nodes of its own CDI devices; NVIDIA_VISIBLE_DEVICES is void.
    spec, image = claim_spec(tmp_path, "debian", hook=None, gpus=2)
    dev = shlex.quote(str(image / "dev"))
    for own, other in ((0, 1), (1, 0)):
        devices = [cdi.claim_device_id(UID, f"gpu-{own}")]
        check = f"test -c {dev}/nvidia{own} && test -c {dev}/nvidiactl && ! test -e {dev}/nvidia{other}"
        done = run_in_namespace(apply_script(spec, image, then=check, devices=devices))
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("GPU 0: ")
        assert cdi_check.container_env(cdi_check.inject([spec], devices))["NVIDIA_VISIBLE_DEVICES"] == "void"
    both = [cdi.claim_device_id(UID, f"gpu-{i}") for i in (0, 1)]
    check = f"test -c {dev}/nvidia0 && test -c {dev}/nvidia1"
    done = run_in_namespace(apply_script(spec, image, then=check, devices=both))
    assert done.returncode == 0, done.stderr
