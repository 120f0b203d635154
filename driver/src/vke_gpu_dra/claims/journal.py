"""The checkpoint's journal: changes appended to a preallocated file, one `fdatasync` each.

Rewriting the whole checkpoint durably costs a temp file, its fsync, a rename and an fsync of the
directory. Appending a change to a file whose blocks are already written costs one `fdatasync` of a
few hundred bytes and no metadata (its size never changes): about a quarter of the time on ext4. So the
checkpoint (`checkpoint.CheckpointStore`) is a snapshot plus this journal of the changes since it was
written; the snapshot is rewritten (and the journal emptied) from time to time (`compact`).

Layout of `<checkpoint name>.journal` (`SIZE` bytes, zero-filled when created, so every block is written):

    header  (HEADER: magic, format, epoch)  at offset 0
    record  (RECORD: payload length, crc32, sequence number) + payload (JSON), one after the other

The epoch is random and new at each `reset`; a record's crc32 covers the epoch, its sequence number
(0, 1, 2, ... after each reset) and its payload. Reading stops at the first record that is not the next
one of this epoch: the end of what was appended since the reset, a record torn by a power loss (its call
never answered: it is appended and synced before the call answers), or what is left of earlier epochs,
which never checks out. Nothing is ever zeroed after the file is created.

Damage is told apart from that end (`Records.damage`): a record that does not check out followed by the
next record of the epoch that does (a record changed on disk: appends are serialised and each is synced
before the next, so a torn one is always the last) is skipped and reading goes on after it; a file
shorter than `SIZE` (truncated) gives the records it still holds. Either way the reader applies what
checks out and knows that changes may be missing.

A crash between the snapshot's rewrite and the journal's reset leaves records the snapshot already has;
they are applied again to it, which changes nothing (each record sets whole entries or removes them).
"""

from __future__ import annotations

import os
import secrets
import struct
import weakref
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..fsutil import atomic_write

#: The journal's size; a change that does not fit makes the store rewrite the snapshot instead.
SIZE: Final = 1 << 20
#: Records after which the store rewrites the snapshot even when the file has room (bounds a replay).
MAX_RECORDS: Final = 2048
MAGIC: Final = b"VKGDRAJ1"
FORMAT: Final = 1
HEADER: Final = struct.Struct("<8sIQ")  # magic, format, epoch
RECORD: Final = struct.Struct("<IIQ")  # payload length, crc32(epoch, sequence, payload), sequence
#: Bytes read after the last known record to see whether another one follows (most records are shorter).
TAIL_READ: Final = 1024


class JournalError(ValueError):
    """The journal's header is not ours (another file, or damaged beyond a torn record)."""


@dataclass(frozen=True)
class Records:
    """What a read found: the epoch, the payloads in order, and where the next record goes."""

    epoch: int
    payloads: tuple[bytes, ...]
    end: int  #: offset of the next record
    #: What was found damaged (a record skipped, the file truncated), in words; None when nothing was.
    damage: str | None = None


def _crc(epoch: int, seq: int, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(struct.pack("<QQ", epoch, seq)))


def _resumes_at(data: bytes, offset: int, epoch: int, seq: int) -> int | None:
    """Where record `seq + 1` of `epoch` starts after `offset` when it checks out there (record `seq` at
    `offset` is damaged), else None. Found through its sequence number's bytes: a few candidates (records
    of earlier epochs), each checked by its crc."""
    needle = struct.pack("<Q", seq + 1)
    at = data.find(needle, offset + RECORD.size)
    while at != -1:
        start = at - 8  # the sequence number is the head's last field
        if _next_record(data, start, epoch, seq + 1) is not None:
            return start
        at = data.find(needle, at + 1)
    return None


def _next_record(data: bytes | memoryview, offset: int, epoch: int, seq: int) -> bytes | None:
    """The payload of record `seq` of `epoch` at `offset` in `data`, or None where there is none."""
    head_end = offset + RECORD.size
    if head_end > len(data):
        return None
    length, crc, found = RECORD.unpack_from(data, offset)
    if found != seq or length == 0 or head_end + length > len(data):
        return None
    payload = bytes(data[head_end : head_end + length])
    return payload if _crc(epoch, seq, payload) == crc else None


