"""containerd 2.1 gives a container the GPU of a CDI spec our driver's CDI code wrote.

The driver root is the tests' fake NVIDIA driver (`tests/driver/fake_driver`: the fake libnvidia-ml, a
stub nvidia-smi, device nodes made with mknod, char major 195); the claim's spec is built by
`vke_gpu_dra.cdi` from it, as the plugin builds it at prepare, and written to the node's CDI folder.
containerd resolves the CDI device names (ctr's `--device`), runc creates the container with the
spec's device nodes, mounts and environment; what the container sees is read from inside it.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from vke_gpu_dra import cdi
from vke_gpu_dra.userspace import DriverEdits, DriverRoot, discover, node_source
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Device
from vke_gpu_dra_testing import cdi_check

from tests.driver import fake_driver
from tests.integration.controlplane import wait_until

from . import images
from . import node as node_module
from .node import CDI_ROOT, KUBELET_ROOT, Node

UID = "5a6b7c8d-1111-4222-8333-944455556666"
UUIDS = ("GPU-0a0b0c0d-0000-4000-8000-000000000000", "GPU-1a1b1c1d-1111-4111-8111-111111111111")
PRODUCT = "NVIDIA A30"
IMAGE = "vke-gpu-dra.local/node/gpu-probe:1"
#: What the container prints about itself: the device nodes it has (path, type, major, minor), whether
#: opening each is refused by the device cgroup (EPERM) or reaches the missing driver (ENXIO), the same
#: for a node of GPU 0 it makes itself (mknod), its environment, and nvidia-smi's answer through the
#: spec's libnvidia-ml.
PROBE = r"""
opens() { cat "$1" 2>&1 >/dev/null | grep -o 'Operation not permitted\|No such device or address'; }
for dev in /dev/nvidia*; do
  [ -e "$dev" ] || continue
  echo "node $dev $(stat -c '%F %t %T' $dev)"
  echo "open $dev $(opens $dev)"
