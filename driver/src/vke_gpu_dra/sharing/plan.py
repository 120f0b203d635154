"""What a claim asks of its GPUs, checked against the other claims prepared on the node (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, Device, PreparedDevice

from ..claims.checkpoint import HoldsRecords
from ..opaque_config import MpsSettings
from .mps import daemon_id
from .records import MpsRecord, SharingRecord

if TYPE_CHECKING:
    from ..allocation import AllocatedDevice


class OtherClaim(HoldsRecords, Protocol):
    """Another claim prepared on this node, as its checkpoint entry holds it (its sharing record:
    `SharingRecord.of`)."""

    @property
    def devices(self) -> Sequence[PreparedDevice]: ...


@dataclass(frozen=True)
class TimeSlice:
    """The `--set-timeslice` value a claim asks for one full GPU."""

    device: Device
    value: int


@dataclass(frozen=True)
class MpsGroup:
    """The devices one MPS config applies to in a claim, with its settings and the config's label."""

    devices: tuple[Device, ...]
    settings: MpsSettings
    label: str

    @property
    def uuids(self) -> list[str]:
        return [d.uuid for d in self.devices]


@dataclass(frozen=True)
class Plan:
    """What one claim asks: a time-slice value per full GPU, MPS groups."""

    claim_uid: str
    timeslice: tuple[TimeSlice, ...] = ()
    mps: tuple[MpsGroup, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.timeslice or self.mps)

    @property
    def record(self) -> SharingRecord:
        """What the checkpoint keeps of this plan, written before anything is changed (so a crash can
        still undo it)."""
        return SharingRecord(
            {ts.device.name: ts.value for ts in self.timeslice},
            tuple(
                MpsRecord(daemon_id(self.claim_uid, g.uuids), tuple(d.name for d in g.devices))
                for g in self.mps
            ),
        )


def plan_claim(ref: ClaimRef, allocated: Sequence[AllocatedDevice], others: Iterable[OtherClaim]) -> Plan:
    """The plan of a claim's devices; ClaimError when it conflicts with another prepared claim."""
    plan = plan_for(ref.uid, allocated)
    if plan:
        check_conflicts(plan, [SharingRecord.of(o) for o in others], f"{ref.namespace}/{ref.name}")
    return plan


def plan_for(claim_uid: str, allocated: Sequence[AllocatedDevice]) -> Plan:
    """The Plan of a claim's AllocatedDevices (simulated devices have nothing to set)."""
    timeslice: dict[str, TimeSlice] = {}
    groups: dict[int, tuple[list[Device], MpsSettings, str]] = {}
    for a in allocated:
        if a.device.simulated or a.sharing.strategy is None:
            continue
        if a.sharing.timeslice is not None:
            timeslice[a.device.name] = TimeSlice(a.device, a.sharing.timeslice)
        if a.sharing.mps is not None:
            key = id(a.config)
            label = a.config.label if a.config is not None else "default config"
            devices, _, _ = groups.setdefault(key, ([], a.sharing.mps, label))
            if a.device not in devices:
                devices.append(a.device)
    return Plan(
        claim_uid,
        tuple(timeslice[name] for name in sorted(timeslice)),
        tuple(MpsGroup(tuple(d), s, lbl) for d, s, lbl in groups.values()),
    )


def check_conflicts(plan: Plan, others: Iterable[SharingRecord], label: str) -> None:
    """A GPU shared with another prepared claim keeps one setting: refuse a different one."""
    for other in others:
        for ts in plan.timeslice:
            name = ts.device.name
            theirs = other.timeslice.get(name)
            if theirs is not None and theirs != ts.value:
                raise ClaimError(
                    f"claim {label}: device {name} is shared with another prepared claim that set "
                    f"time-slice {theirs}; this claim asks for {ts.value} (one setting per GPU)"
                )
            if any(name in m.devices for m in other.mps):
                raise ClaimError(f"claim {label}: device {name} is in use by another claim's MPS daemon")
        for group in plan.mps:
            for device in group.devices:
                if device.name in other.timeslice or any(device.name in m.devices for m in other.mps):
                    raise ClaimError(
                        f"claim {label}: device {device.name} is shared with another prepared claim; "
                        "MPS needs it alone (compute mode EXCLUSIVE_PROCESS)"
                    )


def devices_in_use(others: Iterable[OtherClaim]) -> set[str]:
    """The devices (by name) other prepared claims hold or changed: their settings stay."""
    used: set[str] = set()
    for other in others:
        used.update(d.device_name for d in other.devices)
        used.update(SharingRecord.of(other).device_names())
    return used
