"""The node's boot id: a reboot is told by a new one (light: the command line reads its default path)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

#: Where Linux tells the current boot apart from the others (a new random id at every boot; the
#: host kernel's in every container, as /proc/sys is not namespaced).
DEFAULT_BOOT_ID_PATH: Final = Path("/proc/sys/kernel/random/boot_id")


class BootIdError(Exception):
    """The node's boot id cannot be read; the message names the file and why."""


def read_boot_id(path: Path = DEFAULT_BOOT_ID_PATH) -> str:
    """The current boot id: the file's first line, stripped; BootIdError when missing or empty."""
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except OSError as exc:
        raise BootIdError(f"cannot read the node's boot id from {path}: {exc.strerror or exc}") from None
    lines = text.strip().splitlines()
    if not lines or not lines[0].strip():
        raise BootIdError(f"the node's boot id file {path} is empty")
    return lines[0].strip()
