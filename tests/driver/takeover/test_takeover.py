"""Taking a node over from NVIDIA's 25.8.1 plugin: its checkpoint read (fixtures written by NVIDIA's own
checkpoint code, see fixtures/nvidia-25.8.1/README.md), its claims adopted, prepared under our CDI ids and
unprepared with nothing of NVIDIA's left."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path

import pytest
from vke_gpu_dra import cdi
from vke_gpu_dra.sharing.runners import Mounter, NvidiaSmi
from vke_gpu_dra.state import DeviceState
from vke_gpu_dra.takeover import LEDGER_FILE, Takeover, Tools, adoption, cleanup, nvidia_checkpoint
from vke_gpu_dra.takeover.nvidia_checkpoint import (
    NvidiaCheckpointError,
    NvidiaClaimState,
    kubelet_checksum,
    parse,
)
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, PreparedDevice

from tests.driver.claim_objects import claim, result
from tests.driver.devices import full_gpu, mig_device
from tests.driver.sharing_env import FakeDriverRoot

FIXTURES = Path(__file__).parent.parent / "fixtures" / "nvidia-25.8.1"
V2 = FIXTURES / "checkpoint-v2.json"
V1 = FIXTURES / "checkpoint-v1.json"
EMPTY = FIXTURES / "checkpoint-empty.json"

POOL = "gpu-node-1"
NS = "nvidia-dra-driver-gpu"
UID_FULL = "5a1f0c2e-0001-4e6b-9c1d-000000000001"
UID_MIG = "5a1f0c2e-0002-4e6b-9c1d-000000000002"
UID_TS = "5a1f0c2e-0003-4e6b-9c1d-000000000003"
UID_MPS = "5a1f0c2e-0004-4e6b-9c1d-000000000004"
UID_STARTED = "5a1f0c2e-0005-4e6b-9c1d-000000000005"
GPU0 = "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"
MIG = "MIG-1d2c3b4a-5e6f-5a7b-8c9d-0e1f2a3b4c5d"
GPU2 = "GPU-2a3b4c5d-6e7f-4a8b-9c0d-1e2f3a4b5c6d"
GPU3 = "GPU-3b4c5d6e-7f8a-4b9c-8d1e-2f3a4b5c6d7e"
GPU4 = "GPU-00000004-aaaa"
MPS_ID = f"{UID_MPS}-{hashlib.sha256(GPU3.encode()).hexdigest()[:5]}"
MPS_DAEMON = f"mps-control-daemon-{MPS_ID}"
DEVICES = [
    full_gpu(0, GPU0),
    mig_device(1, MIG),
    full_gpu(2, GPU2),
    full_gpu(3, GPU3),
    full_gpu(4, GPU4),
]


def claim_id(uid: str, device: str) -> str:
    return f"{facts.CDI_VENDOR}/{facts.CDI_CLASS_CLAIM}={uid}-{device}"


# ------------------------------------------------------------------------------- NVIDIA's format


def test_checksums_of_nvidias_files_are_reproduced():
    for path in (V2, V1, EMPTY):
        parse(path.read_bytes())  # raises on a mismatch
    empty = json.loads(EMPTY.read_bytes())
    assert empty["checksum"] == kubelet_checksum(b'{"checksum":0,"v1":{}}')


def test_v2_file_has_every_claim_with_its_state_devices_and_sharing():
    got = parse(V2.read_bytes())
    assert got.version == 2
    assert set(got.claims) == {UID_FULL, UID_MIG, UID_TS, UID_MPS, UID_STARTED}
    full = got.claims[UID_FULL]
    assert full.state is NvidiaClaimState.PREPARE_COMPLETED
    (group,) = full.groups
    (device,) = group.devices
    assert (device.kind, device.uuid, device.device_name, device.pool_name) == ("gpu", GPU0, "gpu-0", POOL)
    assert device.requests == ("gpu",)
    assert device.cdi_device_ids == ("k8s.gpu.nvidia.com/device=gpu-0",)
    assert group.mps_daemon_id == "" and full.sharing_strategies == frozenset()
    mig = got.claims[UID_MIG].groups[0].devices[0]
    assert (mig.kind, mig.uuid, mig.device_name) == ("mig", MIG, "gpu-1-mig-19-0-1")
    assert got.claims[UID_TS].sharing_strategies == {"TimeSlicing"}
    mps = got.claims[UID_MPS]
    assert mps.sharing_strategies == {"MPS"} and mps.groups[0].mps_daemon_id == MPS_ID
    assert mps.groups[0].devices[0].cdi_device_ids[1] == claim_id(UID_MPS, "gpu-3")
    started = got.claims[UID_STARTED]
    assert started.state is NvidiaClaimState.PREPARE_STARTED and started.groups == ()
    assert [(a.request, a.driver, a.pool, a.device) for a in started.allocated] == [
        ("gpu", "gpu.nvidia.com", POOL, "gpu-4")
    ]


def test_v1_file_of_older_plugins_lists_completed_claims():
    got = parse(V1.read_bytes())
    assert got.version == 1
    assert set(got.claims) == {UID_FULL, UID_MIG, UID_TS, UID_MPS}
    assert {c.state for c in got.claims.values()} == {NvidiaClaimState.PREPARE_COMPLETED}
    assert got.claims[UID_MPS].groups[0].mps_daemon_id == MPS_ID


def test_a_changed_byte_fails_the_checksum_of_its_section():
    data = V2.read_text()
    first = data.index(POOL)
    last = data.rindex(POOL)
    assert first < data.index('"v2"') < last
    in_v1 = data[:first] + "gpu-node-2" + data[first + len(POOL) :]
    in_v2 = data[:last] + "gpu-node-2" + data[last + len(POOL) :]
    with pytest.raises(NvidiaCheckpointError, match=r"^V1 checksum mismatch: stored \d+, computed \d+$"):
        parse(in_v1.encode())
    with pytest.raises(NvidiaCheckpointError, match=r"^V2 checksum mismatch: stored \d+, computed \d+$"):
        parse(in_v2.encode())


def _signed_v2(claims: dict) -> bytes:
    """A file shaped as NVIDIA's, signed with the reproduced checksum (for shape errors past the checksum)."""
    v2_body = json.dumps({"preparedClaims": claims}, separators=(",", ":"))[1:]
    v2 = '{"checksum":%d,' + v2_body
    v2 = v2 % kubelet_checksum((v2 % 0).encode())
    v1_sum = kubelet_checksum(b'{"checksum":0}')
    return f'{{"checksum":{v1_sum},"v2":{v2}}}'.encode()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{not json", r"^not valid JSON: "),
        (b"[]", r"^top level must be an object, got list$"),
        (b'{"checksum":1,"v3":{}}', r"^top level has unknown key\(s\) \['v3'\]; allowed: checksum, v1, v2$"),
        (b'{"v1":{}}', r"^top level has no checksum$"),
        (b'{"checksum":"x"}', r"^checksum must be a non-negative integer, got 'x'$"),
        (
            _signed_v2({"u1": {"checkpointState": "Prepared"}}),
            r"^v2\.preparedClaims\[u1\]\.checkpointState must be one of PrepareStarted, PrepareCompleted, "
            r"got 'Prepared'$",
        ),
        (
            _signed_v2(
                {"u1": {"checkpointState": "PrepareCompleted", "preparedDevices": [{"devices": [{}]}]}}
            ),
            r"^v2\.preparedClaims\[u1\]\.preparedDevices\[0\]\.devices\[0\] "
            r"must have exactly one of gpu, mig set",
        ),
    ],
)
def test_malformed_files_are_one_clear_error(data, message):
    with pytest.raises(NvidiaCheckpointError, match=message):
        parse(data)


