"""What a claim changed on this node's GPUs, as its checkpoint entry keeps it (pure data and JSON): the
sharing step's record, under the step's name (`STEP`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from ..claims.checkpoint import HoldsRecords

#: The sharing step's name: the key of its record in a claim's entry.
STEP: Final = "sharing"


@dataclass(frozen=True)
class MpsRecord:
    """One MPS control daemon a claim started, and the devices (by name) it serves."""

    daemon_id: str
    devices: tuple[str, ...]


@dataclass(frozen=True)
class SharingRecord:
    """What one claim changed on this node; kept in its checkpoint entry."""

    #: device name -> time-slice value set on that full GPU.
    timeslice: Mapping[str, int] = field(default_factory=dict)
    mps: tuple[MpsRecord, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.timeslice or self.mps)

    def device_names(self) -> set[str]:
        """Every device (by name) whose setting this record changed."""
        return {*self.timeslice, *(name for m in self.mps for name in m.devices)}

    def held_devices(self) -> set[str]:
        """A claim holds the devices whose settings it changed until its entry goes."""
        return self.device_names()

    @classmethod
    def of(cls, claim: HoldsRecords | None) -> SharingRecord:
        """The record `claim` keeps (an empty one when it changed no GPU's settings, or for no claim)."""
        record = None if claim is None else claim.record(STEP)
        return record if isinstance(record, SharingRecord) else cls()

    def to_json(self) -> dict[str, Any]:
        return {
            "timeslice": dict(sorted(self.timeslice.items())),
            "mps": [{"daemonId": m.daemon_id, "devices": list(m.devices)} for m in self.mps],
        }

    @classmethod
    def from_json(cls, data: Any, where: str = STEP) -> SharingRecord:
        if not isinstance(data, Mapping) or set(data) - {"timeslice", "mps"}:
            raise ValueError(f"{where} must be an object with timeslice and mps, got {data!r}")
        ts = data.get("timeslice", {})
        if not isinstance(ts, Mapping) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in ts.items()
        ):
            raise ValueError(f"{where}.timeslice must map device names to integers, got {ts!r}")
        mps = []
        for raw in data.get("mps", []):
            if not (
                isinstance(raw, Mapping)
                and isinstance(raw.get("daemonId"), str)
                and isinstance(raw.get("devices"), list)
                and all(isinstance(d, str) for d in raw["devices"])
            ):
                raise ValueError(f"{where}.mps entries need daemonId and devices, got {raw!r}")
            mps.append(MpsRecord(raw["daemonId"], tuple(raw["devices"])))
        return cls(dict(ts), tuple(mps))
