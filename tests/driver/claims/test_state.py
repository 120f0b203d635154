import contextlib
import fcntl
import os
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from vke_gpu_dra import cdi
from vke_gpu_dra.allocation import step as allocation_step
from vke_gpu_dra.claims.checkpoint import BACKUP_FILE, CHECKPOINT_FILE, JOURNAL_FILE, ClaimEntry, ClaimState
from vke_gpu_dra.nodelock import LOCK_FILE
from vke_gpu_dra.state import DeviceState, StateLockTimeout
from vke_gpu_dra_core import facts, featuregates
from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, Device, PreparedDevice
from vke_gpu_dra_core.discovery.simulated import SimulatedSource
from vke_gpu_dra_testing.cdi_check import container_env, resolve
from vke_gpu_dra_testing.plugin_env import checkpoint_document

from tests.driver.claim_objects import claim, gpu_config, mig_config, opaque, result

POOL = "node-a"
DEVICES = SimulatedSource(4, "NVIDIA A30", POOL).discover().devices


def ref(uid="uid-1", name="c"):
    return ClaimRef("default", name, uid)


@pytest.fixture
def dirs(tmp_path):
    return tmp_path / "cdi", tmp_path / "plugin"


def make_state(dirs, devices=DEVICES, **kwargs):
    cdi_root, data = dirs
    return DeviceState(
        driver_name=facts.DRIVER_NAME,
        pool_name=POOL,
        devices=devices,
        cdi_root=cdi_root,
        plugin_data_dir=data,
        **kwargs,
    )


def checkpoint_doc(dirs):
    return checkpoint_document(dirs[1])


def base_id(device):
    return f"{facts.CDI_VENDOR}/{facts.CDI_CLASS_BASE}={device}"


def claim_id(uid, device, share=None):
    suffix = f"-share-{share}" if share else ""
    return f"{facts.CDI_VENDOR}/{facts.CDI_CLASS_CLAIM}={uid}-{device}{suffix}"


def share(device, share_id, request="gpu"):
    """A result of one consumable share of `device`: the claim gets a CDI spec of its own."""
    return {**result(device, request), "shareID": share_id}


