"""Crash-safe file replacement: readers see the old file or the new one, never a torn write."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

#: `atomic_write`'s temp file for `<name>`: `.<name>.<8 random chars of tempfile's alphabet>.tmp`.
_TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp$")


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # os.write may write less than asked; each round writes at least one byte
        view = view[os.write(fd, view) :]


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write `data` to `path` via a temp file in the same directory, fsync, rename, fsync the directory."""
    directory = path.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)  # _TEMP_NAME
    except OSError as exc:
        raise _naming(exc, path) from None
    tmp = Path(tmp_name)
    try:
        try:
            _write_all(fd, data)
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if isinstance(exc, OSError):
            raise _naming(exc, path) from None
        raise
    fsync_dir(directory)


def _naming(exc: OSError, path: Path) -> OSError:
    """`exc` naming the file being written (a failed write or fsync names none: ENOSPC, EIO)."""
    if exc.filename is not None or exc.errno is None:
        return exc
    return type(exc)(exc.errno, exc.strerror, str(path))


def remove_durably(path: Path) -> bool:
    """Delete `path` and fsync its directory; False when it did not exist."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True


def remove_temp_leftovers(directory: Path, owns: Callable[[str], bool]) -> list[Path]:
    """Delete temp files that an interrupted `atomic_write` of ours left in `directory`; the paths removed.

    Only regular files named like `atomic_write`'s temp files whose target name `owns` accepts are
    removed; anything else (other programs' files, links, directories) is left alone. Callers must
    make sure no write of theirs is in flight (the plugin holds its serialization lock).
    """
    removed: list[Path] = []
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return removed
    for name in names:
        match = _TEMP_NAME.match(name)
        if match is None or not owns(match.group("name")):
            continue
        path = directory / name
        try:
            if not stat.S_ISREG(path.lstat().st_mode):
                continue
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path)
    if removed:
        fsync_dir(directory)
    return removed
