"""Feature-gate defaults of the Kubernetes versions the planner knows, where they change allocation.

From kubernetes `pkg/features/kube_features.go` (versioned specs): the default of each gate in the
version the control plane runs (VKE does not change DRA gates).

| gate | 1.34 | 1.35 | 1.36 | 1.37 | 1.38 |
|---|---|---|---|---|---|
| DRAAdminAccess (adminAccess, namespace label admission) | beta, on | beta, on | GA | GA | GA |
| DRAPrioritizedList (firstAvailable) | beta, on | beta, on | GA | GA | GA |
| DRAConsumableCapacity (capacity, distinctAttr.) | alpha, off | alpha, off | beta, on | beta, on | GA, on |
| DRAExtendedResource (extendedResourceName, pods asking it) | alpha, off | alpha, off | beta, on | GA | GA |
| DRAPartitionableDevices (shared counters) | alpha, off | alpha, off | beta, on | beta, on | GA, locked |
| DRADeviceTaints (request tolerations) | alpha, off | alpha, off | beta, on | GA | GA, locked |
| DRADeviceTaintRules (DeviceTaintRule objects) | - | alpha, off | beta, off | GA, on | GA, locked |
| DRAResourceClaimDeviceStatus (`status.devices`) | beta, on | beta, on | beta, on | GA, locked | GA, locked |
| DRAFractionalCapacityRange (milli-unit `validRange`) | - | - | - | beta, off (see below) | GA, on |

1.38 is v1.38.0-beta.0's table (its servers' feature-gate table, read by the control-plane tier). Its
allocator is modelled as 1.37's with DRAFractionalCapacityRange on: the real v1.38.0-beta.0 scheduler agrees
on every planner case of the control-plane tier; 1.38's other allocator changes (kubernetes#142202,
#141898, #140798, #141307, #141110) have no case yet.

DRAFractionalCapacityRange is beta in 1.37 with two specs: off, and on "if --min-compatibility-version>=1.37".
A 1.37 binary's min compatibility version defaults to 1.36, so a default 1.37 control plane has it off: the
real v1.37.2 scheduler of the control-plane tier rounds requests in whole units (`Value()`) and reports
"request 10E exceeds MaxInt64" from the whole-unit path. A cluster run with --min-compatibility-version=1.37
(or the gate set) is planned with `--kubernetes-feature-gates DRAFractionalCapacityRange=true`.

GA gates locked to their default (DRAAdminAccess from 1.36; DRAPrioritizedList, DRAExtendedResource and
DRAResourceClaimDeviceStatus from 1.37) cannot be overridden, nor can a gate the release does not have.

The allocator itself changed between releases (k8s.io/dynamic-resource-allocation, `structured/internal`:
1.34 runs the "experimental" variant of v0.34, 1.36 and 1.37 the "incubating" one, read in v0.36.2 and
v0.37.2); `FeatureGates.allocator` says which behaviour a release has (`AllocatorRules`):

* combinations, not permutations (`startLocation`, from 1.36): the devices of one request are tried in
  slice order after the one before, so one request never takes the same shared device twice;
* `distinctAttribute` per device (1.37, kubernetes#140600); 1.35 and 1.36 keep one value per request name,
  so a request's later device is compared only with the last device of each request;
* counters released when a candidate is rejected or backtracked (1.37, kubernetes#140431 and #140437);
  before, a device that reserved counters and then failed a constraint kept them for the rest of the
  attempt, and a shared device never gave them back;
* `allocationMode: All` with consumable capacity takes every matching device whose own capacity fits the
  request (1.37, kubernetes#140769): one whose remaining capacity is taken fails the request; before, such
  devices were left out and `All` took the others;
* a capacity request that cannot be represented (past int64, or past the milli range, or finer than 1m
  on the milli path) fails the allocation with an error (1.37, kubernetes#140442, #140702, #140666);
  before, the device was skipped;
* with DRAFractionalCapacityRange on, request policies are computed in milli units (`useMilli`: min, max
  and step exact in milli units, step at least 1m), else in whole units.

1.34 with DRAConsumableCapacity turned on (alpha there), run on the real v1.34.4 (the control-plane tier's
1.34 with the gate on) and read in its allocator (k8s.io/dynamic-resource-allocation v0.34.4,
`internal/experimental`):

* `allocationMode: All` with consumable capacity after another claim took part of a device: Pending, as on
  1.37 (`all_static_capacity`); alone, `All` takes every device;
* `distinctAttribute` keeps one value per request name, as 1.35 and 1.36 do, and compares values by
  pointer: two values are equal only when they are the same device's, so a shareable device is not taken
  twice while it is a request's remembered value (DISTINCT_SAME_DEVICE);
* a capacity request past int64 (`10E`) is read by `Quantity.Value()`, which gives 0 for a value it cannot
  scale: the request consumes 0 and is allocated, recording `memory: 0` (`overflow_zero`). (A request
  written as plain digits past int64 is kept as a decimal, whose `Value()` wraps around instead; the
  planner reads it as 0 too.)

A cluster whose operator turned a gate on or off (`--feature-gates` of the API server and scheduler) is
planned with `with_overrides` (`plan --kubernetes-feature-gates DRAPartitionableDevices=true`: 1.34 with
partitionable devices).

`distinctAttribute` does not follow its gate on 1.34 (`FeatureGates.distinct_attribute`). Run against
real binaries (v1.34.4 and v1.37.2, as the control-plane tier of tests/integration builds and starts them,
default gates) and read in their sources:

* a v1.34.4 API server keeps the field although DRAConsumableCapacity is off: its ResourceClaim and
  ResourceClaimTemplate strategies (`pkg/registry/resource/resourceclaim(template)/strategy.go`) clear it
  with `for _, constaint := range ...Constraints { constaint.DistinctAttribute = nil }`, which clears a
  copy. The v1.34.4 scheduler runs the allocator of k8s.io/dynamic-resource-allocation v0.34.4 that
  DRAResourceClaimDeviceStatus (beta, on since 1.33) selects ("experimental"), which knows the
  constraint, but compares the attribute's values by pointer (`attribute.StringValue ==
  attr.StringValue`), so two devices never collide: it only requires every device of the constraint's
  requests to have the attribute. On the real v1.34.4 a claim for 2 GPUs with `distinctAttribute:
  gpu.nvidia.com/productName` (4 equal L20s per node) got gpu-0 and gpu-1; one naming an attribute the
  devices lack stayed Pending. With the gate turned on, 1.34 runs the same allocator (read in its
  source, and now run): values are compared by pointer, so only the same device collides (a shareable
  device, see above). (With DRAResourceClaimDeviceStatus turned off, which the planner does not model, a
  1.34 scheduler would pick an allocator that fails the constraint.)
* v1.37.2 clears the field by index (`pkg/api/resourceclaimspec/util.go`), so with the gate off the
  empty constraint is refused (`matchAttribute: Required value`); its allocator compares values (the
  productName claim above stays Pending there).
* 1.35 (not run here; inferred from upstream's history): the strategy fix is kubernetes#134962
  ("Fix setting distinctAttribute=nil when DRAConsumableCapacity is disabled"), listed in the
  CHANGELOG of v1.35.0-alpha.3 and of v1.35.0 and in no 1.34 patch release up to v1.34.7; the value
  comparison fix is kubernetes#135022 (merged November 2025, before 1.35's code freeze). So 1.35 refuses
  the field with its gate off, as before, and compares values when an operator turns the gate on.

Other fields of DRAConsumableCapacity (requests' `capacity`, devices' `allowMultipleAllocations` and
`requestPolicy`) are dropped on 1.34 as the gate says (the strategy drops them by index).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Final

from vke_gpu_dra_core import dra_gates
from vke_gpu_dra_core.config import KEYS_BY_NAME
from vke_gpu_dra_core.versions import format_version, parse_major_minor

#: The version a stack that names none runs: the program's default (the config key's).
DEFAULT_VERSION: Final = str(KEYS_BY_NAME["cluster.kubernetesVersion"].default)

# What the API server and the scheduler do with a claim's `distinctAttribute` constraint
# (`FeatureGates.distinct_attribute`):
#: the API server drops the field, and refuses the empty constraint left behind;
DISTINCT_DROPPED: Final = "dropped"
#: kept, and every device of the constraint's requests needs the attribute, values not compared (1.34);
DISTINCT_PRESENT: Final = "present"
#: kept, and the devices of the constraint's requests have the attribute with pairwise distinct values.
DISTINCT_ENFORCED: Final = "enforced"

#: kept and compared, but one value per request name (1.35, 1.36): a request's next device replaces its
#: previous value, and backtracking one device forgets the request's value.
DISTINCT_PER_REQUEST: Final = "per-request"
#: kept, one value per request name as in 1.35 and 1.36, but compared by pointer (1.34 with
#: DRAConsumableCapacity on): two values are equal only when they are the same device's, so a shareable
#: device is not taken again while it is a request's remembered value, and other devices always pass.
DISTINCT_SAME_DEVICE: Final = "same-device"

#: Releases that keep `distinctAttribute` whatever DRAConsumableCapacity says and compare no values:
#: the strategy clears a copy, the allocator compares pointers (see the module docstring).
_DISTINCT_KEPT_UNCOMPARED: Final = frozenset({(1, 34)})
#: The first release whose allocator compares `distinctAttribute` per device (kubernetes#140600).
_DISTINCT_PER_DEVICE_SINCE: Final = (1, 37)
#: The first release whose allocator searches combinations (`startLocation`).
_COMBINATIONS_SINCE: Final = (1, 36)
#: The first release with the 1.37 allocator fixes (counter rollback, `All` with capacity, capacity errors).
_FIXES_SINCE: Final = (1, 37)


@dataclass(frozen=True)
class AllocatorRules:
    """How a release's allocator behaves where releases differ (see the module docstring)."""

    #: devices of one request tried after the previous one (`startLocation`), not from the start
    combinations: bool
    #: counters released when a candidate is rejected or backtracked (shared devices included)
    counter_rollback: bool
    #: `All` with capacity: every selectable device whose own capacity fits, remaining capacity checked later
    all_static_capacity: bool
    #: an unrepresentable capacity request is an error (else the device is skipped)
    capacity_errors: bool
    #: DRAFractionalCapacityRange: milli-unit arithmetic for request policies
    fractional: bool
    #: a request past int64 is read as 0 (`Quantity.Value()` of 1.34's allocator): it consumes 0 and fits
    overflow_zero: bool = False