def test_prepare_writes_spec_and_checkpoint_and_answers(dirs):
    state = make_state(dirs)
    got = state.prepare(ref(), claim("uid-1", result("gpu-0", "gpu"), result("gpu-2", "pair/second")))
    # A claim without edits of its own is answered from the base spec written at start: no spec of its own.
    assert got == [
        PreparedDevice(("gpu",), POOL, "gpu-0", (base_id("gpu-0"),)),
        PreparedDevice(("pair",), POOL, "gpu-2", (base_id("gpu-2"),)),
    ]
    assert cdi.list_claim_specs(dirs[0]) == {}
    base = cdi.load_spec(cdi.base_spec_path(dirs[0]))
    assert [d["name"] for d in base["devices"]] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert base["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    env = container_env(resolve(dirs[0], [i for d in got for i in d.cdi_device_ids]))
    assert env["GPU_DEVICE_0_UUID"] == DEVICES[0].uuid and env["GPU_DEVICE_2_UUID"] == DEVICES[2].uuid
    assert "GPU_DEVICE_1" not in env
    doc = checkpoint_doc(dirs)
    assert [(c["uid"], c["namespace"], c["name"], c["state"]) for c in doc["claims"]] == [
        ("uid-1", "default", "c", "PrepareCompleted"),
    ]
    assert state.prepared() == {"uid-1": got}
    assert list(state.devices) == DEVICES


def test_prepare_is_idempotent(dirs):
    state = make_state(dirs)
    first = state.prepare(ref(), claim("uid-1", result("gpu-1")))
    # A completed claim answers from the checkpoint, even for a claim object it would now refuse.
    assert state.prepare(ref(), claim("uid-1", allocated=False)) == first
    assert len(checkpoint_doc(dirs)["claims"]) == 1


def test_results_of_other_drivers_are_ignored(dirs):
    got = make_state(dirs).prepare(
        ref(), claim("uid-1", result("nic-0", driver="net.example.com"), result("gpu-3"))
    )
    assert [d.device_name for d in got] == ["gpu-3"]


def test_same_device_in_two_results_is_one_device_of_both_requests(dirs):
    got = make_state(dirs).prepare(ref(), claim("uid-1", result("gpu-0", "a"), result("gpu-0", "b")))
    # one device serving both requests: a container naming the whole claim gets its CDI id once
    assert got == [PreparedDevice(("a", "b"), POOL, "gpu-0", (base_id("gpu-0"),))]


def test_a_prepare_retried_after_a_partial_failure_answers_each_cdi_id_once(dirs, monkeypatch):
    """kubelet 1.37 fixed passing duplicate CDI ids after a retried, partly failed prepare (#140274): the
    retry's answer is the claim's answer, never the failed attempt's added to it."""
    state = make_state(dirs)
    body = claim("uid-1", share("gpu-0", "s1", "a"), share("gpu-0", "s1", "b"), share("gpu-1", "s2", "a"))
    real_write = cdi.write_claim_spec
    attempts = []

    def fail_first(*args, **kwargs):
        attempts.append(args[1])
        if len(attempts) == 1:
            raise OSError(28, "No space left on device")
        return real_write(*args, **kwargs)

    monkeypatch.setattr(cdi, "write_claim_spec", fail_first)
    with pytest.raises(ClaimError, match="No space left"):
        state.prepare(ref(), body)
    got = state.prepare(ref(), body)
    ids = [i for d in got for i in d.cdi_device_ids]
    assert ids == [claim_id("uid-1", "gpu-0", "s1"), claim_id("uid-1", "gpu-1", "s2")]
    assert [d.request_names for d in got] == [("a", "b"), ("a",)]
    assert state.prepare(ref(), body) == got  # and the repeated prepare, from the checkpoint
    spec = cdi.load_spec(cdi.claim_spec_path(dirs[0], "uid-1"))
    assert [d["name"] for d in spec["devices"]] == ["uid-1-gpu-0-share-s1", "uid-1-gpu-1-share-s2"]


def test_a_prepare_that_arrives_during_the_unprepare_of_its_claim_answers_what_the_checkpoint_holds(
    dirs, monkeypatch
):
    """kubelet 1.37 fixed a prepare attaching a pod to a claim being unprepared (#140527). Here the two
    never overlap: the prepare runs after the unprepare, prepares the claim anew and answers it, and the
    checkpoint ends up holding it as completed."""
    state = make_state(dirs)
    body = claim("uid-1", share("gpu-0", "s1"))
    first = state.prepare(ref(), body)
    cleaning, release = threading.Event(), threading.Event()
    real_clean = state._lifecycle.clean

    def slow_clean(*args, **kwargs):
        cleaning.set()
        assert release.wait(30)
        return real_clean(*args, **kwargs)

    monkeypatch.setattr(state._lifecycle, "clean", slow_clean)
    with ThreadPoolExecutor(max_workers=2) as pool:
        unprepared = pool.submit(state.unprepare, ref())
        assert cleaning.wait(30)
        prepared = pool.submit(state.prepare, ref(), body)
        time.sleep(0.1)
        assert not prepared.done()  # waits for the unprepare of the same claim
        monkeypatch.setattr(state._lifecycle, "clean", real_clean)
        release.set()
        assert unprepared.result(30) is None
        again = prepared.result(30)
    assert again == first
    assert state.entries()["uid-1"].state is ClaimState.PREPARE_COMPLETED
    assert cdi.claim_spec_path(dirs[0], "uid-1").exists()
    state.unprepare(ref())
    assert state.entries() == {} and cdi.list_claim_specs(dirs[0]) == {}


def test_a_claim_with_edits_of_its_own_gets_its_own_spec(dirs):
    state = make_state(dirs)
    got = state.prepare(ref(), claim("uid-1", share("gpu-1", "s1")))
    assert got[0].cdi_device_ids == (claim_id("uid-1", "gpu-1", "s1"),)
    spec = cdi.load_spec(cdi.claim_spec_path(dirs[0], "uid-1"))
    assert [d["name"] for d in spec["devices"]] == ["uid-1-gpu-1-share-s1"]
    assert "DRA_RESOURCE_CLAIM_UID=uid-1" in spec["containerEdits"]["env"]
    assert container_env(resolve(dirs[0], got[0].cdi_device_ids))["GPU_DEVICE_1_UUID"] == DEVICES[1].uuid
    state.unprepare(ref())
    assert cdi.list_claim_specs(dirs[0]) == {}
    assert cdi.base_spec_path(dirs[0]).exists()  # the base spec stays for the node's other claims


def test_the_base_spec_is_written_at_start_and_again_only_when_it_changed(dirs):
    make_state(dirs)
    path = cdi.base_spec_path(dirs[0])
    written = path.stat().st_mtime_ns, path.stat().st_ino
    make_state(dirs)
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == written
    make_state(dirs, devices=DEVICES[:2])
    assert [d["name"] for d in cdi.load_spec(path)["devices"]] == ["gpu-0", "gpu-1"]


def test_a_vanished_base_spec_is_written_again_by_the_next_prepare(dirs):
    state = make_state(dirs)
    first = state.prepare(ref(), claim("uid-1", result("gpu-0")))
    cdi.base_spec_path(dirs[0]).unlink()
    assert state.prepare(ref(), claim("uid-1", result("gpu-0"))) == first  # a repeated prepare restores it
    cdi.base_spec_path(dirs[0]).unlink()
    state.prepare(ref("uid-2", "d"), claim("uid-2", result("gpu-1"), name="d"))  # so does a new one
    assert container_env(resolve(dirs[0], first[0].cdi_device_ids))["GPU_DEVICE_0"] == "gpu-0"


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (claim("other-uid", result("gpu-0")), "claim default/c got replaced: uid other-uid, expected uid-1"),
        (claim("uid-1", allocated=False), "claim default/c is not allocated"),
        (
            claim("uid-1", result("gpu-9")),
            r"device gpu-9 of claim default/c is not published by this node "
            r"\(known: gpu-0, gpu-1, gpu-2, gpu-3\)",
        ),
        (
            claim("uid-1", result("gpu-0", pool="node-b")),
            "device gpu-0 of claim default/c is in pool node-b, but this node's pool is node-a",
        ),
        (
            claim("uid-1", result("nic-0", driver="net.example.com")),
            f"claim default/c has no devices allocated by driver {facts.DRIVER_NAME}",
        ),
        (claim("uid-1"), f"claim default/c has no devices allocated by driver {facts.DRIVER_NAME}"),
        (
            claim("uid-1", {"driver": facts.DRIVER_NAME, "pool": POOL}),
            f"result 0 of {facts.DRIVER_NAME} needs request",
        ),
        (
            claim("uid-1", result("gpu-0"), config=[opaque(gpu_config(sharing={"strategy": "MPS"}))]),
            r"claim default/c: config\[0\] \(FromClaim, GpuConfig\) field sharing: "
            "unknown GPU sharing strategy: MPS; feature gate MPSSupport is off",
        ),
        (
            claim("uid-1", result("gpu-0"), config=[opaque(gpu_config(bogus=1))]),
            r"claim default/c: config\[0\] \(FromClaim\) \(GpuConfig\): unknown field\(s\) bogus",
        ),
        (
            claim("uid-1", result("gpu-0"), config=[opaque(mig_config(), requests=["gpu"])]),
            "cannot apply MIG device config to request: gpu .*device gpu-0 is of type gpu",
        ),
    ],
)
def test_bad_claims_fail_with_one_clear_message_and_leave_nothing(dirs, obj, message):
    state = make_state(dirs)
    with pytest.raises(ClaimError, match=message):
        state.prepare(ref(), obj)
    assert state.entries() == {}
    assert cdi.list_claim_specs(dirs[0]) == {}