# ------------------------------------------------------------------------------------- takeover


@pytest.fixture
def node(tmp_path):
    return nvidia_node(tmp_path)


def nvidia_node(tmp_path):
    """A node as NVIDIA's plugin left it: its checkpoint, claim and base specs, an MPS daemon's files."""
    driver_root = FakeDriverRoot(tmp_path / "driver-root")
    cdi_root, data = tmp_path / "cdi", tmp_path / "plugin"
    cdi_root.mkdir()
    data.mkdir()
    shutil.copy(V2, data / "checkpoint.json")
    (cdi_root / f"k8s.gpu.nvidia.com-claim_{UID_MPS}.yaml").write_text(
        "cdiVersion: 0.5.0\nkind: k8s.gpu.nvidia.com/claim\ndevices:\n"
        f"- name: {UID_MPS}-gpu-3\n  containerEdits:\n    env: [CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps]\n"
    )
    (cdi_root / "k8s.gpu.nvidia.com-device_base.yaml").write_text(
        "cdiVersion: 0.5.0\nkind: k8s.gpu.nvidia.com/device\ndevices:\n- name: gpu-0\n"
        "  containerEdits:\n    deviceNodes: [{path: /dev/nvidia0}]\n"
    )
    for sub in ("pipe", "shm", "log"):
        (data / "mps" / MPS_ID / sub).mkdir(parents=True)
    return driver_root, cdi_root, data


