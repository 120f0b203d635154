"""After a reboot: what the start gives prepared claims back before the plugin registers (in process).

A reboot is a new boot id, an emptied CDI root (tmpfs) and no shm mounts; the GPUs' compute mode and
time-slice are back at their defaults, which the stub nvidia-smi's recorded calls show being set again.
"""

from __future__ import annotations

import time

import pytest
from vke_gpu_dra import cdi
from vke_gpu_dra.claims.checkpoint import BOOT_ID_FILE, CheckpointStore, ClaimState
from vke_gpu_dra.sharing.manager import SharingManager
from vke_gpu_dra.sharing.records import SharingRecord
from vke_gpu_dra.sharing.runners import NvidiaSmi
from vke_gpu_dra.state import DeviceState
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import ClaimError, ClaimRef
from vke_gpu_dra_core.featuregates import parse

from tests.driver.claim_objects import claim, gpu_config, opaque, result
from tests.driver.sharing_env import FakeDriverRoot, FakeMounts, gpu

POOL = "node-a"
DEVICES = [gpu(0), gpu(1), gpu(2)]
U0, U1, U2 = (d.uuid for d in DEVICES)
GATES = parse("TimeSlicingSettings=true,MPSSupport=true")
LONG = gpu_config(sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}})
SHORT = gpu_config(sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Short"}})
MPS = gpu_config(sharing={"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}})
BOOT_1, BOOT_2 = "0b4e7a4c-1111-4d6e-9a53-5c4c1d9e0001", "0b4e7a4c-2222-4d6e-9a53-5c4c1d9e0002"


class Node:
    """One node's driver root, CDI root, plugin data dir and shm mounts, across plugin starts."""

    def __init__(self, tmp_path, api=None, fake_api=None) -> None:
        self.driver_root = FakeDriverRoot(tmp_path / "driver-root")
        self.cdi_root = tmp_path / "cdi"
        self.data = tmp_path / "plugin"
        self.mounts = FakeMounts()
        self.api = api
        self.fake_api = fake_api
        self.on_sleep = None

    def start(self, boot_id: str | None, devices=DEVICES, restore_wait: float = 5.0) -> DeviceState:
        """A plugin start: the device state reads the checkpoint and restores under the node lock."""

        def sleep(seconds: float) -> None:
            if self.on_sleep is not None:
                self.on_sleep()
            time.sleep(min(seconds, 0.01))

        manager = SharingManager(
            gates=GATES,
            smi=NvidiaSmi(self.driver_root.root),
            plugin_data_dir=self.data,
            node_name=POOL,
            namespace="gpu-dra",
            image="registry.example.com/plugin:1",
            host_driver_root=self.driver_root.root,
            api=self.api,
            sleep=sleep,
            mounter=self.mounts,
        )
        return DeviceState(
            driver_name=facts.DRIVER_NAME,
            pool_name=POOL,
            devices=devices,
            cdi_root=self.cdi_root,
            plugin_data_dir=self.data,
            gates=GATES,
            sharing_manager=manager,
            boot_id=boot_id,
            restore_wait=restore_wait,
        )

    def reboot(self) -> None:
        """What a reboot takes: the CDI specs (tmpfs), the shm mounts; the nvidia-smi log starts anew."""
        for path in cdi.list_claim_specs(self.cdi_root).values():
            path.unlink()
        self.mounts.reboot()
        self.driver_root.clear()


def ref(uid: str) -> ClaimRef:
    return ClaimRef("default", uid, uid)


def prepare(state: DeviceState, uid: str, device: str, config: dict, **kwargs) -> None:
    state.prepare(ref(uid), claim(uid, result(device), name=uid, config=[opaque(config)]), **kwargs)


@pytest.fixture
def node(tmp_path) -> Node:
    return Node(tmp_path)


def by_gpu(calls: list[str]) -> dict[str, list[str]]:
    """The calls per GPU, in order (claims are restored in parallel, each GPU's calls in order)."""
    out: dict[str, list[str]] = {}
    for call in calls:
        words = call.split()
        uuid = words[words.index("-i") + 1]
        out.setdefault(uuid, []).append(call)
    return out


def test_a_new_boot_id_reapplies_time_slice_and_compute_mode_and_rewrites_the_specs(node):
    state = node.start(BOOT_1)
    prepare(state, "a", "gpu-0", LONG)
    prepare(state, "b", "gpu-1", SHORT)
    state.prepare(ref("plain"), claim("plain", result("gpu-2"), name="plain"))  # default time-slice
    assert CheckpointStore(node.data).load_boot_id() == BOOT_1
    node.reboot()

    after = node.start(BOOT_2)
    assert by_gpu(node.driver_root.calls()) == {
        U0: [f"-i {U0} -c DEFAULT", f"compute-policy -i {U0} --set-timeslice 3"],
        U1: [f"-i {U1} -c DEFAULT", f"compute-policy -i {U1} --set-timeslice 1"],
        U2: [f"-i {U2} -c DEFAULT", f"compute-policy -i {U2} --set-timeslice 0"],
    }
    # time-sliced claims have no edits of their own: the base spec written at start answers them all
    assert cdi.list_claim_specs(node.cdi_root) == {} and cdi.base_spec_path(node.cdi_root).exists()
    assert after.reboot is not None
    assert (after.reboot.previous_boot_id, after.reboot.boot_id) == (BOOT_1, BOOT_2)
    assert sorted(after.reboot.restored) == ["a", "b", "plain"] and after.reboot.failed == {}
    assert CheckpointStore(node.data).load_boot_id() == BOOT_2
    # kubelet's prepare after the reboot answers from the checkpoint and changes nothing more
    node.driver_root.clear()
    prepare(after, "a", "gpu-0", LONG)
    assert node.driver_root.calls() == []


def test_the_same_boot_id_does_nothing(node):
    prepare(node.start(BOOT_1), "a", "gpu-0", LONG)
    node.driver_root.clear()
    again = node.start(BOOT_1)  # a plugin restart, no reboot
    assert node.driver_root.calls() == [] and again.reboot is None
    assert again.entries()["a"].state is ClaimState.PREPARE_COMPLETED


def test_a_checkpoint_without_a_boot_id_loads_and_is_taken_as_this_boots(node):
    prepare(node.start(None), "a", "gpu-0", LONG)  # as an earlier release wrote it: no boot id kept
    assert not (node.data / BOOT_ID_FILE).exists()
    node.driver_root.clear()
    state = node.start(BOOT_1)
    assert node.driver_root.calls() == [] and state.reboot is None
    assert state.entries()["a"].state is ClaimState.PREPARE_COMPLETED
    assert (node.data / BOOT_ID_FILE).read_text() == f"{BOOT_1}\n"


def test_a_claim_that_cannot_be_restored_answers_its_next_prepare_with_the_reason(node):
    state = node.start(BOOT_1)
    prepare(state, "a", "gpu-0", LONG)
    prepare(state, "b", "gpu-1", SHORT)
    node.reboot()
    node.driver_root.fail_on(f"-i {U0}")

    after = node.start(BOOT_2)
    assert after.reboot is not None and after.reboot.restored == ("b",)
    assert after.reboot.failed["a"].startswith(
        "claim default/a: cannot restore GPU sharing after the node rebooted: "
        f"nvidia-smi -i {U0} -c DEFAULT failed (exit 4)"
    )
    entries = after.entries()
    assert entries["a"].state is ClaimState.PREPARE_STARTED and SharingRecord.of(entries["a"]).timeslice == {
        "gpu-0": 3
    }
    assert entries["b"].state is ClaimState.PREPARE_COMPLETED
    assert cdi.list_claim_specs(node.cdi_root) == {} and cdi.base_spec_path(node.cdi_root).exists()
    # the others are unaffected: b answers at once
    node.driver_root.clear()
    prepare(after, "b", "gpu-1", SHORT)
    assert node.driver_root.calls() == []
    # a's next prepare tries again and answers with what still fails
    with pytest.raises(
        ClaimError, match=rf"claim default/a: nvidia-smi -i {U0} -c DEFAULT failed \(exit 4\)"
    ):
        prepare(after, "a", "gpu-0", LONG)
    # once the GPU takes its settings, the next prepare succeeds
    node.driver_root.fail_on("")
    prepare(after, "a", "gpu-0", LONG)
    assert after.entries()["a"].state is ClaimState.PREPARE_COMPLETED
    assert cdi.list_claim_specs(node.cdi_root) == {}  # time-sliced: answered from the base spec


def test_a_claim_on_a_device_gone_after_the_reboot_fails_alone(node):
    state = node.start(BOOT_1)
    prepare(state, "a", "gpu-0", LONG)
    prepare(state, "c", "gpu-2", SHORT)
    node.reboot()
    after = node.start(BOOT_2, devices=DEVICES[:2])  # gpu-2 did not come back
    assert after.reboot is not None and after.reboot.restored == ("a",)
    assert "gpu-2, which this node no longer publishes" in after.reboot.failed["c"]
    with pytest.raises(ClaimError, match="device gpu-2 of claim default/c is not published by this node"):
        prepare(after, "c", "gpu-2", SHORT)
    after.unprepare(ref("c"))  # its record is kept: unprepare cleans what it can
    assert "c" not in after.entries()


# ------------------------------------------------------------------------------------------------ MPS


@pytest.fixture
def mps_node(tmp_path, kube, fake_api) -> Node:
    return Node(tmp_path, api=kube, fake_api=fake_api)


def test_a_new_boot_id_starts_the_mps_daemon_again_after_the_mount_and_waits_until_ready(mps_node):
    node, api = mps_node, mps_node.fake_api
    api.deployments_become_ready = True
    prepare(node.start(BOOT_1), "m", "gpu-0", MPS)
    [(key, before)] = api.deployments.items()
    node.reboot()
    api.deployments_become_ready = False  # the new pod starts after the restore asked for it

    checks = []

    def the_pod_starts() -> None:
        current = api.deployments.get(key)
        if current is not None and current["metadata"]["uid"] != before["metadata"]["uid"]:
            checks.append(
                node.mounts.mounted(node.data / "mps" / key[1].removeprefix("mps-control-daemon-") / "shm")
            )
            api.set_ready(*key)

    node.on_sleep = the_pod_starts
    after = node.start(BOOT_2)
    assert after.reboot is not None and after.reboot.restored == ("m",)
    assert checks and all(checks)  # the new daemon started after the shm was mounted again
    current = api.deployments[key]
    assert current["metadata"]["uid"] != before["metadata"]["uid"]
    assert current["spec"] == before["spec"]  # the same daemon, started again
    assert current["status"]["readyReplicas"] == 1
    assert node.driver_root.calls() == [f"-i {U0} -c EXCLUSIVE_PROCESS"]
    assert [c[0] for c in node.mounts.commands] == ["mount", "mount"]
    spec = cdi.load_spec(cdi.claim_spec_path(node.cdi_root, "m"))
    assert "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps" in spec["devices"][0]["containerEdits"]["env"]


def test_an_mps_daemon_not_ready_at_start_is_waited_for_by_the_next_prepare(mps_node):
    node, api = mps_node, mps_node.fake_api
    api.deployments_become_ready = True
    prepare(node.start(BOOT_1), "m", "gpu-0", MPS)
    node.reboot()
    api.deployments_become_ready = False

    after = node.start(BOOT_2, restore_wait=0.2)
    assert after.reboot is not None and after.reboot.restored == ()
    assert "is not yet ready" in after.reboot.failed["m"]
    assert after.entries()["m"].state is ClaimState.PREPARE_STARTED
    [(key, daemon)] = api.deployments.items()
    api.set_ready(*key)
    prepare(after, "m", "gpu-0", MPS)
    assert api.deployments[key]["metadata"]["uid"] == daemon["metadata"]["uid"]  # found, not started again
    assert after.entries()["m"].state is ClaimState.PREPARE_COMPLETED


def test_an_mps_daemon_deleted_while_the_node_was_down_is_created_by_the_next_prepare(mps_node):
    node, api = mps_node, mps_node.fake_api
    api.deployments_become_ready = True
    prepare(node.start(BOOT_1), "m", "gpu-0", MPS)
    api.deployments.clear()
    node.reboot()
    after = node.start(BOOT_2)
    assert (
        "is gone (its Deployment was deleted); the claim's next prepare creates it again"
        in (after.reboot.failed["m"])
    )
    prepare(after, "m", "gpu-0", MPS)
    assert len(api.deployments) == 1 and after.entries()["m"].state is ClaimState.PREPARE_COMPLETED


def test_an_interrupted_write_of_the_boot_id_leaves_nothing_behind(node):
    node.data.mkdir(parents=True)
    leftover = node.data / f".{BOOT_ID_FILE}.k3x9q2mz.tmp"
    leftover.write_text(BOOT_1[:8])
    state = node.start(BOOT_1)
    assert state.removed_leftovers == [leftover] and not leftover.exists()
    assert CheckpointStore(node.data).load_boot_id() == BOOT_1
