"""Checkpoint of prepared claims, in the plugin data directory under this driver's own file name.

Format (JSON, version 1):

    {"format": "vke-gpu-dra-checkpoint", "version": 1, "checksum": "sha256:<hex>",
     "claims": [{"uid", "namespace", "name", "state": "PrepareStarted"|"PrepareCompleted",
                 "devices": [PreparedDevice JSON, ...],
                 <step name>: <that step's record>, ...}, ...]}

A claim's entry keeps, besides its devices, the record of each step of the claim lifecycle that changed
something for it, under the step's name and only when not empty (`Record`): today "sharing" (time-slice
and MPS daemons: {"timeslice": {device: 0-3}, "mps": [{"daemonId", "devices"}]}) and "partitions" (the
dynamic MIG devices: [MigRecord JSON, ...]). The store reads the records of the steps it is given
(`CheckpointStore(records=...)`, from the steps' `record` types); a field that is no step's record makes
the entry invalid, as any unknown field does.

The checksum covers the canonical JSON (sorted keys, no spaces) of `{"claims": ..., "version": ...}`.
NVIDIA's `checkpoint.json` in the same directory is never written, so a rollback to NVIDIA's plugin
never meets a file it rejects.

The node's boot id (`/proc/sys/kernel/random/boot_id`) the entries were last restored for is kept
next to the checkpoint, in `vke-gpu-dra-checkpoint.boot-id` (the id and a newline), not inside it:
version 1's reader accepts no other top-level field and would move the whole file aside as corrupt,
so a rollback to the previous release reads the checkpoint unchanged and ignores the boot id file.
A missing file (a checkpoint of the previous release, or a new node) is read as "no boot id".

Changes are appended to the journal next to it (`journal`, `vke-gpu-dra-checkpoint.journal`): the
checkpoint is that file with the journal's records applied in order. The file is rewritten, and the
journal emptied, when the journal is full, at start and at a clean stop (`fold`), so a rollback to a
release without the journal reads every claim after a clean stop; after a kill, that release recovers
the claims with specs of their own from the CDI specs on disk, as it does for a corrupt checkpoint, and
the journal's records are applied again when this release is back (to whatever file is there: changes to
claims the other release did not know).

Every rewrite writes the same bytes to a second file first, `vke-gpu-dra-checkpoint.backup.json` (its
copy; `BACKUP_FILE`), then the file itself: a crash between the two leaves the copy one fold newer than
the file, and the journal's records apply to either. A checkpoint file that is corrupt (or gone while its
copy is there) is moved aside and its copy read instead, so a damaged file loses no claim. When neither
is usable, or the journal was damaged (`Journal.read`'s `damage`), claims may be missing: the load says
so (`LoadResult.lost`), and the store keeps that in `vke-gpu-dra-checkpoint.lost` (`LOST_FILE`) until the
claims prepared before are recovered (`DeviceState.recover_lost`), across restarts.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Protocol

from vke_gpu_dra_core.device_model import PreparedDevice

from ..bootid import DEFAULT_BOOT_ID_PATH, BootIdError, read_boot_id
from ..fsutil import atomic_write, fsync_dir, remove_durably
from .journal import Journal, JournalError

log = logging.getLogger(__name__)

__all__ = [
    "BACKUP_FILE",
    "BOOT_ID_FILE",
    "CHECKPOINT_FILE",
    "DEFAULT_BOOT_ID_PATH",
    "JOURNAL_FILE",
    "LOST_FILE",
    "BootIdError",
    "CheckpointError",
    "CheckpointStore",
    "ClaimEntry",
    "ClaimState",
    "HoldsRecords",
    "LoadResult",
    "Record",
    "RecordType",
    "read_boot_id",
]

CHECKPOINT_FILE: Final = "vke-gpu-dra-checkpoint.json"
#: The journal of changes since the checkpoint file was written, next to it.
JOURNAL_FILE: Final = "vke-gpu-dra-checkpoint.journal"
#: The boot id the checkpoint's entries were last restored for, next to the checkpoint.
BOOT_ID_FILE: Final = "vke-gpu-dra-checkpoint.boot-id"
#: The checkpoint's copy, written before the file at each rewrite; read when the file is unusable.
BACKUP_FILE: Final = "vke-gpu-dra-checkpoint.backup.json"
#: Why claims may be missing from the checkpoint, kept until they are recovered (absent: none are).
LOST_FILE: Final = "vke-gpu-dra-checkpoint.lost"
FORMAT: Final = "vke-gpu-dra-checkpoint"
VERSION: Final = 1


class ClaimState(enum.StrEnum):
    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"


class Record(Protocol):
    """What one step of the claim lifecycle changed for a claim, kept in the claim's entry under the step's
    name. An empty record (false) is not written."""

    def __bool__(self) -> bool: ...

    def to_json(self) -> Any: ...

    def held_devices(self) -> AbstractSet[str]:
        """The devices (by name) the record holds besides the entry's own: the held-devices guard keeps
        them from other claims until the entry goes."""
        ...


class HoldsRecords(Protocol):
    """A claim's entry (`ClaimEntry`) or a claim being prepared (`step.ClaimWork`): each step's record."""

    def record(self, step: str) -> Record | None: ...


class RecordType(Protocol):
    """A step's record type: reads its JSON (ValueError naming `where` and what is allowed)."""

    def from_json(self, data: Any, where: str) -> Record: ...