@dataclass(frozen=True)
class FeatureGates:
    version: str
    admin_access: bool
    prioritized_list: bool
    consumable_capacity: bool
    partitionable_devices: bool
    device_taints: bool
    extended_resource: bool = False
    device_taint_rules: bool = False
    resource_claim_device_status: bool = True
    fractional_capacity_range: bool = False

    #: gates set explicitly (the operator's --feature-gates), by name
    overrides: tuple[tuple[str, bool], ...] = ()

    def by_name(self) -> dict[str, bool]:
        """Each gate the planner knows, by its Kubernetes name: on or off in this cluster."""
        return {gate: getattr(self, name) for gate, name in _FIELDS.items()}

    @property
    def distinct_attribute(self) -> str:
        """What this cluster does with `distinctAttribute`: DISTINCT_DROPPED, _PRESENT or _ENFORCED.

        1.34 keeps it and checks only that the devices have the attribute, with the gate on or off (its
        strategy clears a copy, its allocator compares pointers); later releases follow the gate."""
        release = parse_major_minor(self.version) or (0, 0)
        if release in _DISTINCT_KEPT_UNCOMPARED:
            return DISTINCT_SAME_DEVICE if self.consumable_capacity else DISTINCT_PRESENT
        if not self.consumable_capacity:
            return DISTINCT_DROPPED
        return DISTINCT_ENFORCED if release >= _DISTINCT_PER_DEVICE_SINCE else DISTINCT_PER_REQUEST

    @property
    def allocator(self) -> AllocatorRules:
        """What this release's allocator does where releases differ."""
        release = parse_major_minor(self.version) or (0, 0)
        fixed = release >= _FIXES_SINCE
        # 1.34's experimental allocator with the gate, as run on v1.34.4 (1.35's is not modelled apart)
        experimental = release in _DISTINCT_KEPT_UNCOMPARED and self.consumable_capacity
        return AllocatorRules(
            combinations=release >= _COMBINATIONS_SINCE,
            counter_rollback=fixed,
            all_static_capacity=fixed or experimental,
            capacity_errors=fixed,
            fractional=self.fractional_capacity_range,
            overflow_zero=experimental,
        )

    def state(self, gate: str) -> str:
        on = getattr(self, _FIELDS[gate])
        if gate in dict(self.overrides):
            return f"{gate} is turned {'on' if on else 'off'} in this {self.version} cluster"
        return f"{gate} is {'on' if on else 'off'} by default in {self.version}"


