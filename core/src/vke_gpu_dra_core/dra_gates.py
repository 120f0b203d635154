"""The Kubernetes DRA feature gates that decide which fields an API server keeps, per release.

From kubernetes `pkg/features/kube_features.go` (versioned specs). Each was alpha (off by default) from
its first release and is beta, on by default, from 1.36; with a gate off the API server drops its fields
silently. VKE does not change DRA gates, so the release decides; the driver still checks its own server
with dry-runs at start (a server may be run with other gates, or with `--emulated-version`).

| gate | fields | alpha, off | beta, on |
|---|---|---|---|
| DRADeviceTaints | ResourceSlice `devices[].taints` | 1.33 | 1.36 |
| DRAConsumableCapacity | `allowMultipleAllocations`, `requestPolicy`; requests' `capacity` | 1.34 | 1.36 |
| DRADeviceBindingConditions | `bindsToNode`, `bindingConditions`, `bindingFailureConditions` | 1.34 | 1.36 |
| DRAPartitionableDevices | `sharedCounters`, `devices[].consumesCounters` | 1.33 | 1.36 |
| DRAExtendedResource | DeviceClass `extendedResourceName` | 1.34 | 1.36 |

The capacity planner's version table, the stack config (`cluster.kubernetesVersion`) and the tests' fake
API server read this one table; the driver names the ResourceSlice fields it detects as `SLICE_FIELDS` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

DEVICE_TAINTS: Final = "DRADeviceTaints"
CONSUMABLE_CAPACITY: Final = "DRAConsumableCapacity"
BINDING_CONDITIONS: Final = "DRADeviceBindingConditions"
PARTITIONABLE_DEVICES: Final = "DRAPartitionableDevices"
EXTENDED_RESOURCE: Final = "DRAExtendedResource"

#: Gate -> (first release, alpha and off; first release on by default, beta).
RELEASES: Final[Mapping[str, tuple[tuple[int, int], tuple[int, int]]]] = {
    DEVICE_TAINTS: ((1, 33), (1, 36)),
    CONSUMABLE_CAPACITY: ((1, 34), (1, 36)),
    BINDING_CONDITIONS: ((1, 34), (1, 36)),
    PARTITIONABLE_DEVICES: ((1, 33), (1, 36)),
    EXTENDED_RESOURCE: ((1, 34), (1, 36)),
}

#: The optional ResourceSlice fields (by the name the driver logs and exports) and the gate each needs.
SLICE_FIELDS: Final[Mapping[str, str]] = {
    "taints": DEVICE_TAINTS,
    "allowMultipleAllocations": CONSUMABLE_CAPACITY,
    "bindingConditions": BINDING_CONDITIONS,
    "sharedCounters": PARTITIONABLE_DEVICES,
}


def on_by_default(gate: str, version: tuple[int, int]) -> bool:
    """Whether `gate` is on by default in Kubernetes `version` (major, minor)."""
    return version >= RELEASES[gate][1]


def exists(gate: str, version: tuple[int, int]) -> bool:
    """Whether `version` knows the gate at all (from its alpha); an older server has none of its fields."""
    return version >= RELEASES[gate][0]


def slice_fields_kept(version: tuple[int, int], extra_gates: frozenset[str] = frozenset()) -> frozenset[str]:
    """The SLICE_FIELDS a server of `version` keeps by default (plus those of `extra_gates` turned on)."""
    return frozenset(
        name
        for name, gate in SLICE_FIELDS.items()
        if on_by_default(gate, version) or (gate in extra_gates and exists(gate, version))
    )