done
mknod /tmp/gpu0 c 195 0 && echo "open mknod-gpu0 $(opens /tmp/gpu0)"
env | grep -E '^(NVIDIA_|DRA_|GPU_)' | sed 's/^/env /'
nvidia-smi | sed 's/^/smi /'
"""


def gpu(minor: int) -> Device:
    return Device(
        name=f"gpu-{minor}",
        device_type=facts.DEVICE_TYPE_GPU,
        uuid=UUIDS[minor],
        attributes={facts.ATTR_TYPE: "gpu", facts.ATTR_PCIE_BUS_ID: fake_driver.BUS_ID},
        capacity={},
        minor=minor,
        device_nodes=(f"/dev/nvidia{minor}",),
    )


def probe_image(archive: Path, smi: Path) -> images.Image:
    """busybox, and the loader and libc nvidia-smi needs (the driver's files come from the spec)."""
    return images.build(archive, IMAGE, [*images.busybox_entries(), *images.host_libraries(smi)])


def write_claim_spec(node: Node, gpus: int) -> dict:
    fake = fake_driver.build(node.base / "driver" / "root", gpus=gpus)
    root = DriverRoot(fake.path, str(fake.path))
    edits = DriverEdits(discover(root, fake_driver.VERSION), None, node_source(root), fake.sysfs)
    spec = cdi.build_claim_spec(UID, [gpu(i) for i in range(gpus)], driver=edits)
    cdi_check.validate_spec(spec)
    cdi.write_claim_spec(node.cdi_dir, UID, spec)
    config = node.base / "driver" / "fake-nvml.conf"
    config.write_text(f"device_count=1\ngpu.0.name={PRODUCT}\ngpu.0.uuid={UUIDS[1]}\ngpu.0.minor=1\n")
    return spec


def run_probe(node: Node, name: str, devices: list[str]) -> list[str]:
    config = node.base / "driver" / "fake-nvml.conf"
    argv = ["-n", "default", "run", "--rm", "--cgroup", node.cgroup(name)]
    argv += [arg for device in devices for arg in ("--device", device)]
    argv += ["--env", "FAKE_NVML_CONFIG=/etc/fake-nvml.conf"]
    argv += ["--mount", f"type=bind,src={config},dst=/etc/fake-nvml.conf,options=rbind:ro"]
    done = node.ctr(*argv, IMAGE, name, "sh", "-c", PROBE, timeout=120)
    return done.stdout.splitlines()


@pytest.fixture
def probe(node: Node) -> Node:
    write_claim_spec(node, gpus=2)
    smi = node.base / "driver" / "root" / "usr" / "bin" / "nvidia-smi"
    image = probe_image(node.base / "images" / "probe.tar", smi)
    node.import_image(image, "default")  # ctr's
    node.import_image(image)  # the CRI's
    return node


def test_a_container_gets_exactly_its_claims_gpu_from_our_cdi_spec(probe: Node) -> None:
    lines = run_probe(probe, "one-gpu", [cdi.claim_device_id(UID, "gpu-1")])
    # its GPU and the control nodes, as the kernel made them from the spec (195 = 0xc3), and not the other GPU
    assert "node /dev/nvidia1 character special file c3 1" in lines
    assert "node /dev/nvidiactl character special file c3 ff" in lines
    assert not any(line.startswith("node /dev/nvidia0 ") for line in lines)
    # the device cgroup lets the container open its nodes: the open reaches the (absent) driver
    assert "open /dev/nvidia1 No such device or address" in lines
    assert "open /dev/nvidiactl No such device or address" in lines
    # and nothing else: the other GPU, made by hand inside the container, stays closed
    assert "open mknod-gpu0 Operation not permitted" in lines
    # the spec's environment
    assert "env NVIDIA_VISIBLE_DEVICES=void" in lines
    assert f"env DRA_RESOURCE_CLAIM_UID={UID}" in lines
    # nvidia-smi and libnvidia-ml come from the driver root through the spec's mounts
    assert f"smi GPU 0: {PRODUCT} (UUID: {UUIDS[1]})" in lines


def test_both_devices_of_a_claim_and_none_without_a_cdi_device(probe: Node) -> None:
    both = run_probe(probe, "two-gpus", [cdi.claim_device_id(UID, f"gpu-{i}") for i in (0, 1)])
    assert {line for line in both if line.startswith("node /dev/nvidia") and " c3 " in line} >= {
        "node /dev/nvidia0 character special file c3 0",
        "node /dev/nvidia1 character special file c3 1",
    }
    assert "open mknod-gpu0 No such device or address" in both
    none = run_probe(probe, "no-gpu", [])
    assert not any(line.startswith(("node ", "env ", "smi ")) for line in none), none
    assert "open mknod-gpu0 Operation not permitted" in none


def test_an_unknown_cdi_device_fails_the_container(probe: Node) -> None:
    failed = probe.ctr(
        "-n", "default", "run", "--rm", "--cgroup", probe.cgroup("unknown"),
        "--device", cdi.claim_device_id(UID, "gpu-7"), IMAGE, "unknown", "true", check=False,
    )  # fmt: skip
    assert failed.returncode != 0
    assert "unresolvable CDI devices" in failed.stderr
    assert cdi.claim_device_id(UID, "gpu-7") in failed.stderr


def test_a_pods_container_gets_its_gpu_through_the_cri_as_the_kubelet_asks(probe: Node) -> None:
    """The kubelet's path: a pod sandbox on the node's CNI bridge, and a container whose CDI devices
    come in the CRI request (what the kubelet passes from the plugin's prepare answer), resolved from
    the CRI's `cdi_spec_dirs` (the node's own folder; no /etc/cdi or /var/run/cdi on the host)."""
    config = probe.base / "driver" / "fake-nvml.conf"
    status, output = probe.run_pod(
        "gpu-pod", IMAGE, ["sh", "-c", PROBE], cdi_devices=[cdi.claim_device_id(UID, "gpu-1")],
        env={"FAKE_NVML_CONFIG": "/etc/fake-nvml.conf"}, mounts={"/etc/fake-nvml.conf": config},
    )  # fmt: skip
    lines = output.splitlines()
    assert "node /dev/nvidia1 character special file c3 1" in lines
    assert not any(line.startswith("node /dev/nvidia0 ") for line in lines)
    assert "open /dev/nvidia1 No such device or address" in lines
    assert "open mknod-gpu0 Operation not permitted" in lines
    assert f"env DRA_RESOURCE_CLAIM_UID={UID}" in lines
    assert f"smi GPU 0: {PRODUCT} (UUID: {UUIDS[1]})" in lines
    # the sandbox is on the node's bridge network
    assert status["status"]["network"]["ip"].startswith("198.18.0.")


def test_the_cri_runs_with_cdi_from_the_nodes_own_folder(node: Node) -> None:
    """The standard /var/run/cdi, which inside the node is its own folder (the host has none), and
    /var/lib/kubelet likewise."""
    info = json.loads(node.crictl("info").stdout)
    config = info["config"]
    assert config["enableCDI"] is True
    assert config["cdiSpecDirs"] == [CDI_ROOT]
    (node.cdi_dir / "probe.json").write_text("{}")
    (node.base / "kubelet" / "probe").write_text("")
    listed = node.run(["ls", f"{CDI_ROOT}/", f"{KUBELET_ROOT}/"]).stdout.split()
    assert "probe.json" in listed and "probe" in listed
    assert not Path(KUBELET_ROOT).exists() or not (Path(KUBELET_ROOT) / "probe").exists()
    assert not (Path(CDI_ROOT) / "probe.json").exists(), "the host's /var/run/cdi is untouched"
    assert config["restrictOOMScoreAdj"] is True
    assert config["containerd"]["runtimes"]["runc"]["options"]["BinaryName"] == str(node.tools.runc / "runc")


def test_images_are_reproducible(tmp_path: Path) -> None:
    program = tmp_path / "program"
    program.write_bytes(b"\x7fELF not really")
    program.touch()  # its time and owner on this machine do not count
    entries = [
        images.Entry("/bin/program", source=program),
        images.Entry("/bin/sh", link="program"),
        images.Entry("/etc/config", mode=0o644, data=b"key=value\n"),
        images.Entry("/tmp", mode=0o1777, directory=True),
    ]
    first = images.build(tmp_path / "a.tar", IMAGE, entries)
    second = images.build(tmp_path / "b.tar", IMAGE, list(reversed(entries)))
    assert first.digest == second.digest
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    other = images.build(tmp_path / "c.tar", IMAGE, [*entries, images.Entry("/etc/marker", data=b"x")])
    assert other.digest != first.digest
    assert first.by_digest == f"vke-gpu-dra.local/node/gpu-probe@{first.digest}"
    # the layer, found as a runtime finds it: index -> manifest -> layer; root's, dated 0, sorted
    with tarfile.open(tmp_path / "a.tar") as archive:

        def blob(digest: str) -> bytes:
            member = archive.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
            assert member is not None
            return member.read()

        [entry] = json.loads(blob_of(archive, "index.json"))["manifests"]
        assert entry["digest"] == first.digest
        [layer] = json.loads(blob(entry["digest"]))["layers"]
        with tarfile.open(fileobj=io.BytesIO(blob(layer["digest"]))) as members:
            infos = members.getmembers()
    assert [i.name for i in infos] == ["bin", "bin/program", "bin/sh", "etc", "etc/config", "tmp"]
    assert {(i.uid, i.gid, i.mtime) for i in infos} == {(0, 0, 0)}
    assert [i.mode for i in infos if i.name in ("etc/config", "tmp")] == [0o644, 0o1777]


def blob_of(archive: tarfile.TarFile, name: str) -> bytes:
    member = archive.extractfile(name)
    assert member is not None
    return member.read()


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([images.Entry("relative/path", data=b"")], "must be absolute"),
        ([images.Entry("/a/../b", data=b"")], "must be absolute and plain"),
        ([images.Entry("/x", data=b""), images.Entry("/x", data=b"")], "given twice"),
        ([images.Entry("/x")], "needs source or data"),
        ([images.Entry("/x", source=Path("/nonexistent/file"))], "No such file"),
    ],
)
def test_a_bad_layer_entry_is_one_error_naming_it(tmp_path: Path, entries: list, message: str) -> None:
    with pytest.raises(images.ImageError, match=message):
        images.build(tmp_path / "bad.tar", IMAGE, entries)


