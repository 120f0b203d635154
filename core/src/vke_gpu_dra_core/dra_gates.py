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

1.37 makes DRADeviceTaints GA (locked in 1.38) and DRAExtendedResource GA and locked. `OTHER_RELEASES` has
the DRA gates that keep no slice field (admin access, prioritized list, device taint rules, claim device
status, fractional capacity ranges, the claims kubelet's PodResources API names), `LOCKED_SINCE` the
releases that lock a gate to its default.

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
# Gates that keep no ResourceSlice field but change what the API server accepts or the scheduler does.
ADMIN_ACCESS: Final = "DRAAdminAccess"
PRIORITIZED_LIST: Final = "DRAPrioritizedList"
DEVICE_TAINT_RULES: Final = "DRADeviceTaintRules"
RESOURCE_CLAIM_DEVICE_STATUS: Final = "DRAResourceClaimDeviceStatus"
#: milli-unit `requestPolicy.validRange` min/max/step; the API server and the allocator compute in milli
#: units when a range is fractional. New in 1.37 (no earlier release knows it), beta, but on by default only
#: with `--min-compatibility-version` 1.37 (its spec's MinCompatibilityVersion): a 1.37 binary defaults to
#: 1.36, so a default 1.37 control plane has it off (a real v1.37.2 scheduler rounds in whole units).
FRACTIONAL_CAPACITY_RANGE: Final = "DRAFractionalCapacityRange"
#: kubelet: its PodResources API names the claims each container uses (KEP-3695), read by the driver
#: to name claims adopted from NVIDIA's plugin without a namespace/name (node-local, no API grant)
KUBELET_POD_RESOURCES_CLAIMS: Final = "KubeletPodResourcesDynamicResources"

#: Gate -> (first release, alpha and off; first release on by default, beta).
RELEASES: Final[Mapping[str, tuple[tuple[int, int], tuple[int, int]]]] = {
    DEVICE_TAINTS: ((1, 33), (1, 36)),
    CONSUMABLE_CAPACITY: ((1, 34), (1, 36)),
    BINDING_CONDITIONS: ((1, 34), (1, 36)),
    PARTITIONABLE_DEVICES: ((1, 33), (1, 36)),
    EXTENDED_RESOURCE: ((1, 34), (1, 36)),
}

#: The other DRA gates: gate -> (first release, first release on by default); kubernetes
#: `pkg/features/kube_features.go` of v1.37.2. DRADeviceTaintRules was alpha in 1.35, beta and off in 1.36.
OTHER_RELEASES: Final[Mapping[str, tuple[tuple[int, int], tuple[int, int]]]] = {
    ADMIN_ACCESS: ((1, 32), (1, 34)),
    PRIORITIZED_LIST: ((1, 33), (1, 34)),
    DEVICE_TAINT_RULES: ((1, 35), (1, 37)),
    RESOURCE_CLAIM_DEVICE_STATUS: ((1, 32), (1, 33)),
    FRACTIONAL_CAPACITY_RANGE: ((1, 37), (1, 38)),  # on with the default min compatibility version 1.37
    KUBELET_POD_RESOURCES_CLAIMS: ((1, 27), (1, 34)),
}

#: Gate -> first release that locks it to its default (GA, `LockToDefault`): `--feature-gates` cannot
#: change it there. DRADeviceTaints and DRADeviceTaintRules are GA in 1.37 but lock only in 1.38.
LOCKED_SINCE: Final[Mapping[str, tuple[int, int]]] = {
    ADMIN_ACCESS: (1, 36),
    PRIORITIZED_LIST: (1, 37),
    EXTENDED_RESOURCE: (1, 37),
    RESOURCE_CLAIM_DEVICE_STATUS: (1, 37),
    KUBELET_POD_RESOURCES_CLAIMS: (1, 36),
}

#: The optional ResourceSlice fields (by the name the driver logs and exports) and the gate each needs.
SLICE_FIELDS: Final[Mapping[str, str]] = {
    "taints": DEVICE_TAINTS,
    "allowMultipleAllocations": CONSUMABLE_CAPACITY,
    "bindingConditions": BINDING_CONDITIONS,
    "sharedCounters": PARTITIONABLE_DEVICES,
}


def _releases(gate: str) -> tuple[tuple[int, int], tuple[int, int]]:
    return RELEASES[gate] if gate in RELEASES else OTHER_RELEASES[gate]


def on_by_default(gate: str, version: tuple[int, int]) -> bool:
    """Whether `gate` is on by default in Kubernetes `version` (major, minor)."""
    return version >= _releases(gate)[1]


def exists(gate: str, version: tuple[int, int]) -> bool:
    """Whether `version` knows the gate at all (from its alpha); an older server has none of its fields."""
    return version >= _releases(gate)[0]


def locked(gate: str, version: tuple[int, int]) -> bool:
    """Whether `version` locks `gate` to its default (GA with LockToDefault)."""
    return gate in LOCKED_SINCE and version >= LOCKED_SINCE[gate]


def slice_fields_kept(version: tuple[int, int], extra_gates: frozenset[str] = frozenset()) -> frozenset[str]:
    """The SLICE_FIELDS a server of `version` keeps by default (plus those of `extra_gates` turned on)."""
    return frozenset(
        name
        for name, gate in SLICE_FIELDS.items()
        if on_by_default(gate, version) or (gate in extra_gates and exists(gate, version))
    )
