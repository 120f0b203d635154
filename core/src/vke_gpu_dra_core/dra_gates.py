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
status, fractional capacity ranges, the claims kubelet's PodResources API names, DRA itself),
`GA_SINCE` the releases that make a gate GA, `LOCKED_SINCE` the releases that lock a gate to its default,
`REMOVED_SINCE` the releases that no longer know a gate.

1.38 (read in the feature-gate table of the toolchain's v1.38.0-beta.0 build, `kube_features.go` and the
servers' `kubernetes_feature_enabled` metric):

| gate | 1.38 |
|---|---|
| DynamicResourceAllocation | removed (kubernetes#141946): a component given it refuses to start |
| DRADeviceTaints, DRADeviceTaintRules | GA, locked on (kubernetes#140256) |
| DRAPartitionableDevices, DRADeviceBindingConditions | GA, locked on |
| DRAConsumableCapacity | GA, on (not locked) |
| DRAFractionalCapacityRange | GA, on by default (no `--min-compatibility-version` needed) |
| DRAAdminAccess, DRAPrioritizedList, DRAExtendedResource | GA, locked, as in 1.37 |
| DRAResourceClaimDeviceStatus | GA, locked, as in 1.37 |

Nothing else DRA graduates in beta.0: DRANodeAllocatableResources and DRAResourcePoolStatus stay alpha,
DRAWorkloadResourceClaims beta and off.

`feature_gates_flag` renders the `--feature-gates` value of a control-plane component: it refuses a gate the
release does not have (or no longer has) and a locked gate set against its lock, and leaves out a locked
gate set to its lock, so no component is given a gate it refuses. The control-plane tier starts every
component of each release with `settable_defaults` rendered that way, and reads the servers' own table.

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
#: DRA itself: GA and on from 1.34, locked from 1.35, removed in 1.38 (kubernetes#141946).
DYNAMIC_RESOURCE_ALLOCATION: Final = "DynamicResourceAllocation"

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
    DYNAMIC_RESOURCE_ALLOCATION: ((1, 26), (1, 34)),
}

#: Gate -> first release that makes it GA (kube_features.go's versioned specs, v1.37.2 and v1.38.0-beta.0).
GA_SINCE: Final[Mapping[str, tuple[int, int]]] = {
    DYNAMIC_RESOURCE_ALLOCATION: (1, 34),
    ADMIN_ACCESS: (1, 36),
    PRIORITIZED_LIST: (1, 36),
    EXTENDED_RESOURCE: (1, 37),
    RESOURCE_CLAIM_DEVICE_STATUS: (1, 37),
    DEVICE_TAINTS: (1, 37),
    DEVICE_TAINT_RULES: (1, 37),
    CONSUMABLE_CAPACITY: (1, 38),
    PARTITIONABLE_DEVICES: (1, 38),
    BINDING_CONDITIONS: (1, 38),
    FRACTIONAL_CAPACITY_RANGE: (1, 38),
    KUBELET_POD_RESOURCES_CLAIMS: (1, 36),
}

#: Gate -> first release that locks it to its default (GA, `LockToDefault`): `--feature-gates` cannot
#: change it there. DRADeviceTaints and DRADeviceTaintRules are GA in 1.37 but lock only in 1.38
#: (kubernetes#140256), as DRAPartitionableDevices and DRADeviceBindingConditions do at their GA.
LOCKED_SINCE: Final[Mapping[str, tuple[int, int]]] = {
    ADMIN_ACCESS: (1, 36),
    PRIORITIZED_LIST: (1, 37),
    EXTENDED_RESOURCE: (1, 37),
    RESOURCE_CLAIM_DEVICE_STATUS: (1, 37),
    KUBELET_POD_RESOURCES_CLAIMS: (1, 36),
    DYNAMIC_RESOURCE_ALLOCATION: (1, 35),
    DEVICE_TAINTS: (1, 38),
    DEVICE_TAINT_RULES: (1, 38),
    PARTITIONABLE_DEVICES: (1, 38),
    BINDING_CONDITIONS: (1, 38),
}

#: Gate -> first release that no longer has it: a component given it there refuses to start
#: ("unrecognized feature gate").
REMOVED_SINCE: Final[Mapping[str, tuple[int, int]]] = {
    DYNAMIC_RESOURCE_ALLOCATION: (1, 38),
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
    """Whether `version` knows the gate at all: from its alpha (an older server has none of its fields)
    until its removal (a newer component refuses the name)."""
    return version >= _releases(gate)[0] and not removed(gate, version)


def removed(gate: str, version: tuple[int, int]) -> bool:
    """Whether `version` no longer has `gate` (REMOVED_SINCE): naming it stops a component."""
    return gate in REMOVED_SINCE and version >= REMOVED_SINCE[gate]


def stage(gate: str, version: tuple[int, int]) -> str:
    """The gate's stage in `version`, as `--feature-gates`' help writes it: ALPHA, BETA, GA or "" (a
    release before the gate or after its removal)."""
    if not exists(gate, version):
        return ""
    if gate in GA_SINCE and version >= GA_SINCE[gate]:
        return "GA"
    return "BETA" if on_by_default(gate, version) or _beta_off(gate, version) else "ALPHA"


#: Gates that were beta and off in some release (off-by-default beta): gate -> those releases.
_BETA_OFF: Final[Mapping[str, frozenset[tuple[int, int]]]] = {
    DEVICE_TAINT_RULES: frozenset({(1, 36)}),
    # beta from its first release; on by default only with --min-compatibility-version 1.37
    FRACTIONAL_CAPACITY_RANGE: frozenset({(1, 37)}),
    DYNAMIC_RESOURCE_ALLOCATION: frozenset({(1, 32), (1, 33)}),
}


def _beta_off(gate: str, version: tuple[int, int]) -> bool:
    return version in _BETA_OFF.get(gate, frozenset())


def known_gates() -> tuple[str, ...]:
    """Every gate of these tables, sorted."""
    return tuple(sorted({*RELEASES, *OTHER_RELEASES}))


class GateError(ValueError):
    """A feature gate a component of some release would refuse; the message says what is allowed."""


def settable_defaults(version: tuple[int, int]) -> dict[str, bool]:
    """Every gate of these tables that `version` has and does not lock, at its default there: what a
    component of that release may be given explicitly without changing anything."""
    return {
        gate: on_by_default(gate, version)
        for gate in known_gates()
        if exists(gate, version) and not locked(gate, version)
    }


def feature_gates_flag(version: tuple[int, int], gates: Mapping[str, bool]) -> str:
    """The `--feature-gates` value (`A=true,B=false`, sorted) that sets `gates` on a kube-apiserver,
    kube-scheduler or kube-controller-manager of `version`; a locked gate set to its lock is left out.

    Raises GateError for a gate these tables do not know, one `version` does not have (not yet, or
    removed: DynamicResourceAllocation in 1.38) and a locked gate set against its lock."""
    release = f"{version[0]}.{version[1]}"
    entries = []
    for gate, on in sorted(gates.items()):
        if gate not in OTHER_RELEASES and gate not in RELEASES:
            raise GateError(
                f"feature gate {gate}: not a DRA gate this table knows; known: {', '.join(known_gates())}"
            )
        if removed(gate, version):
            since = REMOVED_SINCE[gate]
            raise GateError(
                f"feature gate {gate}: removed in Kubernetes {since[0]}.{since[1]}, so a {release} component "
                "refuses to start with it; allowed: leave it out"
            )
        if not exists(gate, version):
            first = _releases(gate)[0]
            raise GateError(
                f"feature gate {gate}: Kubernetes {release} does not have it (from {first[0]}.{first[1]}); "
                "allowed: leave it out"
            )
        default = on_by_default(gate, version)
        if locked(gate, version):
            if on != default:
                lock = str(default).lower()
                raise GateError(
                    f"feature gate {gate}={str(on).lower()}: {gate} is GA and locked to {lock} in Kubernetes "
                    f"{release}; allowed: {gate}={lock} or leave it out"
                )
            continue
        entries.append(f"{gate}={str(on).lower()}")
    return ",".join(entries)


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
