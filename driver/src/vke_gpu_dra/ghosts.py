"""Which checkpoint entries are ghosts (pure).

A ghost is an entry of a claim the API server no longer has for this node: the claim is gone (404),
its name now belongs to another claim (another UID: deleted and re-created), or its allocation no
longer names a device of this node's pool for this driver (deallocated). `judge` decides it from one
read of the claim; `reconcile` does the reads and cleans what it finds (the held-devices guard of a new
claim is the allocation step's: `allocation.guard`).

Claims adopted from NVIDIA's plugin (`takeover`) that kubelet has not prepared here again exist only
in the takeover's ledger, yet hold their devices (and NVIDIA's settings on them) until released:
`takeover.step.adopted_entry` gives each one the shape of a checkpoint entry, so the same reads judge it
and the same guard sees its devices.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from vke_gpu_dra_core.objects import lookup

from .allocation import results_of
from .claims.checkpoint import ClaimEntry


class Reason(enum.StrEnum):
    """Why an entry is a ghost (the `reason` label of the cleanup metric)."""

    GONE = "gone"  #: the API server has no claim of that namespace/name
    REPLACED = "replaced"  #: the claim of that namespace/name has another UID
    DEALLOCATED = "deallocated"  #: its allocation names no device of this node's pool for this driver
    #: An adopted claim without a name that no pod of this node has referenced for two rounds.
    UNREFERENCED = "unreferenced"

    @property
    def description(self) -> str:
        return {
            Reason.GONE: "the claim no longer exists",
            Reason.REPLACED: "the claim was deleted and re-created under the same name (another UID)",
            Reason.DEALLOCATED: "its allocation no longer names a device of this node for this driver",
            Reason.UNREFERENCED: (
                "adopted from NVIDIA's plugin without a namespace/name, and no pod on this node has "
                "referenced a claim of its UID for two rounds (kubelet would unprepare it)"
            ),
        }[self]


def label(entry: ClaimEntry) -> str:
    return f"{entry.namespace}/{entry.name}"


def checkable(entry: ClaimEntry) -> bool:
    """An entry the API server can be asked about (entries recovered from bare CDI specs have no name)."""
    return bool(entry.namespace and entry.name)


def judge(
    entry: ClaimEntry, claim: Mapping[str, Any] | None, *, driver_name: str, pool_name: str
) -> Reason | None:
    """Why `entry` is a ghost given `claim` (its namespace/name read now; None: 404), None if it is not."""
    if claim is None:
        return Reason.GONE
    if lookup(claim, "metadata", "uid") != entry.uid:
        return Reason.REPLACED
    if not results_of(claim, driver_name, pool_name):
        return Reason.DEALLOCATED
    return None
