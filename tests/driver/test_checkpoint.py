import json
import os
import re

import pytest
from vke_gpu_dra import checkpoint as cp
from vke_gpu_dra import journal
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
    assert sorted(p.name for p in tmp_path.iterdir()) == [cp.JOURNAL_FILE, store.path.name]  # no temp files


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


# ------------------------------------------------------------------------------------ the journal


def entry(uid, state=ClaimState.PREPARE_COMPLETED):
    return ClaimEntry(uid, "ns", uid, state, (DEV,))


def syncs(monkeypatch):
    """Count os.fsync and os.fdatasync calls from here on."""
    counted = {"fsync": 0, "fdatasync": 0}
    for name in counted:
        real = getattr(os, name)

        def count(fd, name=name, real=real):
            counted[name] += 1
            return real(fd)

        monkeypatch.setattr(os, name, count)
    return counted


def test_a_change_is_one_journal_record_and_one_fdatasync_and_the_file_is_left_alone(tmp_path, monkeypatch):
    store = CheckpointStore(tmp_path)
    store.save({"u1": entry("u1")})  # the first write: the file and an empty journal
    inode = store.path.stat().st_ino
    counted = syncs(monkeypatch)
    store.save({"u1": entry("u1"), "u2": entry("u2")})
    store.save({"u2": entry("u2")})
    assert counted == {"fsync": 0, "fdatasync": 2}
    assert store.path.stat().st_ino == inode and set(cp.decode(store.path.read_bytes())) == {"u1"}
    assert CheckpointStore(tmp_path).load() == cp.LoadResult({"u2": entry("u2")})  # another reader
    store.save({"u2": entry("u2")})  # nothing changed: nothing written
    assert counted["fdatasync"] == 2
    assert (tmp_path / cp.JOURNAL_FILE).stat().st_size == journal.SIZE


def test_fold_writes_every_claim_into_the_file_a_release_without_the_journal_reads(tmp_path):
    store = CheckpointStore(tmp_path)
    for n in range(1, 4):
        store.save({f"u{i}": entry(f"u{i}") for i in range(n)})
    assert store.fold() is True
    assert set(cp.decode(store.path.read_bytes())) == {"u0", "u1", "u2"}  # the file alone
    assert store.fold() is False  # nothing left to fold
    assert CheckpointStore(tmp_path).load().entries == {f"u{i}": entry(f"u{i}") for i in range(3)}


