"""The held-devices guard of a new claim (pure): which prepared claims hold its devices.

A prepare whose device is held by another claim's entry meets a `Holder`: `find_holders` lists them,
unless the overlap is allowed (admin access on either side, a sharing strategy that
`sharing.plan.check_conflicts` accepts next to the holder's settings, or consumable shares: each
claim's results on the device carry a `shareID` of their own, `shares_overlap`). The prepare then
checks each holder at once: a ghost is cleaned and the prepare goes on, a live holder is refused with
`held_error`. What an entry holds is what its devices and its steps' records hold (`held_devices`).

Under dynamic MIG a device also overlaps the devices of its GPU it shares a memory slice with
(`overlapping`: the whole GPU and each of its placements, two placements with a slice in common), as the
shared counters keep the scheduler from allocating both; placements that share no slice are distinct
devices. Only admin access allows such an overlap (a sharing strategy shares one device, not a GPU and
its MIG devices).

NVIDIA's ledger copy of an adopted claim keeps the sharing strategy names only, not their settings, so a
sharing strategy never allows an overlap with an adopted claim; admin access does.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vke_gpu_dra_core.device_model import ClaimError, ClaimRef

from ..claims.checkpoint import ClaimEntry
from ..ghosts import checkable, label
from ..sharing.plan import check_conflicts, plan_for
from ..sharing.records import SharingRecord
from . import results_of

if TYPE_CHECKING:
    from . import AllocatedDevice


def admin_access_devices(claim: Mapping[str, Any], *, driver_name: str, pool_name: str) -> set[str]:
    """Devices of this node a claim was allocated with admin access (monitoring: they may overlap)."""
    return {
        str(r.get("device"))
        for r in results_of(claim, driver_name, pool_name)
        if r.get("adminAccess") is True
    }


@dataclass(frozen=True)
class Holder:
    """Another claim's entry that holds devices a new claim needs."""

    entry: ClaimEntry
    devices: tuple[str, ...]
    #: What sharing refused when the overlap had a strategy (None: no strategy on these devices).
    conflict: str | None = None
    #: The holder is a claim adopted from NVIDIA's plugin, known only to the takeover's ledger.
    adopted: bool = False
    #: Devices the new claim asks for that share a GPU's memory slices with `devices` (dynamic MIG).
    overlapping: tuple[str, ...] = ()


def held_devices(entry: ClaimEntry) -> set[str]:
    """The devices an entry holds: those it was prepared with and those its steps' records hold (the
    devices whose settings it changed, the dynamic MIG placements it recorded: a started prepare may have
    created their MIG devices)."""
    return entry.held_devices()


def no_overlap(device_name: str) -> AbstractSet[str]:
    """No device overlaps another of a different name (no dynamic MIG)."""
    return frozenset()


#: The share ids of one claim's results on one device (None: a result of the whole device).
Shares = Collection[str | None]


def shares_overlap(ours: Shares, theirs: Shares) -> bool:
    """Whether consumable shares let two claims hold one device: every result of both on it carries a
    `shareID` (the scheduler allocated each its own share of a device published with
    `allowMultipleAllocations`), and no share id is in both."""
    if not ours or not theirs or None in ours or None in theirs:
        return False
    return not set(ours) & set(theirs)


def share_conflict(device: str, ours: Shares, theirs: Shares) -> str | None:
    """Why consumable shares do not allow the overlap on `device` when either claim has a share of it
    (None when neither has one, or when they allow it)."""
    if shares_overlap(ours, theirs) or not {s for s in (*ours, *theirs) if s is not None}:
        return None
    same = sorted({s for s in ours if s is not None} & {s for s in theirs if s is not None})
    if same:
        return f"share(s) {', '.join(same)} of device {device} are allocated to both claims"
    if None in theirs or not theirs:
        return f"device {device} is held whole by that claim; a share of it overlaps only other shares"
    return f"this claim is allocated device {device} whole; it overlaps that claim's share(s) of it"


def _shares_by_device(devices: Iterable[tuple[str, str | None]]) -> dict[str, list[str | None]]:
    shares: dict[str, list[str | None]] = {}
    for name, share in devices:
        shares.setdefault(name, []).append(share)
    return shares