def make_takeover(node, api=None):
    driver_root, cdi_root, data = node
    mounts: list[list[str]] = []

    def record(command, **kwargs):
        import subprocess

        mounts.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    return Takeover(
        Tools(
            cdi_root=cdi_root,
            plugin_data_dir=data,
            namespace=NS,
            api=api,
            smi=NvidiaSmi(driver_root.root),
            mounter=Mounter(runner=record),
        )
    )


def make_state(node, api=None):
    _, cdi_root, data = node
    return DeviceState(
        driver_name=facts.DRIVER_NAME,
        pool_name=POOL,
        devices=DEVICES,
        cdi_root=cdi_root,
        plugin_data_dir=data,
        takeover=make_takeover(node, api),
    )


def ref(uid: str, name: str = "c") -> ClaimRef:
    return ClaimRef("default", name, uid)


def ledger(node) -> dict:
    return {c["uid"]: c["released"] for c in json.loads((node[2] / LEDGER_FILE).read_text())["claims"]}


def test_nvidias_claims_are_adopted_prepared_with_our_ids_and_unprepared_with_nothing_left(
    node, kube, fake_api
):
    driver_root, cdi_root, data = node
    nvidia_bytes = (data / "checkpoint.json").read_bytes()
    fake_api.deployments[(NS, MPS_DAEMON)] = {"metadata": {"name": MPS_DAEMON, "namespace": NS}}
    state = make_state(node, kube)
    assert ledger(node) == dict.fromkeys([UID_FULL, UID_MIG, UID_TS, UID_MPS, UID_STARTED], False)

    # kubelet's next prepare of a completed claim: the same devices, our CDI ids, nothing run
    got = state.prepare(ref(UID_FULL), claim(UID_FULL, result("gpu-0", pool=POOL)))
    assert got == [PreparedDevice(("gpu",), POOL, "gpu-0", (claim_id(UID_FULL, "gpu-0"),))]
    assert [d["name"] for d in cdi.load_spec(cdi.claim_spec_path(cdi_root, UID_FULL))["devices"]] == [
        f"{UID_FULL}-gpu-0"
    ]
    got = state.prepare(ref(UID_MIG), claim(UID_MIG, result("gpu-1-mig-19-0-1", "mig", pool=POOL)))
    assert got[0].cdi_device_ids == (claim_id(UID_MIG, "gpu-1-mig-19-0-1"),)
    # an MPS claim keeps NVIDIA's daemon: its pipe and shm are in our spec
    got = state.prepare(ref(UID_MPS), claim(UID_MPS, result("gpu-3", "mps", pool=POOL)))
    assert got == [PreparedDevice(("mps",), POOL, "gpu-3", (claim_id(UID_MPS, "gpu-3"),))]
    mps_spec = cdi.load_spec(cdi.claim_spec_path(cdi_root, UID_MPS))
    mounts = {(m["hostPath"], m["containerPath"]) for m in mps_spec["devices"][0]["containerEdits"]["mounts"]}
    assert (str(data / "mps" / MPS_ID / "pipe"), "/tmp/nvidia-mps") in mounts
    assert (str(data / "mps" / MPS_ID / "shm"), "/dev/shm") in mounts
    assert fake_api.deployments.keys() == {(NS, MPS_DAEMON)}
    # a claim NVIDIA only started is prepared anew by us
    got = state.prepare(ref(UID_STARTED), claim(UID_STARTED, result("gpu-4", pool=POOL)))
    assert got[0].cdi_device_ids == (cdi.base_device_id("gpu-4"),)  # no edits of its own: our base spec
    assert ledger(node)[UID_STARTED] is True
    assert driver_root.calls() == []
    # the same prepare again is answered from our checkpoint
    assert state.prepare(ref(UID_FULL), claim(UID_FULL, result("gpu-0", pool=POOL)))[0].device_name == "gpu-0"

    # unprepare (after a restart: nothing in memory), also of a claim never prepared again
    state = make_state(node, kube)
    for uid in (UID_FULL, UID_MIG, UID_TS, UID_MPS, UID_STARTED):
        state.unprepare(ref(uid))
    assert driver_root.calls() == [
        f"-i {GPU2} -c DEFAULT",
        f"compute-policy -i {GPU2} --set-timeslice 0",
        f"-i {GPU3} -c DEFAULT",
        f"compute-policy -i {GPU3} --set-timeslice 0",
    ]
    assert fake_api.deployments == {}
    assert not (data / "mps" / MPS_ID).exists()
    # claim specs and NVIDIA's base spec gone; ours stays for the node's next claims
    assert sorted(p.name for p in cdi_root.iterdir()) == [cdi.BASE_SPEC_NAME]
    assert state.entries() == {}
    assert set(ledger(node).values()) == {True}
    # NVIDIA's file was never written: a rollback finds it as NVIDIA left it
    assert (data / "checkpoint.json").read_bytes() == nvidia_bytes
    # a restart adopts nothing again, and a repeated unprepare is a no-op
    driver_root.clear()
    state = make_state(node, kube)
    state.unprepare(ref(UID_TS))
    assert driver_root.calls() == [] and set(ledger(node).values()) == {True}