#: No step's records: an engine-only store (a file with a record in it is invalid).
NO_RECORDS: Final[Mapping[str, RecordType]] = MappingProxyType({})
#: The entry's own fields; every other field of its JSON is a step's record.
_BASE_FIELDS: Final = frozenset({"uid", "namespace", "name", "state", "devices"})


def _records(records: Mapping[str, Record]) -> Mapping[str, Record]:
    """The records worth keeping (not empty), by step name, in name order; read-only."""
    return MappingProxyType({name: records[name] for name in sorted(records) if records[name]})


@dataclass(frozen=True)
class ClaimEntry:
    uid: str
    namespace: str
    name: str
    state: ClaimState
    devices: tuple[PreparedDevice, ...] = ()
    #: Each step's record of what it changed for the claim, by step name (empty ones are left out, so
    #: files of claims no step changed anything for keep the original shape).
    records: Mapping[str, Record] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "records", _records(self.records))

    def record(self, step: str) -> Record | None:
        """The record step `step` keeps for the claim (None: it changed nothing)."""
        return self.records.get(step)

    def held_devices(self) -> set[str]:
        """The devices the entry holds: those it was prepared with and those its records hold (the
        settings a claim changed, the MIG placements a started prepare may have created)."""
        held = {d.device_name for d in self.devices}
        for record in self.records.values():
            held |= record.held_devices()
        return held

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "state": self.state.value,
            "devices": [d.to_json() for d in self.devices],
        }
        for step, record in self.records.items():
            data[step] = record.to_json()
        return data

    @classmethod
    def from_json(cls, data: Any, where: str, types: Mapping[str, RecordType] = NO_RECORDS) -> ClaimEntry:
        """Read an entry whose records are those of `types` (step name -> record type)."""
        if not isinstance(data, Mapping):
            raise CheckpointError(f"{where} must be an object, got {type(data).__name__}")
        unknown = sorted(set(data) - _BASE_FIELDS - set(types))
        if unknown or not set(data) >= _BASE_FIELDS:
            raise CheckpointError(
                f"{where} must have exactly the fields {sorted(_BASE_FIELDS)} and the records of this "
                f"plugin's steps ({', '.join(sorted(types)) or 'none'}), has {sorted(data)}"
            )
        for key in ("uid", "namespace", "name"):
            if not isinstance(data[key], str):
                raise CheckpointError(f"{where}.{key} must be a string, got {data[key]!r}")
        if not data["uid"]:
            raise CheckpointError(f"{where}.uid must not be empty")
        try:
            state = ClaimState(data["state"])
        except ValueError:
            allowed = ", ".join(s.value for s in ClaimState)
            raise CheckpointError(f"{where}.state must be one of {allowed}, got {data['state']!r}") from None
        if not isinstance(data["devices"], list):
            raise CheckpointError(f"{where}.devices must be a list, got {type(data['devices']).__name__}")
        devices = []
        for i, raw in enumerate(data["devices"]):
            if not isinstance(raw, Mapping):
                raise CheckpointError(f"{where}.devices[{i}] must be an object, got {raw!r}")
            try:
                devices.append(PreparedDevice.from_json(raw))
            except ValueError as exc:
                raise CheckpointError(f"{where}.devices[{i}]: {exc}") from None
        records: dict[str, Record] = {}
        for step in sorted(set(data) - _BASE_FIELDS):
            try:
                records[step] = types[step].from_json(data[step], f"{where}.{step}")
            except ValueError as exc:
                raise CheckpointError(str(exc)) from None
        return cls(data["uid"], data["namespace"], data["name"], state, tuple(devices), records)