def test_null_sharing_and_class_configs_are_accepted(dirs):
    config = [opaque(gpu_config(sharing=None), source="FromClass"), opaque(gpu_config(), requests=["gpu"])]
    got = make_state(dirs).prepare(ref(), claim("uid-1", result("gpu-0"), config=config))
    assert [d.device_name for d in got] == ["gpu-0"]


def test_unprepare_removes_spec_and_entry_and_tolerates_unknown_claims(dirs):
    state = make_state(dirs)
    state.prepare(ref(), claim("uid-1", result("gpu-0")))
    state.unprepare(ref())
    assert state.entries() == {}
    assert cdi.list_claim_specs(dirs[0]) == {}
    assert checkpoint_doc(dirs)["claims"] == []
    state.unprepare(ref())  # again: still a success
    state.unprepare(ref("never-seen"))


def test_failed_spec_write_leaves_a_started_entry_that_unprepare_cleans(dirs, monkeypatch):
    state = make_state(dirs)

    def refuse(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cdi, "write_claim_spec", refuse)
    with pytest.raises(ClaimError, match=r"claim default/c: cannot write its CDI spec: .*No space left"):
        state.prepare(ref(), claim("uid-1", share("gpu-0", "s1")))
    assert state.entries()["uid-1"].state is ClaimState.PREPARE_STARTED
    assert state.prepared() == {}
    state.unprepare(ref())
    assert state.entries() == {}
    assert checkpoint_doc(dirs)["claims"] == []


def test_failed_checkpoint_write_is_a_claim_error_and_nothing_is_kept(dirs, monkeypatch):
    state = make_state(dirs)

    def refuse(_entries):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(state._store, "save", refuse)
    with pytest.raises(ClaimError, match=r"cannot write checkpoint .*Read-only file system"):
        state.prepare(ref(), claim("uid-1", result("gpu-0")))
    assert state.entries() == {}


def test_restart_between_prepare_and_unprepare(dirs):
    answer = make_state(dirs).prepare(ref(), claim("uid-1", result("gpu-1")))
    restarted = make_state(dirs)
    assert restarted.load_problem is None
    assert restarted.prepared() == {"uid-1": answer}
    assert restarted.prepare(ref(), claim("uid-1", result("gpu-1"))) == answer
    restarted.unprepare(ref())
    assert cdi.list_claim_specs(dirs[0]) == {}
    assert make_state(dirs).entries() == {}


def test_restart_after_a_started_prepare_redoes_it(dirs, monkeypatch):
    state = make_state(dirs)

    def fail(*_args, **_kwargs):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(cdi, "write_claim_spec", fail)
    with pytest.raises(ClaimError):
        state.prepare(ref(), claim("uid-1", share("gpu-0", "s1")))
    monkeypatch.undo()
    restarted = make_state(dirs)
    assert restarted.entries()["uid-1"].state is ClaimState.PREPARE_STARTED
    got = restarted.prepare(ref(), claim("uid-1", share("gpu-0", "s1")))
    assert [d.device_name for d in got] == ["gpu-0"]
    assert restarted.entries()["uid-1"].state is ClaimState.PREPARE_COMPLETED


def three_claims_then_a_clean_stop(dirs):
    """uid-1 and uid-2 with CDI specs of their own (consumable shares), uid-3 answered from the base spec
    (known from the checkpoint only); a clean stop folds every entry into the file."""
    state = make_state(dirs)
    state.prepare(ref("uid-1"), claim("uid-1", share("gpu-0", "s1")))
    state.prepare(ref("uid-2", "d"), claim("uid-2", share("gpu-1", "s2"), name="d"))
    state.prepare(ref("uid-3", "e"), claim("uid-3", result("gpu-2"), name="e"))
    state.close()


