import json
import os
import re
from pathlib import Path

import pytest
from vke_gpu_dra.claims import checkpoint as cp
from vke_gpu_dra.claims import journal
from vke_gpu_dra.claims.checkpoint import CheckpointError, CheckpointStore, ClaimEntry, ClaimState
from vke_gpu_dra.partitions.records import MigDevices
from vke_gpu_dra.sharing.records import MpsRecord, SharingRecord
from vke_gpu_dra.state import RECORD_TYPES, checkpoint_store
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import PreparedDevice
from vke_gpu_dra_testing.plugin_env import CORRUPTIONS

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
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [cp.BACKUP_FILE, cp.JOURNAL_FILE, store.path.name]  # the copy; no temp files
    assert (tmp_path / cp.BACKUP_FILE).read_bytes() == store.path.read_bytes()


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


RECOVERY = "recovered from the CDI specs on disk, and from kubelet and the API server"


def written(tmp_path, where):
    """Claims a and b, `where` they live: only in the file (folded), only in the journal, or one in each."""
    store = CheckpointStore(tmp_path)
    if where == "journal":
        store.save({})
    store.save({"u1": entry("u1")})
    if where == "both":
        store.fold()
    store.save({"u1": entry("u1"), "u2": entry("u2")})
    if where == "file":
        store.fold()
    store.close()
    return {"u1": entry("u1"), "u2": entry("u2")}


@pytest.mark.parametrize("where", ["file", "journal", "both"])
@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupt_file_is_moved_aside_and_its_copy_keeps_every_claim(tmp_path, corruption, where):
    expected = written(tmp_path, where)
    path = tmp_path / cp.CHECKPOINT_FILE
    path.write_bytes(CORRUPTIONS[corruption](path.read_bytes()))
    result = CheckpointStore(tmp_path).load()
    assert result.entries == expected and result.lost is None
    assert result.moved_to is not None and result.moved_to.name.startswith(f"{cp.CHECKPOINT_FILE}.corrupt-")
    assert result.problem.startswith(f"checkpoint {path} is corrupt (")
    assert result.problem.endswith(f"read its copy {cp.BACKUP_FILE}: no claim is lost")


@pytest.mark.parametrize("where", ["file", "journal", "both"])
@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_with_the_file_and_its_copy_corrupt_the_journal_is_applied_and_the_loss_is_said(
    tmp_path, corruption, where
):
    expected = written(tmp_path, where)
    for name in (cp.CHECKPOINT_FILE, cp.BACKUP_FILE):
        (tmp_path / name).write_bytes(CORRUPTIONS[corruption]((tmp_path / name).read_bytes()))
    result = CheckpointStore(tmp_path).load()
    in_journal = {"file": {}, "journal": expected, "both": {"u2": expected["u2"]}}[where]
    assert result.entries == in_journal
    assert result.lost == f"checkpoint {tmp_path / cp.CHECKPOINT_FILE} and its copy unusable"
    assert f"its copy {cp.BACKUP_FILE} is corrupt too (" in result.problem
    assert result.problem.endswith(RECOVERY)


def test_a_file_gone_with_its_copy_there_is_read_from_the_copy(tmp_path):
    """A crash between the copy and the file of the very first write (or the file deleted by hand)."""
    expected = written(tmp_path, "both")
    (tmp_path / cp.CHECKPOINT_FILE).unlink()
    result = CheckpointStore(tmp_path).load()
    assert result.entries == expected and result.lost is None and result.moved_to is None
    missing = f"checkpoint {tmp_path / cp.CHECKPOINT_FILE} is missing"
    assert result.problem == f"{missing}; read its copy {cp.BACKUP_FILE}: no claim is lost"


def test_the_file_and_its_copy_gone_while_the_journal_is_there_is_a_loss(tmp_path):
    written(tmp_path, "both")
    for name in (cp.CHECKPOINT_FILE, cp.BACKUP_FILE):
        (tmp_path / name).unlink()
    result = CheckpointStore(tmp_path).load()
    assert result.entries == {"u2": entry("u2")}  # the journal's record
    assert result.lost == f"checkpoint {tmp_path / cp.CHECKPOINT_FILE} and its copy unusable"
    assert "is missing while its journal is there; its copy" in result.problem


