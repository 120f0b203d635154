"""What the checkpoint keeps of a claim's dynamic MIG devices.

A record is written with the claim's PrepareStarted entry, before the MIG device is created: its
placement (parent GPU, GPU-instance profile id, start) is what owns a GPU instance, so an instance a
crash left between the create and the next checkpoint write still has an owner. The ids and the MIG
UUID are filled in by the create and written with the PrepareCompleted entry.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from ..claims.checkpoint import HoldsRecords

#: The dynamic MIG step's name: the key of its record (`MigDevices`) in a claim's entry.
STEP: Final = "partitions"

_FIELDS: Final = {"device", "parentUUID", "parentMinor", "profileId", "start", "size"}
_OPTIONAL: Final = {"giId", "ciId", "uuid", "capsNodes"}


@dataclass(frozen=True)
class MigRecord:
    """One MIG device of a claim: the allocated placement device and, once created, its instance."""

    device: str
    parent_uuid: str
    parent_minor: int
    profile_id: int
    start: int
    size: int
    gi_id: int | None = None
    ci_id: int | None = None
    uuid: str | None = None
    caps_nodes: tuple[str, ...] = ()

    @property
    def created(self) -> bool:
        return self.uuid is not None

    def owns(self, parent_uuid: str, profile_id: int, start: int) -> bool:
        """True when this record's placement is the GPU instance (`parent_uuid`, `profile_id`, `start`)."""
        return (self.parent_uuid, self.profile_id, self.start) == (parent_uuid, profile_id, start)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "device": self.device,
            "parentUUID": self.parent_uuid,
            "parentMinor": self.parent_minor,
            "profileId": self.profile_id,
            "start": self.start,
            "size": self.size,
        }
        if self.uuid is not None:
            data.update(giId=self.gi_id, ciId=self.ci_id, uuid=self.uuid, capsNodes=list(self.caps_nodes))
        return data

    @classmethod
    def from_json(cls, data: Any, where: str) -> MigRecord:
        if not isinstance(data, Mapping):
            raise ValueError(f"{where} must be an object, got {type(data).__name__}")
        missing = sorted(_FIELDS - set(data))
        unknown = sorted(set(data) - _FIELDS - _OPTIONAL)
        if missing or unknown:
            raise ValueError(
                f"{where}: missing field(s) {', '.join(missing) or '-'}, unknown field(s) "
                f"{', '.join(unknown) or '-'}; allowed: {', '.join(sorted(_FIELDS | _OPTIONAL))}"
            )

        def whole(key: str) -> int:
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{where}.{key}: {value!r}; allowed: a whole number >= 0")
            return value

        def text(key: str) -> str:
            value = data[key]
            if not isinstance(value, str) or not value:
                raise ValueError(f"{where}.{key}: {value!r}; allowed: a non-empty string")
            return value

        created = "uuid" in data
        caps = data.get("capsNodes", [])
        if not isinstance(caps, list) or not all(isinstance(c, str) for c in caps):
            raise ValueError(f"{where}.capsNodes: {caps!r}; allowed: a list of device node paths")
        return cls(
            device=text("device"),
            parent_uuid=text("parentUUID"),
            parent_minor=whole("parentMinor"),
            profile_id=whole("profileId"),
            start=whole("start"),
            size=whole("size"),
            gi_id=whole("giId") if created else None,
            ci_id=whole("ciId") if created else None,
            uuid=text("uuid") if created else None,
            caps_nodes=tuple(caps),
        )


@dataclass(frozen=True)
class MigDevices:
    """The dynamic MIG step's record of a claim: its MIG devices, in the order of its devices."""

    records: tuple[MigRecord, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.records)

    def __iter__(self) -> Iterator[MigRecord]:
        return iter(self.records)

    def held_devices(self) -> set[str]:
        """The placements: a started prepare may have created their MIG devices."""
        return {r.device for r in self.records}

    def uuids(self) -> dict[str, str]:
        """The UUID of each MIG device created, by its placement device's name."""
        return {r.device: r.uuid for r in self.records if r.uuid is not None}

    def to_json(self) -> list[dict[str, Any]]:
        return [r.to_json() for r in self.records]

    @classmethod
    def from_json(cls, data: Any, where: str = STEP) -> MigDevices:
        if not isinstance(data, list):
            raise ValueError(f"{where} must be a list, got {data!r}")
        return cls(tuple(MigRecord.from_json(p, f"{where}[{i}]") for i, p in enumerate(data)))

    @classmethod
    def of(cls, claim: HoldsRecords | None) -> MigDevices:
        """The record `claim` keeps (an empty one when no MIG device was made for it, or for no claim)."""
        record = None if claim is None else claim.record(STEP)
        return record if isinstance(record, MigDevices) else cls()