def test_a_corrupt_checkpoint_file_is_read_from_its_copy_and_keeps_every_claim(dirs, caplog):
    three_claims_then_a_clean_stop(dirs)
    (dirs[1] / CHECKPOINT_FILE).write_text('{"format": "vke-gpu-dra-checkpoint", "version": 1, "chec')

    recovered = make_state(dirs)
    assert "is corrupt" in recovered.load_problem and "not valid JSON" in recovered.load_problem
    assert recovered.load_problem.endswith("no claim is lost") and recovered.lost is None
    assert [r.levelname for r in caplog.records if "is corrupt" in r.getMessage()] == ["ERROR"]
    assert len(list(dirs[1].glob(f"{CHECKPOINT_FILE}.corrupt-*"))) == 1
    entries = recovered.entries()
    assert sorted(entries) == ["uid-1", "uid-2", "uid-3"]
    assert all(e.state is ClaimState.PREPARE_COMPLETED for e in entries.values())
    # the GPU of the claim known from the checkpoint only is not handed out again
    with pytest.raises(ClaimError, match=r"device\(s\) gpu-2 are prepared on this node for claim default/e"):
        recovered.prepare(ref("uid-4", "f"), claim("uid-4", result("gpu-2"), name="f"))


def test_with_the_file_and_its_copy_corrupt_no_new_claim_is_prepared_until_the_lost_ones_are_recovered(
    dirs, caplog
):
    three_claims_then_a_clean_stop(dirs)
    for name in (CHECKPOINT_FILE, BACKUP_FILE):
        (dirs[1] / name).write_bytes(b"")

    recovered = make_state(dirs)
    assert recovered.lost == f"checkpoint {dirs[1] / CHECKPOINT_FILE} and its copy unusable"
    entries = recovered.entries()
    # the claims with specs of their own come back from their specs, holding the devices they name
    assert sorted(entries) == ["uid-1", "uid-2"]
    assert all(e.state is ClaimState.PREPARE_STARTED for e in entries.values())
    assert [d.device_name for d in entries["uid-2"].devices] == ["gpu-1"]
    # uid-3 lived only in the file: until it is recovered any device may be its, so no new claim goes on
    pending = r"claim default/f: not prepared while the claims prepared on this node before are recovered"
    with pytest.raises(ClaimError, match=pending):
        recovered.prepare(ref("uid-4", "f"), claim("uid-4", result("gpu-3"), name="f"))
    # a restart before the recovery still knows
    restarted = make_state(dirs)
    assert restarted.lost == recovered.lost
    with pytest.raises(ClaimError, match=pending):
        restarted.prepare(ref("uid-4", "f"), claim("uid-4", result("gpu-3"), name="f"))
    # kubelet's unprepare still goes through
    restarted.unprepare(ref("uid-2", "d"))
    assert sorted(restarted.entries()) == ["uid-1"]

    # recovered (from kubelet and the API server): uid-3 holds gpu-2 from now on, uid-1 gets its name
    lost_three = ClaimEntry(
        "uid-3", "default", "e", ClaimState.PREPARE_STARTED, (PreparedDevice(("gpu",), POOL, "gpu-2", ()),)
    )
    lost_one = ClaimEntry("uid-1", "default", "c", ClaimState.PREPARE_STARTED, ())
    added = restarted.recover_lost([lost_one, lost_three])
    assert [e.uid for e in added] == ["uid-1", "uid-3"]
    assert restarted.lost is None and make_state(dirs).lost is None
    entries = restarted.entries()
    assert (entries["uid-1"].namespace, entries["uid-1"].name) == ("default", "c")
    assert [d.device_name for d in entries["uid-1"].devices] == ["gpu-0"]  # from its spec
    with pytest.raises(ClaimError, match=r"device\(s\) gpu-2 are prepared on this node for claim default/e"):
        restarted.prepare(ref("uid-4", "f"), claim("uid-4", result("gpu-2"), name="f"))
    assert restarted.prepare(ref("uid-5", "g"), claim("uid-5", result("gpu-3"), name="g"))
    # kubelet's retry of a recovered claim prepares it again with its request names
    again = restarted.prepare(ref("uid-1"), claim("uid-1", share("gpu-0", "s1", "gpu")))
    assert again[0].request_names == ("gpu",)
    assert restarted.entries()["uid-1"].state is ClaimState.PREPARE_COMPLETED


def test_a_prepare_meeting_a_loss_runs_the_recovery_within_its_deadline_and_goes_on(dirs):
    three_claims_then_a_clean_stop(dirs)
    for name in (CHECKPOINT_FILE, BACKUP_FILE):
        (dirs[1] / name).write_bytes(b"garbage")
    state = make_state(dirs)
    calls = []

    def recover(deadline):
        calls.append(deadline)
        if len(calls) == 1:
            return "kubelet's PodResources API did not answer"
        state.recover_lost([ClaimEntry("uid-3", "default", "e", ClaimState.PREPARE_STARTED)])
        return None

    state.recover = recover
    failed = r"recovering them failed: kubelet's PodResources API did not answer"
    new = claim("uid-4", result("gpu-3"), name="f")
    with pytest.raises(ClaimError, match=failed):
        state.prepare(ref("uid-4", "f"), new, deadline=time.monotonic() + 5)
    assert state.prepare(ref("uid-4", "f"), new)
    assert len(calls) == 2 and state.lost is None


def test_orphan_cdi_spec_is_recovered_even_with_a_valid_checkpoint(dirs):
    make_state(dirs)  # writes nothing yet
    spec = cdi.build_claim_spec("uid-9", DEVICES[:1])
    cdi.write_claim_spec(dirs[0], "uid-9", spec)
    state = make_state(dirs)
    assert state.entries()["uid-9"].state is ClaimState.PREPARE_STARTED
    state.unprepare(ref("uid-9"))
    assert cdi.list_claim_specs(dirs[0]) == {}


