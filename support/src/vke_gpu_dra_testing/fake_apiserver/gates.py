"""The emulated Kubernetes version and its feature gates: which gated fields the server serves, and dropping
those it does not (as the apiserver's dropDisabledFields does)."""

from __future__ import annotations

from typing import Any

from vke_gpu_dra_core import dra_gates

K8S_VERSION = "1.34.0"


def version_tuple(version: str) -> tuple[int, int]:
    major, minor = version.lstrip("v").split(".")[:2]
    return int(major), int(minor)


def taints_served(version: str, feature_gates: set[str]) -> bool:
    """Device taints: beta and on by default from 1.36; alpha (gate off by default) in 1.33-1.35."""
    v = version_tuple(version)
    return v >= (1, 36) or (v >= (1, 33) and "DRADeviceTaints" in feature_gates)


#: Feature gate -> the version that turns it on by default (beta), for the gated fields emulated here.
GATES_ON_BY_DEFAULT = {gate: releases[1] for gate, releases in dra_gates.RELEASES.items()}
#: The first version of each gate (alpha): before it the fields are dropped whatever the gates.
GATES_SINCE = {gate: releases[0] for gate, releases in dra_gates.RELEASES.items()}
#: Device fields per gate (DRADeviceTaints' taints have their own rules, `_taint_fields`).
GATED_DEVICE_FIELDS = {
    "DRAConsumableCapacity": ("allowMultipleAllocations",),
    "DRADeviceBindingConditions": ("bindsToNode", "bindingConditions", "bindingFailureConditions"),
    "DRAPartitionableDevices": ("consumesCounters",),
}


def gate_served(gate: str, version: str, feature_gates: set[str]) -> bool:
    """Whether the emulated server has `gate` on: by default from its beta, or turned on after its alpha."""
    v = version_tuple(version)
    return v >= GATES_ON_BY_DEFAULT[gate] or (v >= GATES_SINCE[gate] and gate in feature_gates)


def _uses(obj: dict[str, Any] | None, gate: str) -> bool:
    """The object already uses a field of `gate` (an update keeps it, as dropDisabledFields does)."""
    spec = (obj or {}).get("spec") or {}
    if gate == "DRAPartitionableDevices" and spec.get("sharedCounters"):
        return True
    devices = spec.get("devices") or []
    if gate == "DRAConsumableCapacity" and any(
        "requestPolicy" in (c or {}) for d in devices for c in (d.get("capacity") or {}).values()
    ):
        return True
    return any(field in d for d in devices for field in GATED_DEVICE_FIELDS.get(gate, ()))


def drop_disabled_fields(
    obj: dict[str, Any], version: str, feature_gates: set[str], old: dict[str, Any] | None = None
) -> None:
    """Remove from a ResourceSlice the fields of gates the server has off (in place)."""
    spec = obj.get("spec") or {}
    devices = spec.get("devices") or []
    for gate, fields in GATED_DEVICE_FIELDS.items():
        if gate_served(gate, version, feature_gates) or _uses(old, gate):
            continue
        for dev in devices:
            for field in fields:
                dev.pop(field, None)
            if gate == "DRAConsumableCapacity":
                for capacity in (dev.get("capacity") or {}).values():
                    if isinstance(capacity, dict):
                        capacity.pop("requestPolicy", None)
        if gate == "DRAPartitionableDevices":
            spec.pop("sharedCounters", None)