class CheckpointError(ValueError):
    """The checkpoint file is not a valid checkpoint (bad JSON, checksum or shape)."""


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _exact_fields(obj: Mapping[str, Any], expected: set[str], where: str) -> None:
    if set(obj) != expected:
        raise CheckpointError(f"{where} must have exactly the fields {sorted(expected)}, has {sorted(obj)}")


def _json_object(data: bytes, where: str) -> dict[str, Any]:
    """`data` parsed as one JSON object; CheckpointError naming `where` otherwise."""
    try:
        parsed = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise CheckpointError(f"{where} must be an object, got {type(parsed).__name__}")
    return parsed


def _canonical(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _checksum(payload: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(_canonical(payload)).hexdigest()


def encode(entries: Mapping[str, ClaimEntry]) -> bytes:
    payload = {"version": VERSION, "claims": [entries[uid].to_json() for uid in sorted(entries)]}
    document = {"format": FORMAT, **payload, "checksum": _checksum(payload)}
    # Compact: json's C encoder (an indented document takes the pure-Python one, several times slower).
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def decode(data: bytes, types: Mapping[str, RecordType] = NO_RECORDS) -> dict[str, ClaimEntry]:
    """Parse a checkpoint whose entries keep the records of `types`; raises CheckpointError naming what
    is wrong."""
    document = _json_object(data, "top level")
    if document.get("format") != FORMAT:
        raise CheckpointError(f"format must be {FORMAT!r}, got {document.get('format')!r}")
    if document.get("version") != VERSION:
        raise CheckpointError(f"version must be {VERSION}, got {document.get('version')!r}")
    _exact_fields(document, {"format", "version", "checksum", "claims"}, "top level")
    payload = {"version": document["version"], "claims": document["claims"]}
    if document["checksum"] != _checksum(payload):
        raise CheckpointError(f"checksum mismatch (stored {document['checksum']!r})")
    claims = document["claims"]
    if not isinstance(claims, list):
        raise CheckpointError(f"claims must be a list, got {type(claims).__name__}")
    entries: dict[str, ClaimEntry] = {}
    for i, raw in enumerate(claims):
        entry = ClaimEntry.from_json(raw, f"claims[{i}]", types)
        if entry.uid in entries:
            raise CheckpointError(f"claims[{i}]: duplicate uid {entry.uid}")
        entries[entry.uid] = entry
    return entries


def encode_changes(before: Mapping[str, ClaimEntry], after: Mapping[str, ClaimEntry]) -> bytes | None:
    """One journal record taking `before` to `after`: the entries set (whole) and the uids removed; None
    when they are the same."""
    changed = [e.to_json() for uid, e in after.items() if (old := before.get(uid)) is not e and old != e]
    removed = [uid for uid in before if uid not in after]
    if not changed and not removed:
        return None
    return json.dumps({"set": changed, "del": removed}, separators=(",", ":")).encode()


def apply_changes(
    entries: dict[str, ClaimEntry], payload: bytes, where: str, types: Mapping[str, RecordType] = NO_RECORDS
) -> None:
    """Apply one journal record to `entries`; CheckpointError naming what is wrong (nothing applied)."""
    change = _json_object(payload, where)
    _exact_fields(change, {"set", "del"}, where)
    removed, changed = change["del"], change["set"]
    if not isinstance(removed, list) or not all(isinstance(uid, str) for uid in removed):
        raise CheckpointError(f"{where}.del must be a list of claim uids, got {removed!r}")
    if not isinstance(changed, list):
        raise CheckpointError(f"{where}.set must be a list, got {type(changed).__name__}")
    parsed = [ClaimEntry.from_json(raw, f"{where}.set[{i}]", types) for i, raw in enumerate(changed)]
    for uid in removed:
        entries.pop(uid, None)
    for entry in parsed:
        entries[entry.uid] = entry


@dataclass(frozen=True)
class LoadResult:
    entries: dict[str, ClaimEntry]
    #: One clear message when the file was unusable (it was moved to `moved_to`); None otherwise.
    problem: str | None = None
    moved_to: Path | None = None
    #: Why prepared claims may be missing from `entries` (neither the file nor its copy was usable, or
    #: the journal was damaged); None when none can be.
    lost: str | None = None


@dataclass(frozen=True)
class _Known:
    """The checkpoint as this store last read or wrote it: the file's identity (`_identity`; None: no
    file) and the entries with the journal applied."""

    identity: tuple[int, int, int, int] | None
    entries: dict[str, ClaimEntry]


class CheckpointStore:
    """Reads the checkpoint; writes changes to its journal, and rewrites the file atomically when the
    journal has no room (`journal=False`: every write rewrites the file, the layout before the journal)."""

    def __init__(
        self,
        directory: Path,
        file_name: str = CHECKPOINT_FILE,
        *,
        journal: bool = True,
        records: Mapping[str, RecordType] = NO_RECORDS,
    ) -> None:
        """`records`: the record type of each step that keeps one, by step name (`step.record_types`)."""
        self.path = directory / file_name
        self.records = MappingProxyType(dict(records))
        self._path = str(self.path)
        self.boot_id_path = directory / BOOT_ID_FILE
        self.backup_path = directory / BACKUP_FILE
        self.lost_path = directory / LOST_FILE
        self.journal_path = directory / JOURNAL_FILE
        self._journal = Journal(self.journal_path) if journal else None
        #: The last rewrite could not make the journal (said once while it lasts).
        self._no_journal = False
        #: What this store last read or wrote. Every rewrite of the file is a new inode and every change of
        #: the journal a new record or epoch, so another process's write is always read again.
        self._known: _Known | None = None

    def load(self) -> LoadResult:
        """The stored entries; a corrupt file is moved aside to `<name>.corrupt-<timestamp>`, as is a journal
        that is not one or has a record that does not parse (the records before it are applied). A
        checkpoint this store read or wrote last, unchanged since, is not parsed again."""
        known = self._known
        if known is not None:  # the usual case, in one stat: nothing changed since this store's last look
            try:
                now: tuple[int, int, int, int] | None = _identity(os.stat(self._path))
            except FileNotFoundError:
                now = None
            if self._is_known(known, now):
                return LoadResult(dict(known.entries))
        try:
            with self.path.open("rb") as file:
                identity: tuple[int, int, int, int] | None = _identity(os.fstat(file.fileno()))
                if self._is_known(known, identity):
                    assert known is not None
                    return LoadResult(dict(known.entries))
                data: bytes | None = file.read()
        except FileNotFoundError:
            identity, data = None, None
            if self._is_known(known, None):
                assert known is not None
                return LoadResult(dict(known.entries))
        self._known = None
        entries, problems, lost, moved = self._entries_of_file(data)
        if moved is not None:
            identity = None
        journal_problem, journal_lost = self._apply_journal(entries)
        if journal_problem is not None:
            problems.append(journal_problem)
        if journal_lost is not None:
            lost.append(journal_lost)
        if lost:
            problems[-1] += (
                ": prepared claims are recovered from the CDI specs on disk, "
                "and from kubelet and the API server"
            )
        problem = "; ".join(problems) or None
        if problem is None:
            self._known = _Known(identity, dict(entries))
        return LoadResult(entries, problem=problem, moved_to=moved, lost="; ".join(lost) or None)

    def _entries_of_file(
        self, data: bytes | None
    ) -> tuple[dict[str, ClaimEntry], list[str], list[str], Path | None]:
        """The entries of the file's `data` (None: no file), else of its copy: (entries, problems in
        words, why claims may be missing, where a corrupt file was moved)."""
        if data is not None:
            try:
                return decode(data, self.records), [], [], None
            except CheckpointError as exc:
                moved = self._move_aside(self.path)
                found = f"checkpoint {self.path} is corrupt ({exc}); moved it to {moved.name}"
        elif os.path.exists(self.backup_path):  # a crash between the copy and the file of a first write
            moved, found = None, f"checkpoint {self.path} is missing"
        elif self._journal is not None and self._journal.exists():  # made only after the file: both deleted
            moved, found = None, f"checkpoint {self.path} is missing while its journal is there"
        else:
            return {}, [], [], None
        copy, why = self._read_backup()
        if copy is not None:
            return copy, [f"{found}; read its copy {self.backup_path.name}: no claim is lost"], [], moved
        problem = f"{found}; its copy {self.backup_path.name} {why}"
        return {}, [problem], [f"checkpoint {self.path} and its copy unusable"], moved

    def _read_backup(self) -> tuple[dict[str, ClaimEntry] | None, str]:
        """The entries of the checkpoint's copy, or None and why it cannot be read (in words that follow
        its name)."""
        try:
            data = self.backup_path.read_bytes()
        except FileNotFoundError:
            return None, "is missing"
        except OSError as exc:
            return None, f"cannot be read ({exc})"
        try:
            return decode(data, self.records), ""
        except CheckpointError as exc:
            return None, f"is corrupt too ({exc})"

    def _is_known(self, known: _Known | None, identity: tuple[int, int, int, int] | None) -> bool:
        return (
            known is not None
            and known.identity == identity
            and (self._journal is None or self._journal.unchanged())
        )

    def _apply_journal(self, entries: dict[str, ClaimEntry]) -> tuple[str | None, str | None]:
        """Apply the journal's records to `entries`, those that check out; the problem in one line when
        it has a bad one, and why changes may be missing (the journal is moved aside then)."""
        if self._journal is None:
            return None, None
        damage = None
        try:
            records = self._journal.read()
            damage = records.damage if records is not None else None
            for i, payload in enumerate(records.payloads if records is not None else ()):
                apply_changes(entries, payload, f"record {i}", self.records)
        except (JournalError, CheckpointError) as exc:
            damage = str(exc)
        if damage is None:
            return None, None
        self._journal.close()
        moved = self._move_aside(self.journal_path)
        problem = (
            f"checkpoint journal {self.journal_path} is not usable ({damage}); moved it to {moved.name} "
            "after applying the records that check out"
        )
        return problem, f"checkpoint journal damaged ({damage})"

    def save(self, entries: Mapping[str, ClaimEntry]) -> None:
        """Make `entries` the checkpoint, durably: one journal record when this store knows what is on
        disk and the journal has room, else the file rewritten (`compact`)."""
        known, self._known = self._known, None
        if known is not None and known.identity is not None and self._journal is not None:
            record = encode_changes(known.entries, entries)
            if record is None or self._journal.append(record):
                self._known = _Known(known.identity, dict(entries))
                return
        self.compact(entries)

    def compact(self, entries: Mapping[str, ClaimEntry]) -> None:
        """Rewrite the file with `entries` (temp file, fsync, rename, fsync of the directory), then empty
        the journal; a crash in between leaves records the file has, which change nothing applied again."""
        self._known = None
        data = encode(entries)
        atomic_write(self.backup_path, data, mode=0o600)  # the copy first: see the module docs
        atomic_write(self.path, data, mode=0o600)
        identity = _identity(os.stat(self.path))  # the caller holds the node lock
        if self._journal is not None:
            try:
                self._journal.reset()
                self._no_journal = False
            except OSError as exc:
                if self._journal.exists():
                    raise
                # No journal could be made (a full disk): every change rewrites the file, and the
                # journal is made at the first rewrite that can. Said once while it lasts.
                if not self._no_journal:
                    log.warning(
                        "no checkpoint journal could be made: each change rewrites the checkpoint instead",
                        extra={"fields": {"error": str(exc)}},
                    )
                self._no_journal = True
        self._known = _Known(identity, dict(entries))

    def fold(self) -> bool:
        """Rewrite the file with the journal's records and empty the journal (at start, and at a clean
        stop, so that a release without the journal reads every claim); False when there was nothing to
        fold. The caller holds the node lock."""
        if self._journal is None:
            return False
        result = self.load()
        if (
            self._known is not None
            and self._journal.exists()
            and self._journal.records == 0
            and self._backup_matches()
        ):
            return False
        self.compact(result.entries)
        return True

    def _backup_matches(self) -> bool:
        """The copy holds the file's bytes (a release without the copy may have rewritten the file)."""
        try:
            return self.backup_path.read_bytes() == self.path.read_bytes()
        except FileNotFoundError:
            return not self.path.exists()

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()

    def load_boot_id(self) -> str | None:
        """The boot id the entries were last restored for; None when none was kept (an earlier
        release's checkpoint, a new node) or the file is empty."""
        try:
            text = self.boot_id_path.read_text(encoding="ascii", errors="replace")
        except FileNotFoundError:
            return None
        return text.strip() or None

    def save_boot_id(self, boot_id: str) -> None:
        atomic_write(self.boot_id_path, f"{boot_id}\n".encode(), mode=0o600)

    def load_lost(self) -> str | None:
        """Why claims may be missing from the checkpoint, as kept by `save_lost`; None when none are."""
        try:
            text = self.lost_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return None
        return text.strip() or "claims may be missing from the checkpoint"

    def save_lost(self, why: str) -> None:
        """Keep `why` claims may be missing until `clear_lost` (a restart in between still knows)."""
        atomic_write(self.lost_path, f"{why}\n".encode(), mode=0o600)

    def clear_lost(self) -> None:
        remove_durably(self.lost_path)

    @staticmethod
    def _move_aside(path: Path) -> Path:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = path.with_name(f"{path.name}.corrupt-{stamp}")
        n = 1
        while target.exists():
            target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
            n += 1
        path.rename(target)
        fsync_dir(path.parent)
        return target