class Journal:
    """The journal file at `path`; one process at a time changes it (the caller holds the node lock)."""

    def __init__(self, path: Path, size: int = SIZE) -> None:
        if size < HEADER.size + RECORD.size + 1:
            raise ValueError(
                f"journal size must be at least {HEADER.size + RECORD.size + 1} bytes, got {size}"
            )
        self.path = path
        self.size = size
        self._fd: int | None = None
        self._ino: int | None = None
        self._closer: weakref.finalize[[int], Journal] | None = None  # closes the file with the object
        #: Where this process knows the journal stands: epoch, next sequence number and offset.
        self._epoch: int | None = None
        self._seq = 0
        self._end = HEADER.size
        #: The last read found no journal file.
        self._absent = False

    @property
    def records(self) -> int:
        """Records appended since the last reset, as this process knows them."""
        return self._seq

    def exists(self) -> bool:
        return self.path.exists()

    def _open(self) -> int | None:
        """The open file (opened again when another process replaced it); None when there is none."""
        try:
            ino = os.stat(self.path).st_ino
        except FileNotFoundError:
            self._close()
            return None
        if self._fd is None or ino != self._ino:
            self._close()
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
            self._fd, self._ino = fd, os.fstat(fd).st_ino
            self._closer = weakref.finalize(self, os.close, fd)
        return self._fd

    def _close(self) -> None:
        if self._closer is not None:
            self._closer()  # closes the file, once
        self._fd = self._ino = self._epoch = self._closer = None

    def close(self) -> None:
        self._close()

    def read(self) -> Records | None:
        """Every record of the current epoch; None when there is no journal. JournalError when the file
        is not a journal of ours (bad magic, format or size)."""
        fd = self._open()
        self._absent = fd is None
        if fd is None:
            return None
        data = os.pread(fd, self.size, 0)
        if len(data) < HEADER.size:
            raise JournalError(f"{self.path} is {len(data)} bytes, a journal is {self.size}")
        magic, fmt, epoch = HEADER.unpack_from(data, 0)
        if magic != MAGIC or fmt != FORMAT:
            raise JournalError(f"{self.path} has no journal header (magic {magic!r}, format {fmt})")
        view = memoryview(data)
        payloads: list[bytes] = []
        skipped: list[int] = []
        offset = HEADER.size
        while True:
            payload = _next_record(view, offset, epoch, len(payloads) + len(skipped))
            if payload is not None:
                payloads.append(payload)
                offset += RECORD.size + len(payload)
                continue
            seq = len(payloads) + len(skipped)
            resumed = _resumes_at(data, offset, epoch, seq)
            if resumed is None:
                break
            skipped.append(seq)
            offset = resumed
        damage = []
        if skipped:
            damage.append(f"record(s) {', '.join(map(str, skipped))} damaged, skipped")
        if len(data) != self.size:
            damage.append(f"truncated to {len(data)} bytes of {self.size}")
        self._epoch, self._seq, self._end = epoch, len(payloads) + len(skipped), offset
        return Records(epoch, tuple(payloads), offset, "; ".join(damage) or None)

    def unchanged(self) -> bool:
        """True when the journal is as this process last read or wrote it: the same file with no record
        after the last one it knows, or still no file where the last read found none. Another process on
        the node may have appended since; one that emptied the journal rewrote the checkpoint file first,
        which the store checks on its own."""
        if self._absent:
            return not self.path.exists()
        fd = self._fd  # the journal is replaced only after the checkpoint file (`compact`): checked first
        if fd is None or self._epoch is None:
            return False
        tail = os.pread(fd, min(self.size - self._end, RECORD.size + TAIL_READ), self._end)
        if len(tail) < RECORD.size:
            return True
        length, _, seq = RECORD.unpack_from(tail, 0)
        if seq != self._seq or self._end + RECORD.size + length > self.size:
            return True  # not the next record: the end, or bytes of an earlier epoch
        if RECORD.size + length > len(tail):
            tail = os.pread(fd, RECORD.size + length, self._end)
        return _next_record(tail, 0, self._epoch, self._seq) is None

    def append(self, payload: bytes) -> bool:
        """Append one record and `fdatasync` it; False (nothing written) when it does not fit or the
        journal was not read or reset by this process (the caller rewrites the snapshot instead)."""
        fd = self._fd  # as the load before it in the same batch found it
        if fd is None or self._epoch is None or self._seq >= MAX_RECORDS:
            return False
        record = RECORD.pack(len(payload), _crc(self._epoch, self._seq, payload), self._seq) + payload
        if self._end + len(record) > self.size:
            return False
        try:
            written = os.pwrite(fd, record, self._end)
            if written != len(record):  # a regular file's pwrite into written blocks writes all or fails
                raise OSError(f"short write to {self.path}: {written} of {len(record)} bytes")
            os.fdatasync(fd)
        except OSError as exc:
            if exc.errno is None or exc.filename is not None:
                raise
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None
        self._seq += 1
        self._end += len(record)
        return True

    def reset(self) -> None:
        """Start a new epoch: every record is gone. Creates the file (zero-filled, durably) when missing
        or when it is not a journal of ours."""
        epoch = secrets.randbits(64)
        header = HEADER.pack(MAGIC, FORMAT, epoch)
        fd = self._open()
        if fd is None or os.fstat(fd).st_size != self.size:
            self._close()
            atomic_write(self.path, header + bytes(self.size - HEADER.size), mode=0o600)
            fd = self._open()
            assert fd is not None
        else:
            # The header and the first record's head in one write (one sector): a reader meets the new
            # epoch with no record. Every record of the old epoch is in the snapshot already.
            self._epoch = None
            os.pwrite(fd, header + bytes(RECORD.size), 0)
            os.fdatasync(fd)
        self._epoch, self._seq, self._end, self._absent = epoch, 0, HEADER.size, False