def test_v1_file_claims_are_adopted_as_completed(node, kube):
    data = node[2]
    shutil.copy(V1, data / "checkpoint.json")
    state = make_state(node, kube)
    assert ledger(node) == dict.fromkeys([UID_FULL, UID_MIG, UID_TS, UID_MPS], False)
    got = state.prepare(ref(UID_TS), claim(UID_TS, result("gpu-2", "ts", pool=POOL)))
    assert got == [PreparedDevice(("ts",), POOL, "gpu-2", (claim_id(UID_TS, "gpu-2"),))]


def test_base_spec_stays_while_an_adopted_claim_is_not_released(node, kube, fake_api):
    _, cdi_root, _ = node
    state = make_state(node, kube)
    for uid in (UID_FULL, UID_MIG, UID_TS, UID_MPS):
        state.unprepare(ref(uid))
        assert (cdi_root / "k8s.gpu.nvidia.com-device_base.yaml").exists()
    state.unprepare(ref(UID_STARTED))
    assert not (cdi_root / "k8s.gpu.nvidia.com-device_base.yaml").exists()


@pytest.mark.parametrize("corrupt", [b"{", b'{"checksum":1}', None])
def test_unusable_nvidia_checkpoint_is_one_log_line_and_nothing_adopted(node, caplog, corrupt):
    _, cdi_root, data = node
    path = data / "checkpoint.json"
    if corrupt is None:  # a valid file with one byte changed
        corrupt = V2.read_bytes().replace(b'"gpu-0"', b'"gpu-9"', 1)
    path.write_bytes(corrupt)
    with caplog.at_level(logging.ERROR, logger="vke_gpu_dra.takeover"):
        state = make_state(node)
    lines = [r.getMessage() for r in caplog.records if r.name == "vke_gpu_dra.takeover"]
    assert len(lines) == 1
    assert lines[0].startswith(f"NVIDIA's checkpoint {path} is not usable (")
    assert lines[0].endswith("); adopting none of its claims")
    assert not (data / LEDGER_FILE).exists()
    assert path.read_bytes() == corrupt
    # pods NVIDIA started may still need its devices: its base spec stays
    assert (cdi_root / "k8s.gpu.nvidia.com-device_base.yaml").exists()
    assert state.entries()[UID_MPS].namespace == ""  # its claim spec is only an orphan, as before


def test_adopted_claim_on_a_changed_gpu_is_the_claims_error(node, kube):
    _, cdi_root, data = node
    state = DeviceState(
        driver_name=facts.DRIVER_NAME,
        pool_name=POOL,
        devices=[full_gpu(0, "GPU-replaced"), *DEVICES[1:]],
        cdi_root=cdi_root,
        plugin_data_dir=data,
        takeover=make_takeover(node, kube),
    )
    with pytest.raises(
        ClaimError,
        match=rf"^claim default/c: NVIDIA's plugin prepared it with device gpu-0 = {GPU0}, "
        r"which is now GPU-replaced$",
    ):
        state.prepare(ref(UID_FULL), claim(UID_FULL, result("gpu-0", pool=POOL)))


