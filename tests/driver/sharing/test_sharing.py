"""Time-slicing and MPS on prepare/unprepare, with a stub nvidia-smi and the fake API server."""

import pytest
from vke_gpu_dra import cdi
from vke_gpu_dra.claims.checkpoint import ClaimState
from vke_gpu_dra.sharing.manager import SharingManager
from vke_gpu_dra.sharing.records import SharingRecord
from vke_gpu_dra.sharing.runners import Mounter, NvidiaSmi, default_shm_size
from vke_gpu_dra.state import DeviceState
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import ClaimError, ClaimRef
from vke_gpu_dra_core.featuregates import parse
from vke_gpu_dra_testing.plugin_env import checkpoint_document

from tests.driver.claim_objects import claim, gpu_config, mig_config, opaque, result
from tests.driver.sharing_env import FakeDriverRoot, FakeMounts, gpu, mig

POOL = "node-a"
DEVICES = [gpu(0), gpu(1), mig(2)]
TS = parse("TimeSlicingSettings=true")
LONG = gpu_config(sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}})
SHORT = gpu_config(sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Short"}})
U0, U1 = DEVICES[0].uuid, DEVICES[1].uuid


@pytest.fixture
def env(tmp_path):
    return FakeDriverRoot(tmp_path / "driver-root"), tmp_path / "cdi", tmp_path / "plugin"


def make_state(env, gates=TS, api=None):
    driver_root, cdi_root, data = env
    manager = SharingManager(
        gates=gates,
        smi=NvidiaSmi(driver_root.root),
        plugin_data_dir=data,
        node_name=POOL,
        namespace="gpu-dra",
        image="registry.example.com/plugin:1",
        host_driver_root=driver_root.root,
        api=api,
    )
    return DeviceState(
        driver_name=facts.DRIVER_NAME,
        pool_name=POOL,
        devices=DEVICES,
        cdi_root=cdi_root,
        plugin_data_dir=data,
        gates=gates,
        sharing_manager=manager,
    )


def ref(uid="uid-1", name="c"):
    return ClaimRef("default", name, uid)


def stored(env):
    return {c["uid"]: c for c in checkpoint_document(env[2])["claims"]}


def test_nvidias_time_slicing_long_example(env):
    state = make_state(env)
    state.prepare(ref(), claim("uid-1", result("gpu-0"), config=[opaque(LONG)]))
    assert env[0].calls() == [f"-i {U0} -c DEFAULT", f"compute-policy -i {U0} --set-timeslice 3"]
    assert stored(env)["uid-1"]["sharing"] == {"timeslice": {"gpu-0": 3}, "mps": []}
    env[0].clear()
    state.unprepare(ref())
    assert env[0].calls() == [f"-i {U0} -c DEFAULT", f"compute-policy -i {U0} --set-timeslice 0"]
    assert state.entries() == {}


def test_every_call_names_one_gpu(env):
    state = make_state(env)
    state.prepare(ref(), claim("uid-1", result("gpu-0", "a"), result("gpu-1", "b"), config=[opaque(SHORT)]))
    calls = env[0].calls()
    assert len(calls) == 4 and all(
        f" -i {u}" in f" {c}" for c, u in zip(calls, [U0, U0, U1, U1], strict=True)
    )


def test_restart_between_prepare_and_unprepare_undoes_what_was_recorded(env):
    make_state(env).prepare(ref(), claim("uid-1", result("gpu-1"), config=[opaque(LONG)]))
    env[0].clear()
    make_state(env).unprepare(ref())  # a new process reads the checkpoint
    assert env[0].calls() == [f"-i {U1} -c DEFAULT", f"compute-policy -i {U1} --set-timeslice 0"]


def test_gates_on_default_config_sets_default_time_slice_as_nvidia(env):
    make_state(env).prepare(ref(), claim("uid-1", result("gpu-0")))
    assert env[0].calls() == [f"-i {U0} -c DEFAULT", f"compute-policy -i {U0} --set-timeslice 0"]


def test_mig_devices_accept_time_slicing_and_nothing_runs(env):
    config = [opaque(mig_config(sharing={"strategy": "TimeSlicing"}))]
    make_state(env).prepare(ref(), claim("uid-1", result("gpu-2-mig-19-0-1"), config=config))
    assert env[0].calls() == []


def test_gates_off_the_same_claim_fails_with_nvidias_message_and_nothing_runs(env):
    state = make_state(env, gates=parse(""))
    with pytest.raises(ClaimError, match="unknown GPU sharing strategy: TimeSlicing"):
        state.prepare(ref(), claim("uid-1", result("gpu-0"), config=[opaque(LONG)]))
    assert env[0].calls() == [] and state.entries() == {}


def test_shared_gpu_keeps_one_setting_and_is_reset_by_the_last_claim(env):
    state = make_state(env)
    state.prepare(ref("a", "a"), claim("a", result("gpu-0"), name="a", config=[opaque(LONG)]))
    with pytest.raises(
        ClaimError,
        match="claim default/b: device gpu-0 is shared with another prepared claim "
        r"that set time-slice 3; this claim asks for 1",
    ):
        state.prepare(ref("b", "b"), claim("b", result("gpu-0"), name="b", config=[opaque(SHORT)]))
    state.prepare(ref("c", "c"), claim("c", result("gpu-0"), name="c", config=[opaque(LONG)]))
    env[0].clear()
    state.unprepare(ref("a", "a"))
    assert env[0].calls() == []  # claim c still uses gpu-0
    state.unprepare(ref("c", "c"))
    assert env[0].calls() == [f"-i {U0} -c DEFAULT", f"compute-policy -i {U0} --set-timeslice 0"]


def test_failing_nvidia_smi_is_the_claims_error_and_is_rolled_back(env):
    state = make_state(env)
    env[0].fail_on("--set-timeslice 3")
    with pytest.raises(
        ClaimError,
        match=rf"claim default/c: nvidia-smi compute-policy -i {U0} --set-timeslice 3 "
        r"failed \(exit 4\): Unable to set the compute mode",
    ):
        state.prepare(ref(), claim("uid-1", result("gpu-0"), config=[opaque(LONG)]))
    assert env[0].calls()[-2:] == [f"-i {U0} -c DEFAULT", f"compute-policy -i {U0} --set-timeslice 0"]
    assert state.entries() == {} and cdi.list_claim_specs(env[1]) == {}


def test_failed_undo_keeps_the_entry_for_a_retry(env):
    state = make_state(env)
    state.prepare(ref(), claim("uid-1", result("gpu-0"), config=[opaque(LONG)]))
    env[0].fail_on("--set-timeslice 0")
    with pytest.raises(ClaimError, match="claim default/c: cannot undo GPU sharing: nvidia-smi"):
        state.unprepare(ref())
    assert SharingRecord.of(state.entries()["uid-1"]).timeslice == {"gpu-0": 3}
    env[0].fail_on("")
    state.unprepare(ref())
    assert state.entries() == {}


def test_crash_after_the_started_entry_is_undone_after_restart(env, monkeypatch):
    state = make_state(env)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt  # the process dies between nvidia-smi and the completed entry

    monkeypatch.setattr(state._lifecycle, "complete", crash)
    with pytest.raises(KeyboardInterrupt):
        state.prepare(ref(), claim("uid-1", result("gpu-0"), config=[opaque(LONG)]))
    assert stored(env)["uid-1"]["state"] == ClaimState.PREPARE_STARTED
    env[0].clear()
    make_state(env).unprepare(ref())
    assert env[0].calls() == [f"-i {U0} -c DEFAULT", f"compute-policy -i {U0} --set-timeslice 0"]


def test_missing_nvidia_smi_is_a_clear_error(env):
    (env[0].root / "usr" / "bin" / "nvidia-smi").unlink()
    with pytest.raises(ClaimError, match="nvidia-smi not found under driver root"):
        make_state(env).prepare(ref(), claim("uid-1", result("gpu-0"), config=[opaque(LONG)]))


def test_claims_without_sharing_keep_the_original_checkpoint_shape(env):
    make_state(env, gates=parse("")).prepare(ref(), claim("uid-1", result("gpu-0")))
    assert "sharing" not in stored(env)["uid-1"]


# ------------------------------------------------------------------------------------------------ MPS

MPS_GATES = parse("MPSSupport=true")


class _Mounts:
    """Records mount commands instead of mounting (tests do not mount tmpfs on the host)."""

    def __init__(self):
        self.commands = []

    def record(self, command, **kwargs):
        import subprocess

        self.commands.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")


MOUNTS = _Mounts()
MPS_EXAMPLE = gpu_config(
    sharing={
        "strategy": "MPS",
        "mpsConfig": {"defaultActiveThreadPercentage": 50, "defaultPinnedDeviceMemoryLimit": "10Gi"},
    }
)


def mps_state(env, kube, fake_api, *, ready=True, sleeps=None):
    fake_api.deployments_become_ready = ready
    state = make_state(env, gates=MPS_GATES, api=kube)
    state._sharing.mounter = Mounter(runner=MOUNTS.record, shm_size=lambda: "1000k")
    if sleeps is not None:
        state._sharing.sleep = sleeps.append  # no real waiting: the deadline decides
    return state


def test_nvidias_mps_example_starts_a_daemon_pinned_to_the_node(env, kube, fake_api):
    from vke_gpu_dra.sharing.mps import daemon_id

    state = mps_state(env, kube, fake_api)
    got = state.prepare(ref(), claim("uid-1", result("gpu-0"), config=[opaque(MPS_EXAMPLE)]))
    ident = daemon_id("uid-1", [U0])
    name = f"mps-control-daemon-{ident}"
    deployment = fake_api.deployments[("gpu-dra", name)]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeName"] == POOL and pod["hostPID"] is True
    container = pod["containers"][0]
    assert container["image"] == "registry.example.com/plugin:1"
    assert container["command"] == ["chroot", "/driver-root", "sh", "-c"]
    # the plugin's image defaults to a non-root user, and chroot fails without root (exit 125)
    assert container["securityContext"] == {"privileged": True, "runAsUser": 0, "runAsGroup": 0}
    script = container["args"][0]
    assert "nvidia-cuda-mps-control -d" in script
    assert "echo set_default_active_thread_percentage 50 | nvidia-cuda-mps-control" in script
    assert f"echo set_default_device_pinned_mem_limit {U0} 10240M | nvidia-cuda-mps-control" in script
    assert {"name": "CUDA_VISIBLE_DEVICES", "value": U0} in container["env"]
    mps_root = env[2] / "mps" / ident
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert volumes == {
        "driver-root": str(env[0].root),
        "mps-shm-directory": str(mps_root / "shm"),
        "mps-pipe-directory": str(mps_root / "pipe"),
        "mps-log-directory": str(mps_root / "log"),
    }
    assert all((mps_root / d).is_dir() for d in ("shm", "pipe", "log"))
    assert MOUNTS.commands[-1] == [
        "mount",
        "-t",
        "tmpfs",
        "-o",
        "rw,nosuid,nodev,noexec,relatime,size=1000k",
        "shm",
        str(mps_root / "shm"),
    ]
    assert env[0].calls() == [f"-i {U0} -c EXCLUSIVE_PROCESS"]
    # the workload's CDI device gets the pipe and shm
    spec = cdi.load_spec(cdi.claim_spec_path(env[1], "uid-1"))
    edits = spec["devices"][0]["containerEdits"]
    assert "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps" in edits["env"]
    assert {(m["hostPath"], m["containerPath"]) for m in edits["mounts"]} == {
        (str(mps_root / "shm"), "/dev/shm"),
        (str(mps_root / "pipe"), "/tmp/nvidia-mps"),
    }
    assert got[0].cdi_device_ids == (f"{facts.CDI_VENDOR}/{facts.CDI_CLASS_CLAIM}=uid-1-gpu-0",)
    assert stored(env)["uid-1"]["sharing"]["mps"] == [{"daemonId": ident, "devices": ["gpu-0"]}]
    # unprepare, after a restart: the daemon goes, the compute mode comes back
    env[0].clear()
    after_restart = make_state(env, gates=MPS_GATES, api=kube)
    after_restart._sharing.mounter = Mounter(runner=MOUNTS.record)
    after_restart.unprepare(ref())
    assert fake_api.deployments == {}
    assert not mps_root.exists()
    assert env[0].calls() == [f"-i {U0} -c DEFAULT"]


def test_prepare_waits_for_the_daemon_to_be_ready(env, kube, fake_api):
    sleeps: list[float] = []
    state = mps_state(env, kube, fake_api, ready=False, sleeps=sleeps)

    def become_ready(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 3:
            (key,) = fake_api.deployments
            fake_api.set_ready(*key)

    state._sharing.sleep = become_ready
    state.prepare(ref(), claim("uid-1", result("gpu-0"), config=[opaque(MPS_EXAMPLE)]))
    assert len(sleeps) == 3
    assert state.entries()["uid-1"].state is ClaimState.PREPARE_COMPLETED


def slow_daemon_state(env, kube, fake_api):
    """An MPS node whose daemons are not Ready until the test says so, with a mount table a retry sees."""
    state = mps_state(env, kube, fake_api, ready=False, sleeps=[])
    state._sharing.mounter = FakeMounts()
    return state


def test_daemon_not_ready_by_the_deadline_stays_and_the_retry_finds_it(env, kube, fake_api):
    import time

    from vke_gpu_dra.sharing.manager import MpsDaemonPending

    state = slow_daemon_state(env, kube, fake_api)
    mps_claim = claim("uid-1", result("gpu-0"), config=[opaque(MPS_EXAMPLE)])
    with pytest.raises(
        MpsDaemonPending,
        match=r"claim default/c: MPS control daemon gpu-dra/mps-control-daemon-uid-1-\w+ "
        r"is not yet ready: waiting for MPS control daemon to come online",
    ):
        state.prepare(ref(), mps_claim, deadline=time.monotonic() + 0.2)
    # the daemon and the entry that records it stay; nothing was undone
    [(key, daemon)] = fake_api.deployments.items()
    first_uid = daemon["metadata"]["uid"]
    entry = state.entries()["uid-1"]
    assert entry.state is ClaimState.PREPARE_STARTED
    assert [(m.daemon_id, m.devices) for m in SharingRecord.of(entry).mps] == [
        (key[1].removeprefix("mps-control-daemon-"), ("gpu-0",))
    ]
    assert cdi.list_claim_specs(env[1]) == {}
    assert env[0].calls() == [f"-i {U0} -c EXCLUSIVE_PROCESS"]
    # kubelet's retry, still before the image is pulled: the same daemon, not a new one
    with pytest.raises(MpsDaemonPending):
        state.prepare(ref(), mps_claim, deadline=time.monotonic() + 0.2)
    assert fake_api.deployments[key]["metadata"]["uid"] == first_uid
    # the pod's probe passes after the first deadlines: the next retry finds the daemon Ready
    fake_api.set_ready(*key)
    got = state.prepare(ref(), mps_claim, deadline=time.monotonic() + 0.2)
    assert got[0].device_name == "gpu-0"
    assert fake_api.deployments[key]["metadata"]["uid"] == first_uid
    assert fake_api.count("POST", "deployments") == 1 and fake_api.count("DELETE", "deployments") == 0
    assert state.entries()["uid-1"].state is ClaimState.PREPARE_COMPLETED
    assert [c[0] for c in state._sharing.mounter.commands] == ["mount"]  # the retries found the mount
    assert cdi.load_spec(cdi.claim_spec_path(env[1], "uid-1"))["devices"][0]["containerEdits"]["mounts"]


def test_daemon_kept_by_a_failed_prepare_is_removed_on_unprepare(env, kube, fake_api):
    import time

    state = slow_daemon_state(env, kube, fake_api)
    with pytest.raises(ClaimError, match="is not yet ready"):
        state.prepare(
            ref(),
            claim("uid-1", result("gpu-0"), config=[opaque(MPS_EXAMPLE)]),
            deadline=time.monotonic() + 0.2,
        )
    assert len(fake_api.deployments) == 1
    env[0].clear()
    make_state(env, gates=MPS_GATES, api=kube).unprepare(ref())  # also after a restart
    assert fake_api.deployments == {} and state.entries() == {}
    assert env[0].calls() == [f"-i {U0} -c DEFAULT"]
    assert not (env[2] / "mps").exists() or list((env[2] / "mps").iterdir()) == []


def test_other_mps_failures_are_still_rolled_back(env, kube, fake_api):
    state = mps_state(env, kube, fake_api)
    env[0].fail_on("EXCLUSIVE_PROCESS")
    with pytest.raises(ClaimError, match=rf"nvidia-smi -i {U0} -c EXCLUSIVE_PROCESS failed"):
        state.prepare(ref(), claim("uid-1", result("gpu-0"), config=[opaque(MPS_EXAMPLE)]))
    assert fake_api.deployments == {} and state.entries() == {}


def test_mps_limit_errors_are_per_claim(env, kube, fake_api):
    state = mps_state(env, kube, fake_api)
    bad = gpu_config(
        sharing={"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"3": "1Gi"}}}
    )
    with pytest.raises(ClaimError, match="invalid device: invalid device index: 3"):
        state.prepare(ref(), claim("uid-1", result("gpu-0"), config=[opaque(bad)]))
    good = state.prepare(ref("uid-2"), claim("uid-2", result("gpu-1"), config=[opaque(MPS_EXAMPLE)]))
    assert good[0].device_name == "gpu-1"
    assert fake_api.deployments.keys() == {("gpu-dra", k[1]) for k in fake_api.deployments}
    assert len(fake_api.deployments) == 1


def test_mps_gate_off_fails_with_nvidias_message(env, kube, fake_api):
    state = make_state(env, gates=TS, api=kube)
    with pytest.raises(ClaimError, match="unknown GPU sharing strategy: MPS"):
        state.prepare(ref(), claim("uid-1", result("gpu-0"), config=[opaque(MPS_EXAMPLE)]))
    assert fake_api.deployments == {}


def test_claim_prepared_with_the_gate_on_is_undone_after_it_was_turned_off(env):
    make_state(env).prepare(ref(), claim("uid-1", result("gpu-0"), config=[opaque(LONG)]))
    env[0].clear()
    make_state(env, gates=parse("")).unprepare(ref())
    assert env[0].calls() == [f"-i {U0} -c DEFAULT", f"compute-policy -i {U0} --set-timeslice 0"]


def test_plugin_builds_the_sharing_manager_from_its_flags(tmp_path):
    from vke_gpu_dra.config import parse_config
    from vke_gpu_dra.plugin import Plugin

    argv = [
        "--node-name",
        "n",
        "--feature-gates",
        "MPSSupport=true",
        "--image-name",
        "img:2",
        "--namespace",
        "gpu-dra",
        "--nvidia-driver-root",
        "/run/nvidia/driver",
        "--container-driver-root",
        str(tmp_path),
        "--plugin-data-dir",
        str(tmp_path / "data"),
    ]
    manager = Plugin(parse_config(argv, {}))._sharing_manager()
    assert manager.gates.mps and not manager.gates.time_slicing
    assert (manager.image, manager.namespace, manager.node_name) == ("img:2", "gpu-dra", "n")
    assert (
        str(manager.host_driver_root) == "/run/nvidia/driver" and manager.plugin_data_dir == tmp_path / "data"
    )


def test_shm_size_is_half_the_memory_as_nvidia(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16318480 kB\nMemFree: 1 kB\n")
    assert default_shm_size(meminfo) == "8159240k"
    assert default_shm_size(tmp_path / "absent") == "65536k"