def find_holders(
    ref: ClaimRef,
    allocated: Sequence[AllocatedDevice],
    others: Iterable[ClaimEntry],
    *,
    admin: AbstractSet[str] = frozenset(),
    tolerated: frozenset[str] = frozenset(),
    adopted: AbstractSet[str] = frozenset(),
    overlapping: Callable[[str], AbstractSet[str]] = no_overlap,
) -> list[Holder]:
    """The other entries holding devices of `allocated` where the overlap is not allowed.

    Allowed: a device the new claim has with admin access (`admin`), a holder whose UID is in
    `tolerated` (checked live and holding it with admin access), a device of which both claims hold
    distinct consumable shares (`shares_overlap`), and a device the new claim asks a sharing strategy
    for, as long as `check_conflicts` accepts its setting next to the holder's; a sharing strategy never
    next to a holder adopted from NVIDIA's plugin (UIDs `adopted`: its settings are not known).
    A held device that shares a GPU's memory slices with a wanted one (`overlapping`: device name ->
    the other devices it shares them with; dynamic MIG) blocks unless the wanted one has admin access.
    """
    wanted = {a.device.name for a in allocated}
    shared_ok = {a.device.name for a in allocated if a.sharing.strategy is not None}
    ours = _shares_by_device((a.device.name, a.share_id) for a in allocated)
    plan = plan_for(ref.uid, allocated)
    #: Device of another GPU partition -> the wanted devices (without admin access) it overlaps.
    near: dict[str, set[str]] = {}
    for name in sorted(wanted - admin):
        for other_name in overlapping(name):
            near.setdefault(other_name, set()).add(name)
    holders: list[Holder] = []
    for other in others:
        if other.uid == ref.uid or other.uid in tolerated:
            continue
        held = held_devices(other)
        overlap = (held & wanted) - admin
        crossing = held & near.keys()
        if not overlap and not crossing:
            continue
        theirs = _shares_by_device((d.device_name, d.share_id) for d in other.devices)
        distinct_shares = {n for n in overlap if shares_overlap(ours[n], theirs.get(n, ()))}
        is_adopted = other.uid in adopted
        blocked = (overlap if is_adopted else overlap - shared_ok) - distinct_shares
        conflict = None
        if is_adopted and overlap & shared_ok:
            conflict = "NVIDIA's plugin prepared it with sharing settings this driver does not share"
        shares = [c for n in sorted(blocked) if (c := share_conflict(n, ours[n], theirs.get(n, ())))]
        if conflict is None and shares:
            conflict = "; ".join(shares)
        if overlap and not blocked and not crossing:
            try:
                check_conflicts(plan, [SharingRecord.of(other)], f"{ref.namespace}/{ref.name}")
            except ClaimError as exc:
                conflict, blocked = str(exc), overlap
        if blocked or crossing:
            holders.append(
                Holder(
                    other,
                    tuple(sorted(blocked | crossing)),
                    conflict,
                    is_adopted,
                    tuple(sorted({w for h in crossing for w in near[h]})),
                )
            )
    return holders


class DevicesHeld(ClaimError):
    """A prepare met devices held by other claims' entries (`holders`), not checked against the API yet."""

    def __init__(self, ref: ClaimRef, holders: Sequence[Holder]) -> None:
        self.ref = ref
        self.holders = tuple(holders)
        super().__init__("; ".join(held_error(ref, h, live=False) for h in holders))


def held_error(ref: ClaimRef, holder: Holder, *, live: bool = True, failure: str = "") -> str:
    """The per-claim error of a prepare whose devices another claim holds, naming both claims; `live`
    False: the holder could not be checked (`failure`: why), so kubelet's retry checks it again."""
    devices = ", ".join(holder.devices)
    other = holder.entry
    state = "which still exists and is allocated them"
    if not live:
        state = "which could not be checked against the API server" + (f" ({failure})" if failure else "")
    by = " by NVIDIA's plugin (adopted)" if holder.adopted else ""
    text = (
        f"claim {ref.namespace}/{ref.name} (uid {ref.uid}): device(s) {devices} are prepared on this "
        f"node{by} for claim {label(other) if checkable(other) else '<unnamed>'} (uid {other.uid}), {state}"
    )
    if holder.conflict:
        text += f" ({holder.conflict})"
    if holder.overlapping:
        text += (
            f" (they share a GPU's memory slices with {', '.join(holder.overlapping)} asked for here: a GPU "
            "and its MIG devices, or MIG devices with a memory slice in common, are never prepared together)"
        )
    return (
        text + "; a device is prepared for one claim at a time unless admin access, a sharing strategy or "
        "distinct consumable shares allow it"
    )