def test_failed_cleanup_keeps_the_claim_adopted_for_the_retry(node, kube):
    driver_root = node[0]
    driver_root.fail_on("--set-timeslice")
    state = make_state(node, kube)
    with pytest.raises(
        ClaimError, match=rf"^claim default/c: cannot reset GPU {GPU2} to the default compute mode"
    ):
        state.unprepare(ref(UID_TS))
    assert ledger(node)[UID_TS] is False
    driver_root.fail_on("")
    state.unprepare(ref(UID_TS))
    assert ledger(node)[UID_TS] is True


def test_mps_daemon_without_api_access_is_a_clear_error(node):
    state = make_state(node, api=None)
    with pytest.raises(
        ClaimError,
        match=rf"^claim default/c: cannot delete NVIDIA's MPS control daemon {NS}/{MPS_DAEMON}: "
        r"no API access$",
    ):
        state.unprepare(ref(UID_MPS))


def test_gpu_another_claim_holds_keeps_its_setting(node, kube):
    driver_root, _, _ = node
    tk = make_takeover(node, kube)
    tk.start()
    done = tk.release(UID_TS, devices={d.name: d for d in DEVICES}, in_use={"gpu-2"}, deadline=1e12)
    assert driver_root.calls() == [] and not any("reset" in line for line in done)


def test_started_claims_mps_daemons_are_found_by_directory(node, kube, fake_api):
    _, _, data = node
    ident = f"{UID_STARTED}-abcde"
    (data / "mps" / ident / "shm").mkdir(parents=True)
    fake_api.deployments[(NS, f"mps-control-daemon-{ident}")] = {"metadata": {"name": "x"}}
    tk = make_takeover(node, kube)
    tk.start()
    found = cleanup.leftovers(
        adoption.read_ledger(data / LEDGER_FILE)[UID_STARTED].claim,
        tools=tk.tools,
        devices={d.name: d for d in DEVICES},
        in_use=set(),
    )
    assert found.mps_daemon_ids == (ident,)
    assert found.reset_gpus == (GPU4,)
    tk.release(UID_STARTED, devices={d.name: d for d in DEVICES}, in_use=set(), deadline=1e12)
    assert (NS, f"mps-control-daemon-{ident}") not in fake_api.deployments
    assert not (data / "mps" / ident).exists()


def test_read_only_and_missing_file(tmp_path):
    assert nvidia_checkpoint.read(tmp_path / "checkpoint.json") is None
    tk = Takeover(Tools(cdi_root=tmp_path, plugin_data_dir=tmp_path))
    assert tk.start() == [] and not (tmp_path / LEDGER_FILE).exists()


def test_plugin_builds_the_takeover_from_its_flags(tmp_path):
    from vke_gpu_dra.config import parse_config
    from vke_gpu_dra.plugin import Plugin

    base = [
        "--node-name",
        "n",
        "--plugin-data-dir",
        str(tmp_path / "data"),
        "--cdi-root",
        str(tmp_path / "cdi"),
    ]
    tools = Plugin(parse_config(base, {}))._new_takeover().tools
    assert tools.namespace == "nvidia-dra-driver-gpu"  # the VKE procedure's `helm install --namespace`
    assert (tools.plugin_data_dir, tools.cdi_root) == (tmp_path / "data", tmp_path / "cdi")
    assert tools.smi is not None and tools.mounter is not None
    tools = Plugin(parse_config(base, {"NVIDIA_NAMESPACE": "gpu-operator"}))._new_takeover().tools
    assert tools.namespace == "gpu-operator"


class _NodeDevices:
    """A device source with the GPUs of the fixture's node."""

    def discover(self):
        from vke_gpu_dra_core.discovery import DiscoveryResult

        return DiscoveryResult(list(DEVICES))