_FIELDS: Final = {
    "DRAAdminAccess": "admin_access",
    "DRAPrioritizedList": "prioritized_list",
    dra_gates.CONSUMABLE_CAPACITY: "consumable_capacity",
    dra_gates.PARTITIONABLE_DEVICES: "partitionable_devices",
    dra_gates.DEVICE_TAINTS: "device_taints",
    dra_gates.EXTENDED_RESOURCE: "extended_resource",
    dra_gates.DEVICE_TAINT_RULES: "device_taint_rules",
    dra_gates.RESOURCE_CLAIM_DEVICE_STATUS: "resource_claim_device_status",
    dra_gates.FRACTIONAL_CAPACITY_RANGE: "fractional_capacity_range",
}


def _gates(version: str) -> FeatureGates:
    """The gates of `version`: DRAAdminAccess and DRAPrioritizedList on in every known version, the gates
    that keep fields from core's table (`vke_gpu_dra_core.dra_gates`, which the driver and the stack
    config read too)."""
    v = parse_major_minor(version) or (0, 0)
    return FeatureGates(
        version,
        admin_access=dra_gates.on_by_default(dra_gates.ADMIN_ACCESS, v),
        prioritized_list=dra_gates.on_by_default(dra_gates.PRIORITIZED_LIST, v),
        consumable_capacity=dra_gates.on_by_default(dra_gates.CONSUMABLE_CAPACITY, v),
        partitionable_devices=dra_gates.on_by_default(dra_gates.PARTITIONABLE_DEVICES, v),
        device_taints=dra_gates.on_by_default(dra_gates.DEVICE_TAINTS, v),
        extended_resource=dra_gates.on_by_default(dra_gates.EXTENDED_RESOURCE, v),
        device_taint_rules=dra_gates.on_by_default(dra_gates.DEVICE_TAINT_RULES, v),
        resource_claim_device_status=dra_gates.on_by_default(dra_gates.RESOURCE_CLAIM_DEVICE_STATUS, v),
        fractional_capacity_range=dra_gates.on_by_default(dra_gates.FRACTIONAL_CAPACITY_RANGE, v),
    )


