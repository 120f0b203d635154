"""Wait for changes to one file name in a folder through Linux inotify (libc, through ctypes), so a thread
that watches a file sleeps until the file changes instead of waking every second to look.

`FileEvents.open(folder, name)` returns None where inotify cannot be had (another OS, no libc symbol, the
folder missing, the watch limit reached): the caller then looks at the file on a timer as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import select
import struct
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

# <sys/inotify.h>
IN_MODIFY: Final = 0x00000002
IN_ATTRIB: Final = 0x00000004
IN_CLOSE_WRITE: Final = 0x00000008
IN_MOVED_FROM: Final = 0x00000040
IN_MOVED_TO: Final = 0x00000080
IN_CREATE: Final = 0x00000100
IN_DELETE: Final = 0x00000200
IN_DELETE_SELF: Final = 0x00000400
IN_MOVE_SELF: Final = 0x00000800
IN_Q_OVERFLOW: Final = 0x00004000
IN_IGNORED: Final = 0x00008000
IN_NONBLOCK: Final = os.O_NONBLOCK
IN_CLOEXEC: Final = os.O_CLOEXEC
#: Every way the file's content or its name in the folder can change.
FILE_CHANGES: Final = (
    IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
)
#: The folder itself went away: the watch ends.
FOLDER_GONE: Final = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED
_EVENT: Final = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    except (OSError, AttributeError):
        return None
    return libc


def parse_events(data: bytes, name: bytes) -> tuple[bool, bool]:
    """(the file `name` changed, the watch ended or overflowed) from a read of inotify events."""
    changed = ended = False
    at = 0
    while at + _EVENT.size <= len(data):
        _, mask, _, length = _EVENT.unpack_from(data, at)
        raw = data[at + _EVENT.size : at + _EVENT.size + length]
        at += _EVENT.size + length
        if mask & (FOLDER_GONE | IN_Q_OVERFLOW):
            ended = True
        elif raw.split(b"\0", 1)[0] == name and mask & FILE_CHANGES:
            changed = True
    return changed, ended


class FileEvents:
    """One inotify watch on a folder, reporting the changes of one name in it; `close()` ends it."""

    def __init__(self, fd: int, name: str) -> None:
        self._fd = fd
        self._name = os.fsencode(name)
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self.ended = False

    @classmethod
    def open(cls, folder: Path, name: str) -> FileEvents | None:
        libc = _libc()
        if libc is None:
            return None
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            log.info("inotify is not available (%s): looking on a timer", os.strerror(ctypes.get_errno()))
            return None
        if libc.inotify_add_watch(fd, os.fsencode(folder), FILE_CHANGES | FOLDER_GONE) < 0:
            why = os.strerror(ctypes.get_errno())
            os.close(fd)
            log.info("cannot watch %s (%s): looking on a timer", folder, why)
            return None
        return cls(fd, name)

    def wait(self, timeout: float | None) -> bool:
        """Sleep until the file changes, `wake()` is called or `timeout` seconds pass (None: no limit);
        True when the file changed (or the watch ended, and the caller should look)."""
        if self.ended:
            return True
        try:
            ready, _, _ = select.select([self._fd, self._wake_r], [], [], timeout)
        except (OSError, ValueError):  # closed meanwhile
            return True
        changed = False
        if self._wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(self._wake_r, 4096)
        if self._fd in ready:
            try:
                data = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                data = b""
            except OSError as err:
                if err.errno != errno.EBADF:
                    raise
                data = b""
            changed, ended = parse_events(data, self._name)
            if ended:
                self.ended = True
                changed = True
        return changed

    def wake(self) -> None:
        """End a `wait` now (from another thread)."""
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"x")

    def close(self) -> None:
        for fd in (self._fd, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