def test_wired_plugin_takes_the_node_over_through_kubelets_calls(short_tmp, fake_api, monkeypatch):
    from vke_gpu_dra.plugin import Plugin
    from vke_gpu_dra_testing.kubelet_client import Kubelet
    from vke_gpu_dra_testing.plugin_env import NODE, plugin_config
    from vke_gpu_dra_testing.plugin_env import claim as api_claim

    fake_api.add_node(NODE)
    data, cdi_root = short_tmp / "plugins" / facts.DRIVER_NAME, short_tmp / "cdi"
    driver_root = FakeDriverRoot(short_tmp / "driver-root")
    data.mkdir(parents=True)
    cdi_root.mkdir()
    shutil.copy(V2, data / "checkpoint.json")
    nvidia_bytes = (data / "checkpoint.json").read_bytes()
    (cdi_root / "k8s.gpu.nvidia.com-device_base.yaml").write_text("cdiVersion: 0.5.0\n")
    (cdi_root / f"k8s.gpu.nvidia.com-claim_{UID_MPS}.yaml").write_text("cdiVersion: 0.5.0\n")
    (data / "mps" / MPS_ID / "pipe").mkdir(parents=True)
    fake_api.deployments[(NS, MPS_DAEMON)] = {"metadata": {"name": MPS_DAEMON, "namespace": NS}}
    plugin = Plugin(plugin_config(short_tmp), source=_NodeDevices(), stop_grace=5)
    build = plugin._new_takeover

    def with_stub_smi():
        takeover = build()
        takeover.tools.smi = NvidiaSmi(driver_root.root)  # the stub nvidia-smi records the calls
        return takeover

    monkeypatch.setattr(plugin, "_new_takeover", with_stub_smi)
    plugin.start()
    kubelet = Kubelet(plugin.registration_socket)
    try:
        kubelet.register()
        fake_api.add_claim(api_claim("full", UID_FULL, "gpu-0"))
        got = kubelet.prepare([("default", "full", UID_FULL)])[UID_FULL]
        assert got["error"] == ""
        assert [(d["device_name"], d["cdi_device_ids"]) for d in got["devices"]] == [
            ("gpu-0", [claim_id(UID_FULL, "gpu-0")])
        ]
        refs = [
            ("default", f"c{i}", uid)
            for i, uid in enumerate([UID_FULL, UID_MIG, UID_TS, UID_MPS, UID_STARTED])
        ]
        assert kubelet.unprepare(refs) == {uid: "" for _, _, uid in refs}
    finally:
        kubelet.close()
        plugin.stop()
    assert sorted(driver_root.calls()) == sorted(
        [
            f"-i {GPU2} -c DEFAULT",
            f"compute-policy -i {GPU2} --set-timeslice 0",
            f"-i {GPU3} -c DEFAULT",
            f"compute-policy -i {GPU3} --set-timeslice 0",
        ]
    )
    assert fake_api.deployments == {}
    assert [p.name for p in cdi_root.iterdir()] == [cdi.BASE_SPEC_NAME] and not (
        data / "mps" / MPS_ID
    ).exists()
    assert (data / "checkpoint.json").read_bytes() == nvidia_bytes


def test_released_claims_stay_released_and_go_once_nvidias_file_drops_them(node, kube):
    data = node[2]
    tk = make_takeover(node, kube)
    tk.start()
    tk.release(UID_FULL, devices={d.name: d for d in DEVICES}, in_use=set(), deadline=1e12)
    assert tk.start() == [] and ledger(node)[UID_FULL] is True  # NVIDIA's file still lists it
    shutil.copy(V1, data / "checkpoint.json")  # e.g. NVIDIA ran again and its claim 5 ended
    tk.start()
    assert UID_FULL in ledger(node) and UID_STARTED in ledger(node)  # released but listed; not released
    shutil.copy(EMPTY, data / "checkpoint.json")
    tk.start()
    assert UID_FULL not in ledger(node)
    assert set(ledger(node)) == {UID_MIG, UID_TS, UID_MPS, UID_STARTED}


def test_claim_names_nvidia_records_from_25_12_and_kubelets_prepare_are_kept(node, kube):
    # 25.8.1 (both forms) records no namespace/name; 25.12's V2 form has `namespace` and `name`
    assert {(c.namespace, c.name) for c in parse(V2.read_bytes()).claims.values()} == {("", "")}
    named = _signed_v2({"u1": {"checkpointState": "PrepareCompleted", "namespace": "team", "name": "train"}})
    assert (parse(named).claims["u1"].namespace, parse(named).claims["u1"].name) == ("team", "train")
    # kubelet's prepare of an adopted claim names it in the ledger, which keeps the name
    state = make_state(node, kube)
    state.prepare(ClaimRef("team", "ts", UID_TS), claim(UID_TS, result("gpu-2", "ts", pool=POOL)))
    kept = make_takeover(node).unreleased()[UID_TS]
    assert (kept.namespace, kept.name) == ("team", "ts")
    assert "name" not in json.loads((node[2] / LEDGER_FILE).read_text())["claims"][0]  # UID_FULL: unnamed
