"""What the API server does with a ResourceClaim(Template) on create, for one Kubernetes version.

* `adminAccess: true` in a request needs the label `resource.kubernetes.io/admin-access: "true"` on the
  claim's Namespace (`pkg/registry/resource/resourceclaim(template)/strategy.go`, DRAAdminAccess on since
  1.34). The Namespace must be part of the stack or the manifests; otherwise its labels are unknown and
  the answer is "unknown", never assumed.
* `distinctAttribute` belongs to DRAConsumableCapacity: with the gate off the API server drops the
  field, and validation then refuses the empty constraint (`matchAttribute: Required value`) — from 1.35
  on. A 1.34 API server keeps it, gate or not (its strategy clears a copy of each constraint; the real
  v1.34.4 server stores the field, see `gates`): the claim is admitted, and `Admission.notes` says that
  its scheduler only checks that the devices have the attribute.
* a request's `capacity` (`capacity.requests`) belongs to DRAConsumableCapacity too: with the gate off
  it is dropped silently (the claim is admitted and asks for whole devices), which `Admission.dropped`
  says. (The same gate keeps a ResourceSlice's `allowMultipleAllocations` and capacities'
  `requestPolicy`; a DeviceClass's `extendedResourceName` is dropped while DRAExtendedResource is off.)
* a ResourceSlice's `sharedCounters` and its devices' `consumesCounters` belong to
  DRAPartitionableDevices: with the gate off they are dropped (`counters_dropped`). The driver finds that
  out by dry-run when it starts and then publishes its GPUs as without its gate DynamicMIG, whole, with
  no MIG placement (`as_published`).

Messages are the API server's (`<Kind>.resource.k8s.io "<name>" is invalid: <field>: <reason>`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

from .claims import ClaimTemplate, Request, SubRequest
from .gates import DISTINCT_DROPPED, DISTINCT_PRESENT, FeatureGates
from .inventory import GpuPool

ADMIN_ACCESS_LABEL: Final = "resource.kubernetes.io/admin-access"
ADMIN_ACCESS_FORBIDDEN: Final = (
    "Forbidden: admin access to devices requires the "
    f"`{ADMIN_ACCESS_LABEL}: true` label on the containing namespace"
)
ADMITTED: Final = "admitted"
REFUSED: Final = "refused"
UNKNOWN: Final = "unknown"


@dataclass(frozen=True)
class Admission:
    status: str
    #: the API server's message when refused; why it cannot be decided when unknown
    message: str = ""
    #: fields the API server drops on create (the object is admitted without them)
    dropped: tuple[str, ...] = ()
    #: fields the API server keeps that the scheduler treats otherwise than the API documents (1.34's
    #: distinctAttribute: kept with its gate off, values not compared)
    notes: tuple[str, ...] = ()


def admit(
    template: ClaimTemplate, namespaces: Mapping[str, Mapping[str, str]], gates: FeatureGates
) -> Admission:
    """Whether creating `template` succeeds; `namespaces`: the labels of every known Namespace."""
    kind = "ResourceClaim" if template.shared else "ResourceClaimTemplate"
    prefix = "spec" if template.shared else "spec.spec"
    errors: list[str] = []
    admin = [
        ri
        for ri, request in enumerate(template.spec.requests)
        if not request.first_available and request.alternatives[0].admin_access
    ]
    undecided = ""
    if admin and gates.admin_access:
        labels = namespaces.get(template.namespace)
        if labels is None:
            undecided = (
                f"adminAccess needs the label {ADMIN_ACCESS_LABEL}=true on namespace {template.namespace}, "
                "which is not part of the stack or the manifests: its labels are unknown"
            )
        elif labels.get(ADMIN_ACCESS_LABEL) != "true":
            errors.extend(
                f"{prefix}.devices.requests[{ri}].exactly.adminAccess: {ADMIN_ACCESS_FORBIDDEN}"
                for ri in admin
            )
    distinct = [ci for ci, c in enumerate(template.spec.constraints) if c.distinct_attribute is not None]
    if gates.distinct_attribute == DISTINCT_DROPPED:
        errors.extend(f"{prefix}.devices.constraints[{ci}].matchAttribute: Required value" for ci in distinct)
    notes: tuple[str, ...] = ()
    if gates.distinct_attribute == DISTINCT_PRESENT:
        kept = (
            "is kept"
            if gates.consumable_capacity
            else f"is kept although {gates.state('DRAConsumableCapacity')} (the API server's drop misses it)"
        )
        notes = tuple(
            f"{prefix}.devices.constraints[{ci}].distinctAttribute {kept}, and the {gates.version} "
            f"scheduler only checks that every device of its requests has "
            f"{template.spec.constraints[ci].distinct_attribute}: devices with equal values may be "
            "allocated together"
            for ci in distinct
        )
    dropped = (
        ()
        if gates.consumable_capacity
        else tuple(
            f"{prefix}.devices.requests[{ri}].{where}.capacity is dropped "
            f"({gates.state('DRAConsumableCapacity')}): it asks for whole devices"
            for ri, request in enumerate(template.spec.requests)
            for where, sub in _subrequests(request)
            if sub.capacity
        )
    )
    if errors:
        detail = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        message = f'{kind}.resource.k8s.io "{template.name}" is invalid: {detail}'
        if distinct and gates.distinct_attribute == DISTINCT_DROPPED:
            message += f" (distinctAttribute is dropped: {gates.state('DRAConsumableCapacity')})"
        return Admission(REFUSED, message, dropped, notes)
    if undecided:
        return Admission(UNKNOWN, undecided, dropped, notes)
    return Admission(ADMITTED, dropped=dropped, notes=notes)


def _subrequests(request: Request) -> list[tuple[str, SubRequest]]:
    if not request.first_available:
        return [("exactly", request.alternatives[0])]
    return [(f"firstAvailable[{i}]", sub) for i, sub in enumerate(request.alternatives)]


def counters_dropped(pool: GpuPool, gates: FeatureGates) -> str | None:
    """What the API server does to the pool's slices without DRAPartitionableDevices (None: kept)."""
    if not pool.partitionable or gates.partitionable_devices:
        return None
    return (
        f"the API server drops the slices' sharedCounters and the devices' consumesCounters "
        f"({gates.state('DRAPartitionableDevices')}): the driver finds that out when it starts and "
        "publishes its GPUs whole, as without DynamicMIG, so no claim gets a MIG placement"
    )


def as_published(pool: GpuPool, gates: FeatureGates) -> GpuPool:
    """The pool as the driver publishes it on a cluster with `gates`: with DynamicMIG on a server that drops
    shared counters (DRAPartitionableDevices off), as without the gate (the driver's `counter_layout` is
    None there); otherwise as it is."""
    if pool.partitionable and not gates.partitionable_devices:
        return replace(pool, dynamic_mig=False)
    return pool
