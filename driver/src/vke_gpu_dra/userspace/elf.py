"""Read a shared object's SONAME (`DT_SONAME` of its dynamic section) from an ELF file.

`soname` is pure: it reads through a `read(offset, size)` callable, so only the ELF header, the
section headers, the dynamic section and its string table are read, never the whole library
(driver libraries are tens of megabytes). `file_soname` is that reader over a file.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Final

Reader = Callable[[int, int], bytes]

_SHT_DYNAMIC: Final = 6
_DT_NULL: Final = 0
_DT_SONAME: Final = 14
#: Enough of a library's head for the ELF header; section headers are read from where it says.
HEADER_BYTES: Final = 64


class ElfError(ValueError):
    """Not an ELF shared object this module can read; the message says why."""


def _exact(read: Reader, offset: int, size: int, what: str) -> bytes:
    data = read(offset, size)
    if len(data) != size:
        raise ElfError(f"{what} lies outside the file")
    return data


def _layout(header: bytes) -> tuple[int, int, int, struct.Struct, struct.Struct]:
    """(section header offset, entry size, count, section struct, dynamic-entry struct) of an ELF header."""
    if header[:4] != b"\x7fELF" or len(header) < HEADER_BYTES:
        raise ElfError("not an ELF file")
    klass, encoding = header[4], header[5]
    if klass not in (1, 2) or encoding not in (1, 2):
        raise ElfError(f"unknown ELF class {klass} or data encoding {encoding}")
    order = "<" if encoding == 1 else ">"
    if klass == 2:  # 64-bit; section: name type flags addr offset size link info align entsize
        shoff, shentsize, shnum = struct.unpack_from(order + "Q10xHH", header, 0x28)
        return shoff, shentsize, shnum, struct.Struct(order + "IIQQQQIIQQ"), struct.Struct(order + "qQ")
    shoff, shentsize, shnum = struct.unpack_from(order + "I10xHH", header, 0x20)
    return shoff, shentsize, shnum, struct.Struct(order + "IIIIIIIIII"), struct.Struct(order + "iI")


def _soname_in(read: Reader, dynamic: bytes, dyn: struct.Struct, strtab: tuple[int, int]) -> str | None:
    strtab_offset, strtab_size = strtab
    for pos in range(0, len(dynamic) - dyn.size + 1, dyn.size):
        tag, value = dyn.unpack_from(dynamic, pos)
        if tag == _DT_NULL:
            return None
        if tag == _DT_SONAME:
            if value >= strtab_size:
                raise ElfError("SONAME lies outside the string table")
            strings = _exact(read, strtab_offset + value, min(strtab_size - value, 4096), "SONAME")
            end = strings.find(b"\0")
            if end < 0:
                raise ElfError("SONAME is not NUL-terminated")
            return strings[:end].decode(errors="surrogateescape")
    return None


def soname(read: Reader) -> str | None:
    """The SONAME of the ELF file behind `read`, or None when it has none."""
    shoff, shentsize, shnum, section, dyn = _layout(read(0, HEADER_BYTES))
    if shentsize < section.size:
        raise ElfError(f"section header size {shentsize} is too small")
    table = _exact(read, shoff, shnum * shentsize, "section header table")
    sections = [section.unpack_from(table, i * shentsize) for i in range(shnum)]
    for sh in sections:
        if sh[1] != _SHT_DYNAMIC:
            continue
        offset, size, link = sh[4], sh[5], sh[6]
        if link >= len(sections):
            raise ElfError("dynamic section links to a missing string table")
        dynamic = _exact(read, offset, size, "dynamic section")
        return _soname_in(read, dynamic, dyn, (sections[link][4], sections[link][5]))
    return None


def file_soname(path: Path) -> str | None:
    """`soname` of the file at `path` (OSError when it cannot be read)."""
    with path.open("rb") as handle:

        def read(offset: int, size: int) -> bytes:
            handle.seek(offset)
            return handle.read(size)

        return soname(read)
