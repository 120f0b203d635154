"""MIG capability device nodes, from /proc/driver/nvidia-caps/mig-minors."""

from __future__ import annotations

from pathlib import Path
from typing import Final

DEFAULT_PROC: Final = Path("/proc")
MIG_MINORS: Final = Path("driver/nvidia-caps/mig-minors")
CAPS_DEV_DIR: Final = "/dev/nvidia-caps"


def parse_mig_minors(text: str) -> dict[str, int]:
    """`gpu0/gi1/access 12` lines -> {"gpu0/gi1/access": 12}; malformed lines are skipped."""
    minors = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            minors[parts[0]] = int(parts[1])
    return minors


def read_mig_minors(proc_root: Path = DEFAULT_PROC) -> dict[str, int] | None:
    """The table, or None when it cannot be read (no MIG support in the kernel module)."""
    try:
        return parse_mig_minors((proc_root / MIG_MINORS).read_text())
    except OSError:
        return None


def mig_caps_nodes(
    minors: dict[str, int], parent_minor: int, gi_id: int, ci_id: int
) -> tuple[str, ...] | None:
    """Device nodes granting access to GPU instance `gi_id` and compute instance `ci_id`; None if unknown."""
    gi_key = f"gpu{parent_minor}/gi{gi_id}/access"
    ci_key = f"gpu{parent_minor}/gi{gi_id}/ci{ci_id}/access"
    if gi_key not in minors or ci_key not in minors:
        return None
    return (f"{CAPS_DEV_DIR}/nvidia-cap{minors[gi_key]}", f"{CAPS_DEV_DIR}/nvidia-cap{minors[ci_key]}")