def test_a_torn_last_record_and_records_of_an_earlier_epoch_are_not_applied(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save({"u1": entry("u1")})
    store.save({"u1": entry("u1"), "u2": entry("u2")})
    path = tmp_path / cp.JOURNAL_FILE
    data = bytearray(path.read_bytes())
    end = journal.HEADER.size + journal.RECORD.size + journal.RECORD.unpack_from(data, journal.HEADER.size)[0]
    with path.open("r+b") as file:  # a record torn by a power loss: its head and half its payload
        record = journal.RECORD.pack(40, 0, 1) + b'{"set":[],"del":["u1"]}'[:20]
        file.seek(end)
        file.write(record)
    assert CheckpointStore(tmp_path).load() == cp.LoadResult({"u1": entry("u1"), "u2": entry("u2")})
    store.compact({"u3": entry("u3")})  # a new epoch: the records before it never apply again
    assert CheckpointStore(tmp_path).load() == cp.LoadResult({"u3": entry("u3")})


def test_records_the_file_already_has_change_nothing_when_applied_again(tmp_path):
    """A crash between the rewrite of the file and the reset of the journal."""
    store = CheckpointStore(tmp_path)
    store.save({"u1": entry("u1")})
    store.save({"u1": entry("u1"), "u2": entry("u2", ClaimState.PREPARE_STARTED)})
    store.save({"u2": entry("u2")})
    cp.atomic_write(store.path, cp.encode({"u2": entry("u2")}))  # the rewrite, not the reset
    assert CheckpointStore(tmp_path).load() == cp.LoadResult({"u2": entry("u2")})


def test_records_apply_to_a_file_another_release_rewrote(tmp_path):
    """A release without the journal (the other pod of an upgrade) rewrote the file: the claims this one
    recorded since are still there, and those the other changed are as it left them."""
    ours = CheckpointStore(tmp_path)
    ours.save({"u1": entry("u1")})
    ours.save({"u1": entry("u1"), "u2": entry("u2")})
    previous = CheckpointStore(tmp_path, journal=False)
    assert set(cp.decode(ours.path.read_bytes())) == {"u1"}  # what the other release reads
    previous.save({"u3": entry("u3")})  # it unprepared u1 and prepared u3
    assert ours.load().entries == {"u2": entry("u2"), "u3": entry("u3")}


def test_another_process_appending_or_folding_is_read_again(tmp_path):
    ours, other = CheckpointStore(tmp_path), CheckpointStore(tmp_path)
    ours.save({"u1": entry("u1")})
    assert other.load().entries == {"u1": entry("u1")}
    other.save({"u1": entry("u1"), "u2": entry("u2")})  # appended in the same clock tick, same size
    assert ours.load().entries == {"u1": entry("u1"), "u2": entry("u2")}
    ours.save({"u2": entry("u2")})
    other.fold()
    assert ours.load().entries == {"u2": entry("u2")} and other.load().entries == {"u2": entry("u2")}
    ours.save({})
    assert other.load().entries == {}


def test_a_full_journal_folds_into_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(journal, "MAX_RECORDS", 2)
    store = CheckpointStore(tmp_path)
    store.save({})
    for i in range(3):
        store.save({f"u{j}": entry(f"u{j}") for j in range(i + 1)})
    assert set(cp.decode(store.path.read_bytes())) == {"u0", "u1", "u2"}  # the third change rewrote it
    assert CheckpointStore(tmp_path).load().entries == {f"u{j}": entry(f"u{j}") for j in range(3)}


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda data: data[:8], r"is 8 bytes, a journal is 1048576"),
        (lambda data: b"X" * 8 + data[8:], r"has no journal header \(magic b'XXXXXXXX', format 1\)"),
        ("bad-record", r"record 1\.set\[0\] must have exactly the fields"),
    ],
    ids=["truncated", "not-a-journal", "bad-record"],
)
def test_an_unusable_journal_is_moved_aside_with_one_message(tmp_path, damage, message):
    store = CheckpointStore(tmp_path)
    store.save({"u1": entry("u1")})
    store.save({"u1": entry("u1"), "u2": entry("u2")})
    path = tmp_path / cp.JOURNAL_FILE
    if damage == "bad-record":  # a record that checks out but is not a change: a bug, not a torn write
        j = journal.Journal(path)
        j.read()
        assert j.append(b'{"set":[{"uid":"u3"}],"del":[]}')
    else:
        path.write_bytes(damage(path.read_bytes()))
    result = CheckpointStore(tmp_path).load()
    assert re.search(message, result.problem or ""), result.problem
    assert result.problem.startswith(f"checkpoint journal {path} is not usable (")
    assert result.problem.endswith("recovering prepared claims from the CDI specs on disk")
    assert not path.exists() and len(list(tmp_path.glob(f"{cp.JOURNAL_FILE}.corrupt-*"))) == 1
    expected = {"u1": entry("u1"), "u2": entry("u2")} if damage == "bad-record" else {"u1": entry("u1")}
    assert result.entries == expected  # the file, and the records before the bad one


def test_a_failed_append_makes_the_next_write_rewrite_the_file(tmp_path, monkeypatch):
    store = CheckpointStore(tmp_path)
    store.save({})

    def full(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", full)
    with pytest.raises(OSError, match="Input/output error"):
        store.save({"u1": entry("u1")})
    monkeypatch.undo()
    store.save({"u2": entry("u2")})
    assert cp.decode(store.path.read_bytes()) == {"u2": entry("u2")}
    assert CheckpointStore(tmp_path).load().entries == {"u2": entry("u2")}


def test_after_a_reset_bytes_of_the_earlier_epoch_are_never_read_as_a_record(tmp_path, monkeypatch):
    """A load checks for a record after the last one it knows with one small read, even where that offset
    falls inside a record of the earlier epoch (whose bytes would read as any length)."""
    store = CheckpointStore(tmp_path)
    store.save({})
    for i in range(40):  # records of varied lengths
        store.save({f"u{j}": entry(f"u{j}" * (1 + i % 7)) for j in range(i % 5 + 1)})
    store.compact({})
    store.save({"x": entry("x")})
    sizes: list[int] = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, offset: sizes.append(n) or real(fd, n, offset))
    for _ in range(3):
        assert store.load().entries == {"x": entry("x")}
    assert sizes and max(sizes) <= journal.RECORD.size + journal.TAIL_READ
