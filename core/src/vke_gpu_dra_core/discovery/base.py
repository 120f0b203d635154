"""The contract every discovery source implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ..device_model import Device


@dataclass(frozen=True)
class DiscoveryResult:
    """Devices found on this node, and one line per problem that left something out."""

    devices: list[Device]
    problems: list[str] = field(default_factory=list)
    #: The driver's version as NVML reports it (`535.104.05`, not normalised); None when unknown.
    driver_version: str | None = None


class DiscoveryError(Exception):
    """Discovery cannot run at all (library missing, driver not loaded); the message is for the operator."""


@runtime_checkable
class DeviceSource(Protocol):
    def discover(self) -> DiscoveryResult: ...
