"""Feature gates, spelled and parsed as NVIDIA's plugin (and every Kubernetes component) does.

`--feature-gates` / `FEATURE_GATES` takes `Name=true,Other=false`; empty entries (the chart renders a
trailing comma) are ignored, values are Go booleans (`true`, `1`, `T`, `false`, ...). Unknown names
are one error that lists the known gates. The gates NVIDIA's 25.8.1 plugin knows are all accepted so
that values written for it work here; only the sharing gates change this driver's behaviour.
`ConsumableShares` (NVIDIA's newest plugin: devices published with `allowMultipleAllocations` and a
memory capacity with a `requestPolicy`, so several claims share one GPU's memory) excludes MPS sharing:
NVIDIA refuses MPS on a plugin with consumable shares, and so does `conflicts()`.
`DynamicMIG` (NVIDIA's newest plugin: MIG devices created at prepare and destroyed at unprepare, every
placement published as a partitionable device) is refused with `MPSSupport`, as NVIDIA's validation does
(NVIDIA also refuses it with `PassthroughSupport` and `NVMLDeviceHealthCheck`, gates this driver does not
have).
`DeviceMetadata` (NVIDIA's plugin, alpha, off: KEP-5304) writes, for every request of a claim prepared
while it is on, a JSON file of the request's devices and their attributes, mounted read-only into the
containers that use the request (driver/docs/devices.md, "Device metadata in containers").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

TIME_SLICING_SETTINGS: Final = "TimeSlicingSettings"
MPS_SUPPORT: Final = "MPSSupport"
CONSUMABLE_SHARES: Final = "ConsumableShares"
#: NVIDIA's gate for MIG devices created on demand, published as partitionable devices (KEP-4815).
DYNAMIC_MIG: Final = "DynamicMIG"
#: NVIDIA's gate for device metadata files mounted into containers (KEP-5304).
DEVICE_METADATA: Final = "DeviceMetadata"

#: Gate -> default, as in NVIDIA's pkg/featuregates (project gates plus the Kubernetes logging gates it
#: registers, ContextualLogging switched on by NVIDIA). Only the first five have an effect here.
DEFAULTS: Final[Mapping[str, bool]] = {
    TIME_SLICING_SETTINGS: False,
    MPS_SUPPORT: False,
    CONSUMABLE_SHARES: False,
    DYNAMIC_MIG: False,
    DEVICE_METADATA: False,
    "IMEXDaemonsWithDNSNames": True,
    "ContextualLogging": True,
    "LoggingAlphaOptions": False,
    "LoggingBetaOptions": True,
}

_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class FeatureGateError(ValueError):
    """A feature-gate string that cannot be parsed; the message says what is allowed."""


@dataclass(frozen=True)
class FeatureGates:
    """The enabled state of every known gate (defaults unless set)."""

    values: Mapping[str, bool] = field(default_factory=lambda: dict(DEFAULTS))

    def enabled(self, name: str) -> bool:
        if name not in DEFAULTS:
            raise KeyError(f"unknown feature gate {name}")
        return bool(self.values.get(name, DEFAULTS[name]))

    @property
    def time_slicing(self) -> bool:
        return self.enabled(TIME_SLICING_SETTINGS)

    @property
    def mps(self) -> bool:
        return self.enabled(MPS_SUPPORT)

    @property
    def consumable_shares(self) -> bool:
        return self.enabled(CONSUMABLE_SHARES)

    @property
    def dynamic_mig(self) -> bool:
        return self.enabled(DYNAMIC_MIG)

    @property
    def device_metadata(self) -> bool:
        return self.enabled(DEVICE_METADATA)

    def render(self) -> str:
        """Every gate as `Name=bool,...` (sorted), the form the MPS daemon's FEATURE_GATES gets."""
        return ",".join(f"{k}={'true' if self.enabled(k) else 'false'}" for k in sorted(DEFAULTS))


def conflicts(values: Mapping[str, bool]) -> str | None:
    """Why a set of gates cannot run together (None when it can): MPS with consumable shares, MPS
    with dynamic MIG."""

    def on(name: str) -> bool:
        return bool(values.get(name, DEFAULTS[name]))

    if on(CONSUMABLE_SHARES) and on(MPS_SUPPORT):
        return (
            f"{CONSUMABLE_SHARES}=true and {MPS_SUPPORT}=true: MPS sharing is not supported when "
            "consumable shares is enabled (as in NVIDIA's plugin); enable one of them"
        )
    if on(DYNAMIC_MIG) and on(MPS_SUPPORT):
        return (
            f"{DYNAMIC_MIG}=true and {MPS_SUPPORT}=true: the two are mutually exclusive (as in NVIDIA's "
            "plugin); enable one of them"
        )
    return None


def parse(text: str) -> FeatureGates:
    """Parse `Name=bool,...`; raise FeatureGateError naming the first bad entry."""
    return FeatureGates({**DEFAULTS, **parse_explicit(text)})


def parse_explicit(text: str) -> dict[str, bool]:
    """Only the gates `text` sets (what a chart's `featureGates` value carries)."""
    values: dict[str, bool] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, value = entry.partition("=")
        name, value = name.strip(), value.strip()
        if not name:
            raise FeatureGateError(f"missing gate name in {entry!r} (write Name=true, e.g. MPSSupport=true)")
        if not sep:
            raise FeatureGateError(f"missing bool value for {name} (write {name}=true or {name}=false)")
        if name not in DEFAULTS:
            raise FeatureGateError(
                f"unrecognized feature gate: {name} (known: {', '.join(sorted(DEFAULTS))})"
            )
        if value in _TRUE:
            values[name] = True
        elif value in _FALSE:
            values[name] = False
        else:
            raise FeatureGateError(f"invalid value of {name}={value}: must be true or false")
    return values