GATES: Final = {version: _gates(version) for version in ("1.34", "1.35", "1.36", "1.37", "1.38")}

#: The newest version with a table; a newer cluster is planned with it.
NEWEST_VERSION: Final = max(GATES, key=lambda v: parse_major_minor(v) or (0, 0))


class VersionError(ValueError):
    """A Kubernetes version the planner has no feature-gate table for."""


def feature_gates(value: Any, where: str = "--kubernetes-version") -> FeatureGates:
    """The gates of `value` (`1.34`, `v1.35.2`, `1.37.2-vke.3`; None: the default version)."""
    if value is None or value == "":
        return GATES[DEFAULT_VERSION]
    parsed = parse_major_minor(str(value))
    key = format_version(parsed) if parsed is not None else None
    if key not in GATES:
        raise VersionError(
            f"{where}: Kubernetes version {value!r} is not known to the planner; allowed: "
            f"{', '.join(GATES)} (major.minor, optionally with a patch or VKE suffix)"
        )
    return GATES[key]


_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def with_overrides(gates: FeatureGates, text: str, where: str = "--kubernetes-feature-gates") -> FeatureGates:
    """`gates` with the Kubernetes gates `text` sets (`Name=true,Other=false`, as `--feature-gates`)."""
    values: dict[str, bool] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, value = (part.strip() for part in entry.partition("="))
        if name not in _FIELDS:
            raise VersionError(
                f"{where}: feature gate {name!r} is not one the planner models; allowed: "
                f"{', '.join(sorted(_FIELDS))}"
            )
        if not sep or value not in _TRUE | _FALSE:
            raise VersionError(f"{where}: {entry!r}; allowed: {name}=true or {name}=false")
        release = parse_major_minor(gates.version) or (0, 0)
        if not dra_gates.exists(name, release):
            raise VersionError(
                f"{where}: feature gate {name} does not exist in Kubernetes {gates.version}; allowed "
                f"there: {', '.join(sorted(g for g in _FIELDS if dra_gates.exists(g, release)))}"
            )
        on = value in _TRUE
        default = getattr(_gates(gates.version), _FIELDS[name])
        if dra_gates.locked(name, release) and on != default:
            raise VersionError(
                f"{where}: {entry!r}; {name} is GA and locked to {str(default).lower()} in Kubernetes "
                f"{gates.version}; allowed: {name}={str(default).lower()} or leave it out"
            )
        values[name] = on
    if not values:
        return gates
    changed: dict[str, Any] = {_FIELDS[name]: on for name, on in values.items()}
    changed["overrides"] = tuple(sorted({**dict(gates.overrides), **values}.items()))
    return replace(gates, **changed)


def nearest_gates(value: Any) -> FeatureGates:
    """The gates of `value`, or of the nearest known version (the stack policy: the kubernetes-version
    policy reports versions before 1.34; a newer one is planned with the newest table)."""
    try:
        return feature_gates(value)
    except VersionError:
        parsed = parse_major_minor(str(value))
        if parsed is not None and parsed > (parse_major_minor(NEWEST_VERSION) or (0, 0)):
            return GATES[NEWEST_VERSION]
        return GATES[DEFAULT_VERSION]