def test_a_second_corrupt_file_in_the_same_second_does_not_overwrite_the_first(tmp_path):
    store = CheckpointStore(tmp_path)
    store.path.write_bytes(b"garbage")
    first = store.load()
    store.path.write_bytes(b"garbage")
    second = store.load()
    assert first.moved_to != second.moved_to and first.moved_to.exists() and second.moved_to.exists()
    assert second.lost is not None  # no copy either time


def test_fold_writes_the_copy_again_when_another_release_rewrote_the_file(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save({"u1": entry("u1")})
    store.fold()
    assert store.fold() is False  # file, copy and journal agree: nothing to do
    store.path.write_bytes(cp.encode({"u2": entry("u2")}))  # a release without the copy wrote the file
    assert CheckpointStore(tmp_path).fold() is True
    assert (tmp_path / cp.BACKUP_FILE).read_bytes() == store.path.read_bytes()


def test_the_loss_is_kept_on_disk_until_cleared(tmp_path):
    store = CheckpointStore(tmp_path)
    assert store.load_lost() is None
    why = "checkpoint journal damaged (record(s) 1 damaged, skipped)"
    store.save_lost(why)
    assert CheckpointStore(tmp_path).load_lost() == why
    assert oct((tmp_path / cp.LOST_FILE).stat().st_mode & 0o777) == "0o600"
    store.clear_lost()
    assert store.load_lost() is None and not (tmp_path / cp.LOST_FILE).exists()
    store.clear_lost()  # twice: nothing to remove


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
    monkeypatch.setattr(cp, "decode", lambda data, types: decoded.append(1) or real_decode(data, types))
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


def record_offsets(data):
    """Where each record of the journal's current epoch starts."""
    offsets, offset = [], journal.HEADER.size
    while True:
        length, _, seq = journal.RECORD.unpack_from(data, offset)
        if length == 0 or seq != len(offsets):
            return offsets
        offsets.append(offset)
        offset += journal.RECORD.size + length


def cut_in_record_1(data):
    return data[: record_offsets(data)[1] + journal.RECORD.size + 3]


def flip_in_record_1(data):
    at = record_offsets(data)[1] + journal.RECORD.size + 5
    return data[:at] + bytes([data[at] ^ 0x20]) + data[at + 1 :]


@pytest.mark.parametrize(
    ("damage", "message", "kept"),
    [
        (cut_in_record_1, r"truncated to \d+ bytes of 1048576", ["u1"]),
        (lambda data: b"", r"is 0 bytes, a journal is 1048576", []),
        (lambda data: b"X" * 8 + data[8:], r"has no journal header \(magic b'XXXXXXXX', format 1\)", []),
        (flip_in_record_1, r"record\(s\) 1 damaged, skipped", ["u1", "u3"]),
        ("bad-record", r"record 3\.set\[0\] must have exactly the fields", ["u1", "u2", "u3"]),
    ],
    ids=["truncated", "empty", "not-a-journal", "damaged-record", "bad-record"],
)
def test_a_damaged_journal_gives_what_checks_out_is_moved_aside_and_says_claims_may_be_lost(
    tmp_path, damage, message, kept
):
    store = CheckpointStore(tmp_path)
    store.save({})
    for n in range(1, 4):  # record i sets claim u{i+1}
        store.save({f"u{i}": entry(f"u{i}") for i in range(1, n + 1)})
    path = tmp_path / cp.JOURNAL_FILE
    if damage == "bad-record":  # a record that checks out but is not a change: a bug, not a torn write
        j = journal.Journal(path)
        j.read()
        assert j.append(b'{"set":[{"uid":"u4"}],"del":[]}')
    else:
        path.write_bytes(damage(path.read_bytes()))
    result = CheckpointStore(tmp_path).load()
    assert re.search(message, result.problem or ""), result.problem
    assert result.problem.startswith(f"checkpoint journal {path} is not usable (")
    assert result.problem.endswith(RECOVERY)
    assert result.lost is not None and result.lost.startswith("checkpoint journal damaged (")
    assert not path.exists() and len(list(tmp_path.glob(f"{cp.JOURNAL_FILE}.corrupt-*"))) == 1
    assert sorted(result.entries) == kept  # the records that check out, a damaged one skipped


def test_a_torn_last_record_is_no_damage(tmp_path):
    """A power loss tears the last record only (its call never answered): no loss is said."""
    store = CheckpointStore(tmp_path)
    store.save({})
    store.save({"u1": entry("u1")})
    store.save({"u1": entry("u1"), "u2": entry("u2")})
    path = tmp_path / cp.JOURNAL_FILE
    data = path.read_bytes()
    last = record_offsets(data)[-1]
    torn = last + journal.RECORD.size + 2
    path.write_bytes(data[:torn] + bytes(len(data) - torn))
    result = CheckpointStore(tmp_path).load()
    assert result == cp.LoadResult({"u1": entry("u1")})


def test_a_failed_append_makes_the_next_write_rewrite_the_file(tmp_path, monkeypatch):
    store = CheckpointStore(tmp_path)
    store.save({})

    def full(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", full)
    with pytest.raises(OSError, match=rf"Input/output error: '{tmp_path / cp.JOURNAL_FILE}'"):
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


#: A checkpoint the release before records by step name wrote (its own encoder, unchanged bytes): claims
#: with MPS, time-slicing, created and placed MIG devices, and none of them.
PREVIOUS_RELEASE = Path(__file__).parent.parent / "fixtures" / "checkpoint-v1-before-step-records.json"


def test_a_checkpoint_of_the_previous_release_reads_into_step_records_and_writes_back_the_same_bytes(
    tmp_path: Path,
) -> None:
    written = PREVIOUS_RELEASE.read_bytes()
    (tmp_path / cp.CHECKPOINT_FILE).write_bytes(written)
    result = checkpoint_store(tmp_path).load()
    assert result.problem is None and result.lost is None
    entries = result.entries
    assert SharingRecord.of(entries["uid-mps"]).mps == (MpsRecord("mps-abc", ("gpu-0",)),)
    assert SharingRecord.of(entries["uid-ts"]).timeslice == {"gpu-1": 3}
    assert MigDevices.of(entries["uid-mig"]).uuids() == {"gpu-2-mig-1g10gb-19-0": "MIG-2-7"}
    assert [r.device for r in MigDevices.of(entries["uid-started"])] == ["gpu-3-mig-1g10gb-19-1"]
    assert dict(entries["uid-plain"].records) == {}
    assert {uid: set(e.records) for uid, e in entries.items() if e.records} == {
        "uid-mps": {"sharing"},
        "uid-ts": {"sharing"},
        "uid-mig": {"partitions"},
        "uid-started": {"partitions"},
    }
    # The guard sees what each record holds, as it did.
    assert entries["uid-started"].held_devices() == {"gpu-3-mig-1g10gb-19-1"}
    # Written back unchanged: the previous release, rolled back to, reads this release's file.
    assert cp.encode(entries) == written
    checkpoint_store(tmp_path).save(entries)
    assert cp.decode((tmp_path / cp.CHECKPOINT_FILE).read_bytes(), RECORD_TYPES) == entries


def test_a_record_no_step_keeps_is_one_error_naming_the_field_and_the_steps(tmp_path: Path) -> None:
    document = json.loads(PREVIOUS_RELEASE.read_bytes())
    document["claims"][0]["quotas"] = {"x": 1}
    payload = {"version": document["version"], "claims": document["claims"]}
    document["checksum"] = cp._checksum(payload)
    with pytest.raises(
        CheckpointError, match=r"claims\[0\] must have exactly the fields .*\(partitions, sharing\).*quotas"
    ):
        cp.decode(json.dumps(document).encode(), RECORD_TYPES)
    # A store given no step's records (the engine alone) reads no record at all.
    with pytest.raises(CheckpointError, match=r"records of this plugin's steps \(none\)"):
        cp.decode(PREVIOUS_RELEASE.read_bytes())


def test_empty_records_are_left_out_of_the_entry() -> None:
    entry = ClaimEntry(
        "u",
        "ns",
        "c",
        ClaimState.PREPARE_STARTED,
        records={"sharing": SharingRecord(), "partitions": MigDevices()},
    )
    assert dict(entry.records) == {} and entry == ClaimEntry("u", "ns", "c", ClaimState.PREPARE_STARTED)
    assert set(entry.to_json()) == {"uid", "namespace", "name", "state", "devices"}