def test_missing_spec_of_a_completed_claim_is_rewritten(dirs):
    state = make_state(dirs)
    first = state.prepare(ref(), claim("uid-1", share("gpu-2", "s1")))
    cdi.claim_spec_path(dirs[0], "uid-1").unlink()
    assert make_state(dirs).prepare(ref(), claim("uid-1", share("gpu-2", "s1"))) == first
    assert (
        cdi.load_spec(cdi.claim_spec_path(dirs[0], "uid-1"))["devices"][0]["name"] == "uid-1-gpu-2-share-s1"
    )


def test_missing_spec_of_a_claim_on_a_vanished_device_is_an_error(dirs):
    make_state(dirs).prepare(ref(), claim("uid-1", share("gpu-3", "s1")))
    cdi.claim_spec_path(dirs[0], "uid-1").unlink()
    with pytest.raises(ClaimError, match=r"device.* gpu-3, which this node no longer publishes"):
        make_state(dirs, devices=DEVICES[:2]).prepare(ref(), claim("uid-1", share("gpu-3", "s1")))


def test_real_gpu_spec_uses_control_nodes_present_under_dev_root(dirs, tmp_path):
    dev_root = tmp_path / "host"
    (dev_root / "dev").mkdir(parents=True)
    (dev_root / "dev" / "nvidia-uvm").touch()
    gpu = Device(
        name="gpu-0",
        device_type="gpu",
        uuid="GPU-real",
        attributes={facts.ATTR_TYPE: "gpu"},
        capacity={},
        minor=0,
        device_nodes=("/dev/nvidia0",),
    )
    state = make_state(dirs, devices=[gpu], dev_root=dev_root)
    got = state.prepare(ref(), claim("uid-1", result("gpu-0")))
    spec = cdi.load_spec(cdi.base_spec_path(dirs[0]))
    assert spec["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}]
    assert spec["devices"][0]["containerEdits"] == {"deviceNodes": [{"path": "/dev/nvidia0"}]}
    assert "NVIDIA_VISIBLE_DEVICES=void" in spec["containerEdits"]["env"]
    # nvidia-uvm-tools appears later (created once something loads the UVM module): the next prepare sees it
    (dev_root / "dev" / "nvidia-uvm-tools").touch()
    state.unprepare(ref())
    state.prepare(ref(), claim("uid-1", result("gpu-0")))
    nodes = [n["path"] for n in resolve(dirs[0], got[0].cdi_device_ids)["deviceNodes"]]
    assert nodes == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0"]


def test_duplicate_device_names_are_rejected(dirs):
    with pytest.raises(ValueError, match="duplicated: gpu-0"):
        make_state(dirs, devices=[DEVICES[0], DEVICES[0]])


def test_many_threads_many_claims(dirs):
    state = make_state(dirs, devices=SimulatedSource(16, "NVIDIA A30", POOL).discover().devices)
    uids = [f"uid-{i}" for i in range(16)]

    def work(i):
        uid = uids[i % 16]
        return uid, state.prepare(ref(uid), claim(uid, result(f"gpu-{i % 16}")))

    with ThreadPoolExecutor(max_workers=32) as pool:
        answers = list(pool.map(work, range(64)))
    by_uid = {}
    for uid, got in answers:
        assert by_uid.setdefault(uid, got) == got  # the same claim always gets the same answer
    assert sorted(state.prepared()) == sorted(uids)
    assert sorted(c["uid"] for c in checkpoint_doc(dirs)["claims"]) == sorted(uids)
    assert cdi.list_claim_specs(dirs[0]) == {}  # each answered from the base spec

    with ThreadPoolExecutor(max_workers=32) as pool:
        list(pool.map(lambda uid: state.unprepare(ref(uid)), uids * 2))
    assert state.entries() == {} and checkpoint_doc(dirs)["claims"] == []
    assert cdi.list_claim_specs(dirs[0]) == {}


def test_same_claim_concurrently_is_prepared_once(dirs, monkeypatch):
    state = make_state(dirs)
    writes = []
    real_write = cdi.write_claim_spec

    def counting_write(*args, **kwargs):
        writes.append(args[1])
        return real_write(*args, **kwargs)

    monkeypatch.setattr(cdi, "write_claim_spec", counting_write)
    start = threading.Barrier(8)

    def work(_):
        start.wait(timeout=30)
        return state.prepare(ref(), claim("uid-1", share("gpu-0", "s1")))

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(work, range(8)))
    assert all(a == answers[0] for a in answers)
    assert writes == ["uid-1"]
    assert list(state.entries()) == ["uid-1"]


def test_prepares_and_unprepares_never_overlap(dirs, monkeypatch):
    """Every call holds the node lock from reading the checkpoint to writing it back."""
    state = make_state(dirs, devices=SimulatedSource(8, "NVIDIA A30", POOL).discover().devices)
    inside, most = [0], [0]
    guard = threading.Lock()
    real_load = state._store.load

    def counting_load():
        with guard:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            time.sleep(0.002)  # widens the window two unserialized calls would share
            return real_load()
        finally:
            with guard:
                inside[0] -= 1

    monkeypatch.setattr(state._store, "load", counting_load)
    uids = [f"uid-{i}" for i in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda u: state.prepare(ref(u), claim(u, result(f"gpu-{u[4:]}"))), uids))
        list(pool.map(lambda u: state.unprepare(ref(u)), uids))
    assert most[0] == 1


