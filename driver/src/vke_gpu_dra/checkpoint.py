"""Checkpoint of prepared claims, in the plugin data directory under this driver's own file name.

Format (JSON, version 1):

    {"format": "vke-gpu-dra-checkpoint", "version": 1, "checksum": "sha256:<hex>",
     "claims": [{"uid", "namespace", "name", "state": "PrepareStarted"|"PrepareCompleted",
                 "devices": [PreparedDevice JSON, ...],
                 "sharing": {"timeslice": {device: 0-3}, "mps": [{"daemonId", "devices"}]}  (optional),
                 "partitions": [MigRecord JSON, ...]  (optional: dynamic MIG devices)}, ...]}

The checksum covers the canonical JSON (sorted keys, no spaces) of `{"claims": ..., "version": ...}`.
NVIDIA's `checkpoint.json` in the same directory is never written, so a rollback to NVIDIA's plugin
never meets a file it rejects.

The node's boot id (`/proc/sys/kernel/random/boot_id`) the entries were last restored for is kept
next to the checkpoint, in `vke-gpu-dra-checkpoint.boot-id` (the id and a newline), not inside it:
version 1's reader accepts no other top-level field and would move the whole file aside as corrupt,
so a rollback to the previous release reads the checkpoint unchanged and ignores the boot id file.
A missing file (a checkpoint of the previous release, or a new node) is read as "no boot id".
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from vke_gpu_dra_core.device_model import PreparedDevice

from .bootid import DEFAULT_BOOT_ID_PATH, BootIdError, read_boot_id
from .fsutil import atomic_write, fsync_dir
from .partitions.records import MigRecord
from .sharing.records import SharingRecord

__all__ = [
    "BOOT_ID_FILE",
    "CHECKPOINT_FILE",
    "DEFAULT_BOOT_ID_PATH",
    "BootIdError",
    "CheckpointError",
    "CheckpointStore",
    "ClaimEntry",
    "ClaimState",
    "LoadResult",
    "read_boot_id",
]

CHECKPOINT_FILE: Final = "vke-gpu-dra-checkpoint.json"
#: The boot id the checkpoint's entries were last restored for, next to the checkpoint.
BOOT_ID_FILE: Final = "vke-gpu-dra-checkpoint.boot-id"
FORMAT: Final = "vke-gpu-dra-checkpoint"
VERSION: Final = 1


class ClaimState(enum.StrEnum):
    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"


@dataclass(frozen=True)
class ClaimEntry:
    uid: str
    namespace: str
    name: str
    state: ClaimState
    devices: tuple[PreparedDevice, ...] = ()
    #: What the claim changed on the node's GPUs (time-slice, MPS daemons); written only when non-empty,
    #: so files of claims without sharing keep the original shape.
    sharing: SharingRecord = field(default_factory=SharingRecord)
    #: The claim's dynamic MIG devices (placements, then ids once created); written only when non-empty.
    partitions: tuple[MigRecord, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "state": self.state.value,
            "devices": [d.to_json() for d in self.devices],
        }
        if self.sharing:
            data["sharing"] = self.sharing.to_json()
        if self.partitions:
            data["partitions"] = [p.to_json() for p in self.partitions]
        return data

    @classmethod
    def from_json(cls, data: Any, where: str) -> ClaimEntry:
        if not isinstance(data, Mapping):
            raise CheckpointError(f"{where} must be an object, got {type(data).__name__}")
        base = {"uid", "namespace", "name", "state", "devices"}
        _exact_fields(data, base | ({"sharing", "partitions"} & set(data)), where)
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
        sharing = SharingRecord()
        if "sharing" in data:
            try:
                sharing = SharingRecord.from_json(data["sharing"])
            except ValueError as exc:
                raise CheckpointError(f"{where}.{exc}") from None
        partitions = _partitions(data.get("partitions", []), f"{where}.partitions")
        return cls(data["uid"], data["namespace"], data["name"], state, tuple(devices), sharing, partitions)


def _partitions(raw: Any, where: str) -> tuple[MigRecord, ...]:
    if not isinstance(raw, list):
        raise CheckpointError(f"{where} must be a list, got {raw!r}")
    try:
        return tuple(MigRecord.from_json(p, f"{where}[{i}]") for i, p in enumerate(raw))
    except ValueError as exc:
        raise CheckpointError(str(exc)) from None


class CheckpointError(ValueError):
    """The checkpoint file is not a valid checkpoint (bad JSON, checksum or shape)."""


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _exact_fields(obj: Mapping[str, Any], expected: set[str], where: str) -> None:
    if set(obj) != expected:
        raise CheckpointError(f"{where} must have exactly the fields {sorted(expected)}, has {sorted(obj)}")


def _canonical(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _checksum(payload: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(_canonical(payload)).hexdigest()


def encode(entries: Mapping[str, ClaimEntry]) -> bytes:
    payload = {"version": VERSION, "claims": [entries[uid].to_json() for uid in sorted(entries)]}
    document = {"format": FORMAT, **payload, "checksum": _checksum(payload)}
    # Compact: json's C encoder (an indented document takes the pure-Python one, several times slower).
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def decode(data: bytes) -> dict[str, ClaimEntry]:
    """Parse a checkpoint; raises CheckpointError naming what is wrong."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise CheckpointError(f"top level must be an object, got {type(document).__name__}")
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
        entry = ClaimEntry.from_json(raw, f"claims[{i}]")
        if entry.uid in entries:
            raise CheckpointError(f"claims[{i}]: duplicate uid {entry.uid}")
        entries[entry.uid] = entry
    return entries


