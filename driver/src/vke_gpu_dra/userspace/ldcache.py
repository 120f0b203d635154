"""Parse `/etc/ld.so.cache` as glibc's `ldconfig` writes it (pure: bytes in, entries out).

Two layouts exist, both read here:

* old, magic `ld.so-1.7.0`: header (12 bytes: magic padded, then `uint32 nlibs`), `nlibs` entries of
  `int32 flags, uint32 key, uint32 value` (12 bytes); string offsets count from the end of the entries.
  `ldconfig -c compat` (glibc < 2.32's default) appends a new-format cache after the old entries,
  aligned to 8 bytes; when present it is used instead, as glibc's loader does.
* new, magic `glibc-ld.so.cache1.1` (`ldconfig -c new`, glibc >= 2.32's default): header of 48 bytes
  (magic, `uint32 nlibs`, `uint32 len_strings`, `uint8 flags`, 3 pad, `uint32 extension_offset`,
  3 unused), entries of 24 bytes (`int32 flags, uint32 key, uint32 value, uint32 osversion,
  uint64 hwcap`); string offsets count from the start of the new header.

Integers are in the machine's byte order (the file is never moved between machines).
"""

from __future__ import annotations

import platform
import struct
from dataclasses import dataclass
from typing import Final

OLD_MAGIC: Final = b"ld.so-1.7.0"
NEW_MAGIC: Final = b"glibc-ld.so.cache1.1"

_OLD_HEADER: Final = struct.Struct("=12sI")
_OLD_ENTRY: Final = struct.Struct("=iII")
_NEW_HEADER: Final = struct.Struct("=20sIIB3xI12x")
_NEW_ENTRY: Final = struct.Struct("=iIIIQ")

#: `flags & FLAG_TYPE_MASK` of an ELF library for glibc (libc6).
FLAG_TYPE_MASK: Final = 0x00FF
FLAG_ELF_LIBC6: Final = 0x0003
#: `flags & FLAG_REQUIRED_MASK`: the ABI of 64-bit libraries per machine (0 = 32-bit / generic).
FLAG_REQUIRED_MASK: Final = 0xFF00
FLAG_X8664_LIB64: Final = 0x0300
FLAG_AARCH64_LIB64: Final = 0x0A00
_MACHINE_FLAGS: Final = {
    "x86_64": FLAG_X8664_LIB64,
    "aarch64": FLAG_AARCH64_LIB64,
    "arm64": FLAG_AARCH64_LIB64,
}


class LdCacheError(ValueError):
    """The bytes are not an ld.so.cache glibc would read; the message says what is wrong."""


@dataclass(frozen=True)
class CacheEntry:
    """One library in the cache: its name (usually the SONAME) and the path the loader uses."""

    flags: int
    key: str
    value: str

    @property
    def is_libc6(self) -> bool:
        return self.flags & FLAG_TYPE_MASK == FLAG_ELF_LIBC6

    def is_native_64bit(self, machine: str | None = None) -> bool:
        """A glibc library of this machine's 64-bit ABI (what a 64-bit container loads)."""
        wanted = _MACHINE_FLAGS.get(machine or platform.machine())
        return self.is_libc6 and wanted is not None and self.flags & FLAG_REQUIRED_MASK == wanted


def _string(data: bytes, offset: int, what: str) -> str:
    if not 0 <= offset < len(data):
        raise LdCacheError(f"{what} string offset {offset} is outside the file ({len(data)} bytes)")
    end = data.find(b"\0", offset)
    if end < 0:
        raise LdCacheError(f"{what} string at offset {offset} is not NUL-terminated")
    return data[offset:end].decode("utf-8", errors="surrogateescape")


def _parse_new(data: bytes, start: int) -> list[CacheEntry]:
    if len(data) < start + _NEW_HEADER.size:
        raise LdCacheError(f"new-format header at offset {start} is truncated ({len(data)} bytes)")
    _magic, nlibs, _len_strings, _flags, _ext = _NEW_HEADER.unpack_from(data, start)
    first = start + _NEW_HEADER.size
    if len(data) < first + nlibs * _NEW_ENTRY.size:
        raise LdCacheError(f"new-format cache claims {nlibs} entries but the file has {len(data)} bytes")
    entries = []
    for i in range(nlibs):
        flags, key, value, _osv, _hwcap = _NEW_ENTRY.unpack_from(data, first + i * _NEW_ENTRY.size)
        entries.append(
            CacheEntry(flags, _string(data, start + key, "key"), _string(data, start + value, "value"))
        )
    return entries


def _align8(value: int) -> int:
    return (value + 7) & ~7


def parse(data: bytes) -> list[CacheEntry]:
    """The cache's entries in file order (the loader's order of preference)."""
    if data.startswith(NEW_MAGIC):
        return _parse_new(data, 0)
    if not data.startswith(OLD_MAGIC):
        raise LdCacheError(
            f"unknown magic {data[:20]!r}: expected {OLD_MAGIC.decode()!r} or {NEW_MAGIC.decode()!r}"
        )
    if len(data) < _OLD_HEADER.size:
        raise LdCacheError(f"old-format header is truncated ({len(data)} bytes)")
    _magic, nlibs = _OLD_HEADER.unpack_from(data, 0)
    strings = _OLD_HEADER.size + nlibs * _OLD_ENTRY.size
    if len(data) < strings:
        raise LdCacheError(f"old-format cache claims {nlibs} entries but the file has {len(data)} bytes")
    new_start = _align8(strings)
    if data[new_start : new_start + len(NEW_MAGIC)] == NEW_MAGIC:
        return _parse_new(data, new_start)
    entries = []
    for i in range(nlibs):
        flags, key, value = _OLD_ENTRY.unpack_from(data, _OLD_HEADER.size + i * _OLD_ENTRY.size)
        entries.append(
            CacheEntry(flags, _string(data, strings + key, "key"), _string(data, strings + value, "value"))
        )
    return entries