def test_no_prepared_claim_is_kept_in_memory_between_calls(dirs):
    """Two states on one node (two plugin processes) see each other's changes at their next call."""
    first, second = make_state(dirs), make_state(dirs)
    answer = first.prepare(ref("uid-1"), claim("uid-1", share("gpu-0", "s1")))
    assert second.prepared() == {"uid-1": answer}
    second.prepare(ref("uid-2", "d"), claim("uid-2", share("gpu-1", "s2"), name="d"))
    assert sorted(first.prepared()) == ["uid-1", "uid-2"]
    # an unprepare through one state is not undone by the next write of the other
    second.unprepare(ref("uid-1"))
    first.prepare(ref("uid-3", "e"), claim("uid-3", share("gpu-2", "s3"), name="e"))
    assert sorted(c["uid"] for c in checkpoint_doc(dirs)["claims"]) == ["uid-2", "uid-3"]
    assert sorted(cdi.list_claim_specs(dirs[0])) == ["uid-2", "uid-3"]


def hold_node_lock(dirs):
    fd = os.open(dirs[1] / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_waiting_for_the_node_lock_ends_at_the_call_deadline(dirs):
    state = make_state(dirs)
    fd = hold_node_lock(dirs)  # another process's call holds it (an open file description of its own)
    try:
        with pytest.raises(
            ClaimError,
            match=r"claim default/c: timed out waiting for the node's "
            r"prepare/unprepare lock .*serialize.lock",
        ):
            state.prepare(ref(), claim("uid-1", result("gpu-0")), deadline=time.monotonic() + 0.05)
        with pytest.raises(ClaimError, match="timed out waiting"):
            state.unprepare(ref(), deadline=time.monotonic() - 1)  # already past
    finally:
        os.close(fd)
    assert state.entries() == {} and cdi.list_claim_specs(dirs[0]) == {}
    state.prepare(ref(), claim("uid-1", result("gpu-0")), deadline=time.monotonic() + 30)


def test_start_waits_for_the_node_lock_and_says_so_when_it_stays_held(dirs):
    make_state(dirs)
    fd = hold_node_lock(dirs)
    try:
        with pytest.raises(StateLockTimeout, match=r"start: .*serialize.lock stayed locked for 0.05 s"):
            make_state(dirs, lock_wait=0.05)
    finally:
        os.close(fd)


def test_leftover_temp_files_of_interrupted_writes_are_removed_at_start(dirs):
    cdi_root, data = dirs
    cdi_root.mkdir(parents=True)
    data.mkdir(parents=True)
    spec_name = cdi.claim_spec_path(cdi_root, "uid-7").name
    ours = [data / f".{CHECKPOINT_FILE}.a1b2_c3d.tmp", cdi_root / f".{spec_name}.zz9_0abc.tmp"]
    foreign = [
        data / ".checkpoint.json.a1b2c3d4.tmp",  # NVIDIA's checkpoint
        data / f".{CHECKPOINT_FILE}.short.tmp",  # not tempfile's 8 random characters
        data / f"{CHECKPOINT_FILE}.a1b2c3d4.tmp",  # no leading dot
        cdi_root
        / f".{facts.CDI_VENDOR}-{facts.CDI_CLASS_DEVICE}.yaml.a1b2c3d4.tmp",  # not a claim spec of ours
        cdi_root / "spec.a1b2c3d4.tmp",  # the CDI library's own temp files
        cdi_root / f".{spec_name}.a1b2c3d4.tmp.keep",
        cdi_root / f".{spec_name}.A1B2C3D4.tmp",
    ]
    for path in ours + foreign:
        path.write_text("partial")
    link = cdi_root / f".{spec_name}.linkabcd.tmp"
    link.symlink_to(foreign[0])
    directory = cdi_root / f".{spec_name}.dirabcde.tmp"
    directory.mkdir()
    state = make_state(dirs)
    assert sorted(state.removed_leftovers) == sorted(ours)
    assert not any(p.exists() for p in ours)
    assert all(p.exists() for p in foreign) and link.is_symlink() and directory.is_dir()


def test_calls_that_wait_for_the_lock_share_one_batch_of_checkpoint_writes(dirs, monkeypatch):
    state = make_state(dirs)
    real_save = state._store.save
    saves = []
    first_inside, release = threading.Event(), threading.Event()

    def held_first_save(entries):
        saves.append({uid: e.state for uid, e in entries.items()})
        if len(saves) == 1:
            first_inside.set()
            release.wait(timeout=30)
        real_save(entries)

    monkeypatch.setattr(state._store, "save", held_first_save)
    others = ("uid-1", "uid-2", "uid-3")
    with ThreadPoolExecutor(max_workers=5) as pool:
        first = pool.submit(state.prepare, ref("uid-0"), claim("uid-0", result("gpu-0")))
        assert first_inside.wait(timeout=30)
        queued = [
            pool.submit(state.prepare, ref(u), claim(u, share(f"gpu-{i}", f"s{i}")))
            for i, u in enumerate(others, start=1)
        ]
        gone = pool.submit(state.unprepare, ref("uid-9"))  # unknown: no write of its own
        for _ in range(3000):  # until all four wait behind the held batch
            if state._runner.waiting() == 4:
                break
            threading.Event().wait(0.01)
        release.set()
        assert all(f.result(timeout=30) for f in [first, *queued]) and gone.result(timeout=30) is None
    started, completed = ClaimState.PREPARE_STARTED, ClaimState.PREPARE_COMPLETED
    assert saves[0] == {"uid-0": completed}  # a claim answered from the base spec: one write
    assert saves[1] == {"uid-0": completed, **dict.fromkeys(others, started)}  # one write for three claims
    assert saves[2] == {"uid-0": completed, **dict.fromkeys(others, completed)}
    assert len(saves) == 3  # 2 per claim with a spec of its own when each call writes on its own
    assert set(state.prepared()) == {"uid-0", *others}


def test_a_failed_batch_write_fails_each_of_its_claims_and_spares_the_others(dirs, monkeypatch):
    state = make_state(dirs)
    state.prepare(ref("uid-0"), claim("uid-0", result("gpu-0")))
    real_save = state._store.save

    def refuse_uid_2(entries):
        if "uid-2" in entries:
            raise OSError(28, "No space left on device")
        real_save(entries)

    monkeypatch.setattr(state._store, "save", refuse_uid_2)
    with pytest.raises(ClaimError, match=r"claim default/c: cannot write checkpoint .*No space left"):
        state.prepare(ref("uid-2"), claim("uid-2", result("gpu-1")))
    assert state.prepare(ref("uid-0"), claim("uid-0", result("gpu-0")))[0].device_name == "gpu-0"
    assert list(state.entries()) == ["uid-0"] and cdi.list_claim_specs(dirs[0]) == {}


def test_an_unexpected_error_in_a_batch_is_an_internal_error_of_its_claims(dirs, monkeypatch):
    state = make_state(dirs)

    def bug(*_args, **_kwargs):
        raise ValueError("bug")

    monkeypatch.setattr(state._store, "save", bug)
    with pytest.raises(RuntimeError, match=r"prepare of claim default/c failed: ValueError\('bug'\)"):
        state.prepare(ref(), claim("uid-1", result("gpu-0")))
    monkeypatch.undo()
    assert state.entries() == {}
    state.prepare(ref(), claim("uid-1", result("gpu-0")))  # the lock was released


def test_a_bug_met_by_one_claim_of_a_batch_fails_only_that_claim(dirs, monkeypatch):
    state = make_state(dirs)
    real = allocation_step.allocated_devices

    def bug_for_uid_2(ref, *args, **kwargs):
        if ref.uid == "uid-2":
            raise KeyError("status")
        return real(ref, *args, **kwargs)

    monkeypatch.setattr(allocation_step, "allocated_devices", bug_for_uid_2)
    with pytest.raises(RuntimeError, match=r"prepare of claim default/c failed: KeyError\('status'\)"):
        state.prepare(ref("uid-2"), claim("uid-2", result("gpu-1")))
    assert state.prepare(ref("uid-1"), claim("uid-1", result("gpu-0")))[0].device_name == "gpu-0"
    assert list(state.entries()) == ["uid-1"]


def test_a_bug_met_by_one_claim_of_a_shared_batch_spares_the_others(dirs, monkeypatch):
    state = make_state(dirs)
    real_save, real_allocated = state._store.save, allocation_step.allocated_devices
    first_inside, release = threading.Event(), threading.Event()
    saves = []

    def held_first_save(entries):
        saves.append(set(entries))
        if len(saves) == 1:
            first_inside.set()
            release.wait(timeout=30)
        real_save(entries)

    def bug_for_uid_2(ref, *args, **kwargs):
        if ref.uid == "uid-2":
            raise KeyError("status")
        return real_allocated(ref, *args, **kwargs)

    monkeypatch.setattr(state._store, "save", held_first_save)
    monkeypatch.setattr(allocation_step, "allocated_devices", bug_for_uid_2)
    with ThreadPoolExecutor(max_workers=3) as pool:
        first = pool.submit(state.prepare, ref("uid-0"), claim("uid-0", result("gpu-0")))
        assert first_inside.wait(timeout=30)
        good = pool.submit(state.prepare, ref("uid-1"), claim("uid-1", result("gpu-1")))
        bad = pool.submit(state.prepare, ref("uid-2"), claim("uid-2", result("gpu-2")))
        for _ in range(3000):  # until both wait behind the held batch
            if state._runner.waiting() == 2:
                break
            threading.Event().wait(0.01)
        release.set()
        assert first.result(timeout=30)[0].device_name == "gpu-0"
        assert good.result(timeout=30)[0].device_name == "gpu-1"
        with pytest.raises(RuntimeError, match=r"prepare of claim default/c failed: KeyError\('status'\)"):
            bad.result(timeout=30)
    assert saves == [{"uid-0"}, {"uid-0", "uid-1"}]  # one batch: uid-1 went on without uid-2
    assert sorted(state.entries()) == ["uid-0", "uid-1"]


def prepare_together(state, claims):
    """Prepare `claims` (uid -> claim object) from as many threads at once, as kubelet's concurrent calls
    do; uid -> the answer or the error."""
    start = threading.Barrier(len(claims))

    def work(uid):
        start.wait(timeout=30)
        try:
            return uid, state.prepare(ref(uid, uid), claims[uid])
        except ClaimError as exc:
            return uid, exc

    with ThreadPoolExecutor(max_workers=len(claims)) as pool:
        return dict(pool.map(work, claims))


def test_the_held_devices_guard_holds_for_exclusive_claims_prepared_together(dirs):
    """Exclusive claims allocated the same GPU, prepared concurrently (one batch): exactly one is
    prepared, the others get the guard's error, as they would one after another."""
    state = make_state(dirs)
    uids = [f"uid-{i}" for i in range(8)]
    answers = prepare_together(state, {u: claim(u, result("gpu-0"), name=u) for u in uids})
    prepared = [u for u, a in answers.items() if isinstance(a, list)]
    assert len(prepared) == 1
    for uid, answer in answers.items():
        if uid not in prepared:
            assert isinstance(answer, ClaimError)
            assert f"are prepared on this node for claim default/{prepared[0]} (uid {prepared[0]})" in str(
                answer
            )
    assert list(state.prepared()) == prepared
    # one after another: the same answer
    with pytest.raises(ClaimError, match=prepared[0]):
        state.prepare(ref("uid-9", "uid-9"), claim("uid-9", result("gpu-0"), name="uid-9"))


def test_admin_access_and_distinct_shares_prepared_together_are_all_allowed(dirs):
    state = make_state(dirs)
    monitors = {
        f"adm-{i}": claim(f"adm-{i}", {**result("gpu-1"), "adminAccess": True}, name=f"adm-{i}")
        for i in range(4)
    }
    shares = {f"sh-{i}": claim(f"sh-{i}", share("gpu-2", f"s{i}"), name=f"sh-{i}") for i in range(4)}
    answers = prepare_together(state, {**monitors, **shares})
    assert all(isinstance(a, list) for a in answers.values()), answers
    assert sorted(state.prepared()) == sorted([*monitors, *shares])


# ------------------------------------------------------------------------------------ a full disk


@pytest.fixture
def small_disk(tmp_path):
    """The plugin data dir on a 3 MiB tmpfs of its own (root only), with `fill()` taking every byte left
    and `free()` giving it back."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem for the plugin data dir needs root")
    data = tmp_path / "plugin"
    data.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m,mode=0755", "tmpfs", str(data)], check=True)
    filler = data / "filler"

    class Disk:
        path = data

        @staticmethod
        def fill():
            with filler.open("ab", buffering=0) as file, contextlib.suppress(OSError):
                while file.write(b"\0" * 4096):
                    pass
            with pytest.raises(OSError):  # nothing left, not even for a small file
                (data / "probe").write_bytes(b"x" * 4096)

        @staticmethod
        def leave(size):
            """Give back `size` bytes of what `fill` took."""
            os.truncate(filler, filler.stat().st_size - size)

        @staticmethod
        def free():
            filler.unlink()
            with contextlib.suppress(FileNotFoundError):
                (data / "probe").unlink()

    try:
        yield Disk
    finally:
        subprocess.run(["umount", "-l", str(data)], check=True)


def test_a_full_disk_does_not_stop_the_start_and_the_plugin_serves_and_recovers(tmp_path, small_disk, caplog):
    dirs = (tmp_path / "cdi", small_disk.path)
    state = make_state(dirs)
    state.prepare(ref("uid-1"), claim("uid-1", result("gpu-0")))  # a journal record: not folded (a kill)
    small_disk.fill()

    started = make_state(dirs)  # the start-time fold cannot write: best effort
    assert any("cannot fold the checkpoint's journal at start" in r.getMessage() for r in caplog.records)
    assert sorted(started.entries()) == ["uid-1"]
    # a plain prepare and an unprepare are journal records in blocks written already
    started.prepare(ref("uid-2", "d"), claim("uid-2", result("gpu-1"), name="d"))
    started.unprepare(ref("uid-1"))
    started.unprepare(ref("uid-9", "x"))  # an unknown claim: nothing to write
    assert sorted(started.entries()) == ["uid-2"]
    # a prepare that must write a file of its own answers why, naming the file
    gated = make_state(dirs, gates=featuregates.parse("DeviceMetadata=true"))
    with pytest.raises(ClaimError, match=rf"{small_disk.path}/dra-device-metadata/uid-3/.*No space left"):
        gated.prepare(ref("uid-3", "e"), claim("uid-3", result("gpu-2"), name="e"))
    gated.unprepare(ref("uid-3", "e"))  # what it left is cleaned

    small_disk.free()  # space again: no restart needed
    assert gated.prepare(ref("uid-3", "e"), claim("uid-3", result("gpu-2"), name="e"))
    gated.close()  # the fold works again
    assert sorted(c["uid"] for c in checkpoint_doc(dirs)["claims"]) == ["uid-2", "uid-3"]


def test_a_start_with_no_room_for_the_journal_serves_from_the_file_and_makes_the_journal_later(
    tmp_path, small_disk, caplog
):
    dirs = (tmp_path / "cdi", small_disk.path)
    small_disk.fill()
    small_disk.leave(64 * 1024)
    state = make_state(dirs)  # room for the file, not for a 1 MiB journal
    said = [r for r in caplog.records if "no checkpoint journal could be made" in r.getMessage()]
    assert not (small_disk.path / JOURNAL_FILE).exists()
    state.prepare(ref("uid-1"), claim("uid-1", result("gpu-0")))  # the file rewritten
    assert [c["uid"] for c in checkpoint_doc(dirs)["claims"]] == ["uid-1"]
    assert len(said) == 1  # said once while it lasts
    small_disk.free()
    state.prepare(ref("uid-2", "d"), claim("uid-2", result("gpu-1"), name="d"))
    assert (small_disk.path / JOURNAL_FILE).exists()
    assert sorted(make_state(dirs).entries()) == ["uid-1", "uid-2"]