@dataclass(frozen=True)
class LoadResult:
    entries: dict[str, ClaimEntry]
    #: One clear message when the file was unusable (it was moved to `moved_to`); None otherwise.
    problem: str | None = None
    moved_to: Path | None = None


class CheckpointStore:
    """Reads and atomically rewrites the checkpoint file in `directory`."""

    def __init__(self, directory: Path, file_name: str = CHECKPOINT_FILE) -> None:
        self.path = directory / file_name
        self.boot_id_path = directory / BOOT_ID_FILE
        #: The file as this store last read or wrote it: its identity (`_identity`) and its entries. Every
        #: write replaces the file (a new inode), so another process's write is always read again.
        self._known: tuple[tuple[int, int, int, int], dict[str, ClaimEntry]] | None = None

    def load(self) -> LoadResult:
        """The stored entries; a corrupt file is moved aside to `<name>.corrupt-<timestamp>`. A file this
        store read or wrote last, unchanged since (same inode, size and times), is not parsed again."""
        try:
            with self.path.open("rb") as file:
                identity = _identity(os.fstat(file.fileno()))
                if self._known is not None and self._known[0] == identity:
                    return LoadResult(dict(self._known[1]))
                data = file.read()
        except FileNotFoundError:
            self._known = None
            return LoadResult({})
        try:
            entries = decode(data)
        except CheckpointError as exc:
            self._known = None
            moved = self._move_aside()
            problem = (
                f"checkpoint {self.path} is corrupt ({exc}); moved it to {moved.name} "
                "and recovering prepared claims from the CDI specs on disk"
            )
            return LoadResult({}, problem=problem, moved_to=moved)
        self._known = (identity, dict(entries))
        return LoadResult(entries)

    def save(self, entries: Mapping[str, ClaimEntry]) -> None:
        self._known = None
        atomic_write(self.path, encode(entries), mode=0o600)
        self._known = (_identity(os.stat(self.path)), dict(entries))  # the caller holds the node lock

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

    def _move_aside(self) -> Path:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        n = 1
        while target.exists():
            target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}")
            n += 1
        self.path.rename(target)
        fsync_dir(self.path.parent)
        return target