def test_an_image_name_without_a_tag_is_refused(tmp_path: Path) -> None:
    with pytest.raises(images.ImageError, match="give a tag"):
        images.build(tmp_path / "bad.tar", "vke-gpu-dra.local/node/probe", [])


def test_a_stopped_node_leaves_nothing_behind(node: Node) -> None:
    node.ctr("-n", "default", "version")
    sleeper = node.spawn("sleeper", ["sleep", "3600"])  # names nothing of the node: seen by its PID namespace
    assert wait_until(lambda: any(p.endswith(": sleep 3600") for p in node.leftovers()), timeout=10)
    node.stop()
    assert sleeper.wait(timeout=10) is not None
    assert node.leftovers() == []
    assert not os.path.exists(node.base)


def test_a_node_counts_a_pod_cgroup_left_in_the_shared_cri_folder_not_the_folder_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lanes run nodes side by side, and each one's containerd makes the CRI's /k8s.io again, empty: that
    folder is the run's to remove. A pod's cgroup left in it is a node's leftover once no other node runs."""
    cgroups, nodes = tmp_path / "cgroup", tmp_path / "nodes"
    nodes.mkdir()
    monkeypatch.setattr(node_module, "CGROUP_ROOT", cgroups)
    monkeypatch.setattr(node_module, "NODES_DIR", str(nodes))
    stopped = Node(tools=object())  # type: ignore[arg-type]  # never started: only its bookkeeping
    stopped.base.rmdir()
    shared = [cgroups / h / "k8s.io" for h in ("cpu", "memory")]
    for folder in shared:
        folder.mkdir(parents=True)
    assert stopped.leftovers() == []

    (shared[1] / "a1b2").mkdir()
    (cgroups / "cpu" / stopped.name).mkdir()
    own = f"cgroup: {cgroups / 'cpu' / stopped.name}"
    assert stopped.leftovers() == [own, f"cgroup: {shared[1] / 'a1b2'}"]

    (nodes / f"{node_module.NODE_PREFIX}other").mkdir()  # another lane's node: the pod may be its own
    assert stopped.leftovers() == [own]
