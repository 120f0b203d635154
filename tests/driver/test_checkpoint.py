import json

import pytest
from vke_gpu_dra import checkpoint as cp
from vke_gpu_dra.checkpoint import CheckpointError, CheckpointStore, ClaimEntry, ClaimState
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import PreparedDevice

DEV = PreparedDevice(("gpu",), "node-a", "gpu-0", (f"{facts.CDI_VENDOR}/{facts.CDI_CLASS_CLAIM}=u1-gpu-0",))
ENTRIES = {
    "u1": ClaimEntry("u1", "ns", "a", ClaimState.PREPARE_COMPLETED, (DEV,)),
    "u2": ClaimEntry("u2", "ns", "b", ClaimState.PREPARE_STARTED),
}


def test_file_name_is_our_own(tmp_path):
    store = CheckpointStore(tmp_path)
    assert store.path == tmp_path / "vke-gpu-dra-checkpoint.json"
    assert store.path.name != "checkpoint.json"


def test_round_trip(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save(ENTRIES)
    assert store.load() == cp.LoadResult(ENTRIES)
    assert oct(store.path.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in tmp_path.iterdir()] == [store.path.name]  # no temp files left


def test_missing_file_is_empty(tmp_path):
    assert CheckpointStore(tmp_path).load() == cp.LoadResult({})


def test_document_shape(tmp_path):
    doc = json.loads(cp.encode(ENTRIES))
    assert doc["format"] == "vke-gpu-dra-checkpoint" and doc["version"] == 1
    assert doc["checksum"].startswith("sha256:") and len(doc["checksum"]) == 7 + 64
    assert doc["claims"][0] == {
        "uid": "u1",
        "namespace": "ns",
        "name": "a",
        "state": "PrepareCompleted",
        "devices": [
            {
                "requestNames": ["gpu"],
                "poolName": "node-a",
                "deviceName": "gpu-0",
                "cdiDeviceIDs": [f"{facts.CDI_VENDOR}/{facts.CDI_CLASS_CLAIM}=u1-gpu-0"],
            }
        ],
    }


def tamper(change):
    doc = json.loads(cp.encode(ENTRIES))
    change(doc)
    return json.dumps(doc).encode()


def resign(doc):
    doc["checksum"] = cp._checksum({"version": doc["version"], "claims": doc["claims"]})


def bad_state(doc):
    doc["claims"][0]["state"] = "Prepared"
    resign(doc)


def extra_field(doc):
    doc["claims"][0]["extra"] = 1
    resign(doc)


def bad_device(doc):
    doc["claims"][0]["devices"][0]["deviceName"] = 5
    resign(doc)


def duplicate(doc):
    doc["claims"][1] = doc["claims"][0]
    resign(doc)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[]", "top level must be an object"),
        (tamper(lambda d: d.update(format="other")), "format must be 'vke-gpu-dra-checkpoint'"),
        (tamper(lambda d: d.update(version=2)), "version must be 1"),
        (tamper(lambda d: d["claims"][0].update(name="changed")), "checksum mismatch"),
        (tamper(lambda d: d.pop("checksum")), "must have exactly the fields"),
        (tamper(bad_state), r"claims\[0\]\.state must be one of PrepareStarted, PrepareCompleted"),
        (tamper(extra_field), r"claims\[0\] must have exactly the fields"),
        (tamper(bad_device), r"claims\[0\]\.devices\[0\]: prepared device needs string"),
        (tamper(duplicate), r"claims\[1\]: duplicate uid u1"),
    ],
)
def test_decode_rejects_with_a_clear_message(data, message):
    with pytest.raises(CheckpointError, match=message):
        cp.decode(data)


def test_corrupt_file_is_moved_aside_with_one_message(tmp_path):
    store = CheckpointStore(tmp_path)
    store.path.write_bytes(tamper(lambda d: d["claims"][0].update(name="changed")))
    result = store.load()
    assert result.entries == {}
    assert result.moved_to is not None
    assert result.moved_to.name.startswith("vke-gpu-dra-checkpoint.json.corrupt-")
    assert result.moved_to.exists() and not store.path.exists()
    assert "checksum mismatch" in result.problem
    assert "recovering prepared claims from the CDI specs" in result.problem
    # a second corrupt file in the same second does not overwrite the first one
    store.path.write_bytes(b"garbage")
    second = store.load()
    assert second.moved_to != result.moved_to and second.moved_to.exists() and result.moved_to.exists()


def test_boot_id_is_kept_next_to_a_checkpoint_the_previous_release_still_reads(tmp_path):
    store = CheckpointStore(tmp_path)
    assert store.load_boot_id() is None  # a new node, or a checkpoint of an earlier release
    store.save(ENTRIES)
    store.save_boot_id("9f2c6a1e-0d4b-4b8e-b1a7-3c5d7e9f1a2b")
    assert store.boot_id_path == tmp_path / "vke-gpu-dra-checkpoint.boot-id"
    assert store.boot_id_path.read_text() == "9f2c6a1e-0d4b-4b8e-b1a7-3c5d7e9f1a2b\n"
    assert oct(store.boot_id_path.stat().st_mode & 0o777) == "0o600"
    assert store.load_boot_id() == "9f2c6a1e-0d4b-4b8e-b1a7-3c5d7e9f1a2b"
    # the checkpoint itself keeps version 1's exact shape, which the previous release's reader requires
    doc = json.loads(store.path.read_bytes())
    assert set(doc) == {"format", "version", "checksum", "claims"} and doc["version"] == 1
    assert cp.decode(store.path.read_bytes()) == ENTRIES


def test_read_boot_id_strips_the_line_and_names_the_file_when_it_cannot(tmp_path):
    path = tmp_path / "boot_id"
    path.write_text("6d1f0c8e-57a3-4c52-9d0e-2b7f4a1c3e5d\n")
    assert cp.read_boot_id(path) == "6d1f0c8e-57a3-4c52-9d0e-2b7f4a1c3e5d"
    with pytest.raises(cp.BootIdError, match=rf"cannot read the node's boot id from {tmp_path}/absent: "):
        cp.read_boot_id(tmp_path / "absent")
    path.write_text("\n")
    with pytest.raises(cp.BootIdError, match=rf"the node's boot id file {path} is empty"):
        cp.read_boot_id(path)


def test_a_file_unchanged_since_this_store_wrote_it_is_not_parsed_again_and_another_write_is(
    tmp_path, monkeypatch
):
    decoded = []
    real_decode = cp.decode
    monkeypatch.setattr(cp, "decode", lambda data: decoded.append(1) or real_decode(data))
    ours, other = CheckpointStore(tmp_path), CheckpointStore(tmp_path)  # two plugin processes
    entry = ClaimEntry("uid-1", "default", "c", ClaimState.PREPARE_COMPLETED)
    ours.save({"uid-1": entry})
    assert ours.load().entries == {"uid-1": entry} and decoded == []  # what it wrote, unchanged
    loaded = ours.load().entries
    loaded.pop("uid-1")  # a caller's copy: changing it changes nothing kept
    assert ours.load().entries == {"uid-1": entry}
    assert other.load().entries == {"uid-1": entry} and len(decoded) == 1  # the other reads the file
    other.save({})  # the other process's write: a new file
    assert ours.load().entries == {} and len(decoded) == 2
    (tmp_path / cp.CHECKPOINT_FILE).write_text("not json")  # changed in place: read (and moved aside)
    result = ours.load()
    assert result.entries == {} and result.problem is not None
