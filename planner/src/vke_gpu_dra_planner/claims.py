"""DeviceClasses, ResourceClaim(Template)s and pod claim references as plain data (resource.k8s.io/v1).

Parsed from Kubernetes JSON (manifests or Pulumi props, camelCase). Bad input raises `ManifestError`
naming the object, the field, the value and what is allowed. The v1beta1 request shape (class and count
directly in the request) is accepted only for `resource.k8s.io/v1beta1` objects, as the apiserver does.

Kubernetes 1.36 fields: a DeviceClass's `spec.extendedResourceName` (DRAExtendedResource: pods asking
that extended resource get their devices through the class) and a request's `capacity.requests`
(DRAConsumableCapacity: how much of a device's capacity the request consumes). Both are read whatever
the version; whether the API server keeps them is the allocator's and `admission`'s to say.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from vke_gpu_dra_core.object_names import is_dns_label
from vke_gpu_dra_core.quantity import QuantityError, parse_quantity

ALLOCATION_MODES: Final = ("ExactCount", "All")
#: resource/v1 limits the allocator checks.
MAX_REQUESTS_PER_CLAIM: Final = 32
MAX_SUBREQUESTS: Final = 8
ALLOCATION_RESULTS_MAX_SIZE: Final = 32
_FULLY_QUALIFIED: Final = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z_][A-Za-z0-9_]{0,31}$")
#: a capacity name: `<id>` (the driver's domain) or `<domain>/<id>`
_CAPACITY_NAME: Final = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z_][A-Za-z0-9_]{0,31}$")
#: an extended resource name: `<domain>/<name>` outside kubernetes.io (KEP-5004)
_EXTENDED_NAME: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
#: the extended resource name every DeviceClass maps implicitly (`<prefix><class name>`)
IMPLICIT_EXTENDED_PREFIX: Final = "deviceclass.resource.kubernetes.io/"


class ManifestError(ValueError):
    """An object this tool cannot read; the message names object, field, value and what is allowed."""


@dataclass(frozen=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...]
    #: `spec.extendedResourceName` (None: only the implicit `deviceclass.resource.kubernetes.io/<name>`)
    extended_resource_name: str | None = None

    def maps(self, resource: str) -> bool:
        """Whether pods asking the extended resource `resource` get this class's devices (1.36)."""
        return resource in (self.extended_resource_name, IMPLICIT_EXTENDED_PREFIX + self.name)


@dataclass(frozen=True)
class SubRequest:
    """One way to satisfy a request: `exactly`, or one entry of `firstAvailable`."""

    name: str
    device_class: str
    selectors: tuple[str, ...] = ()
    allocation_mode: str = "ExactCount"
    count: int = 1
    admin_access: bool = False
    #: `capacity.requests`: (capacity name, amount) sorted by name; amounts exact, in the capacity's unit
    #: (bytes for memory), fractional where the quantity is (`500m`)
    capacity: tuple[tuple[str, Fraction], ...] = ()

    @property
    def wants_all(self) -> bool:
        return self.allocation_mode == "All"

    def describe(self) -> str:
        amount = "all matching devices" if self.wants_all else f"{self.count} device{'s' * (self.count != 1)}"
        return f"{amount} of class {self.device_class}"


@dataclass(frozen=True)
class Request:
    name: str
    #: `(exactly,)` for a plain request, the `firstAvailable` list (in order) otherwise.
    alternatives: tuple[SubRequest, ...]
    first_available: bool = False

    def result_name(self, alternative: int) -> str:
        return f"{self.name}/{self.alternatives[alternative].name}" if self.first_available else self.name


@dataclass(frozen=True)
class Constraint:
    requests: tuple[str, ...]
    match_attribute: str | None = None
    distinct_attribute: str | None = None

    @property
    def attribute(self) -> str:
        return self.match_attribute or self.distinct_attribute or ""

    def applies_to(self, request: str, subrequest: str | None) -> bool:
        if not self.requests:
            return True
        return request in self.requests or (
            subrequest is not None and f"{request}/{subrequest}" in self.requests
        )


@dataclass(frozen=True)
class ClaimSpec:
    requests: tuple[Request, ...]
    constraints: tuple[Constraint, ...] = ()


@dataclass(frozen=True)
class ClaimTemplate:
    """A ResourceClaimTemplate (or a ResourceClaim: `shared` is True, one claim for every pod using it)."""

    name: str
    namespace: str
    spec: ClaimSpec
    shared: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


# --- parsing ------------------------------------------------------------------------------------


def _where(obj: Mapping[str, Any], kind: str) -> str:
    meta = obj.get("metadata") or {}
    name = meta.get("name", "<unnamed>") if isinstance(meta, Mapping) else "<unnamed>"
    return f"{kind} {name}"


def _mapping(value: Any, where: str, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ManifestError(f"{where}: field {field} must be an object, got {value!r}")
    return value


def _list(value: Any, where: str, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise ManifestError(f"{where}: field {field} must be a list, got {value!r}")
    return list(value)


def _string(value: Any, where: str, field: str, *, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise ManifestError(f"{where}: field {field} must be a non-empty string, got {value!r}")
    return value


def _count(value: Any, where: str, field: str) -> int:
    # Pulumi hands numbers over as floats (count: 1.0)
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value or value < 1:
        raise ManifestError(f"{where}: field {field} must be a whole number >= 1, got {value!r}")
    return int(value)


def _selectors(value: Any, where: str, field: str) -> tuple[str, ...]:
    result = []
    for i, selector in enumerate(_list(value, where, field)):
        cel_field = _mapping(
            _mapping(selector, where, f"{field}[{i}]").get("cel"), where, f"{field}[{i}].cel"
        )
        result.append(_string(cel_field.get("expression"), where, f"{field}[{i}].cel.expression"))
    return tuple(result)


def _name(value: Any, where: str, field: str) -> str:
    name = _string(value, where, field)
    if not is_dns_label(name):
        raise ManifestError(
            f"{where}: field {field} must be a DNS label (lower-case letters, digits, '-'), got {name!r}"
        )
    return name


def parse_device_class(obj: Mapping[str, Any]) -> DeviceClass:
    where = _where(obj, "DeviceClass")
    name = _string(_mapping(obj.get("metadata"), where, "metadata").get("name"), where, "metadata.name")
    spec = _mapping(obj.get("spec"), where, "spec")
    extended = spec.get("extendedResourceName")
    if extended is not None and (
        not isinstance(extended, str) or not _EXTENDED_NAME.match(extended) or _kubernetes_io(extended)
    ):
        raise ManifestError(
            f"{where}: field spec.extendedResourceName is {extended!r}; allowed: an extended resource "
            "name <domain>/<name> outside kubernetes.io, e.g. nvidia.com/gpu"
        )
    return DeviceClass(name, _selectors(spec.get("selectors"), where, "spec.selectors"), extended)


def _kubernetes_io(name: str) -> bool:
    domain = name.split("/", 1)[0]
    return domain == "kubernetes.io" or domain.endswith(".kubernetes.io")


def is_extended_resource(name: str) -> bool:
    """An extended resource name a container may ask for (not cpu, memory, hugepages-*, kubernetes.io/*),
    or the implicit name of a DeviceClass."""
    if name.startswith(IMPLICIT_EXTENDED_PREFIX):
        return True
    return bool(_EXTENDED_NAME.match(name)) and not _kubernetes_io(name) and not name.startswith("requests.")


def whole_quantity(value: Any) -> int | None:
    """`value` as a whole, non-negative Kubernetes quantity (`40Gi`, `2`), or None where it is not one."""
    try:
        amount = parse_quantity(str(value))
    except QuantityError:
        return None
    if amount < 0 or amount != int(amount):
        return None
    return int(amount)


def _capacity(raw: Any, where: str, field: str) -> tuple[tuple[str, Fraction], ...]:
    """`capacity.requests`, exact: the API server takes any quantity; a fractional one (`1500m`) is rounded
    by the device's request policy (in milli units with DRAFractionalCapacityRange, 1.37), a negative one
    only makes the scheduler fail the claim, so it is refused here."""
    requests = _mapping(_mapping(raw, where, field).get("requests"), where, f"{field}.requests")
    out = []
    for name, value in requests.items():
        if not isinstance(name, str) or not _CAPACITY_NAME.match(name):
            raise ManifestError(
                f"{where}: field {field}.requests has key {name!r}; allowed: a capacity name <id> or "
                "<domain>/<id>, e.g. memory"
            )
        try:
            amount = parse_quantity(str(value))
        except QuantityError:
            amount = Fraction(-1)
        if amount < 0 or isinstance(value, bool):
            raise ManifestError(
                f"{where}: field {field}.requests.{name} is {value!r}; allowed: a non-negative Kubernetes "
                "quantity such as 40Gi or 1500m"
            )
        out.append((name, amount))
    return tuple(sorted(out))


def _subrequest(raw: Mapping[str, Any], where: str, field: str, name: str) -> SubRequest:
    mode = raw.get("allocationMode") or "ExactCount"
    if mode not in ALLOCATION_MODES:
        raise ManifestError(
            f"{where}: field {field}.allocationMode is {mode!r}; allowed: {', '.join(ALLOCATION_MODES)}"
        )
    if mode == "All" and raw.get("count") not in (None, 0):
        raise ManifestError(
            f"{where}: field {field}.count must not be set with allocationMode All, got {raw.get('count')!r}"
        )
    return SubRequest(
        name=name,
        device_class=_string(raw.get("deviceClassName"), where, f"{field}.deviceClassName"),
        selectors=_selectors(raw.get("selectors"), where, f"{field}.selectors"),
        allocation_mode=mode,
        count=1 if mode == "All" else _count(raw.get("count"), where, f"{field}.count"),
        admin_access=bool(raw.get("adminAccess") or False),
        capacity=_capacity(raw.get("capacity"), where, f"{field}.capacity"),
    )


def _request(raw: Any, where: str, field: str, api_version: str) -> Request:
    raw = _mapping(raw, where, field)
    name = _name(raw.get("name"), where, f"{field}.name")
    exactly, first = raw.get("exactly"), raw.get("firstAvailable")
    legacy = api_version.endswith("/v1beta1") and exactly is None and raw.get("deviceClassName") is not None
    if legacy:
        exactly = raw
    if (exactly is None) == (first is None):
        raise ManifestError(
            f"{where}: {field} ({name}) must set exactly one of 'exactly' or 'firstAvailable' "
            f"(resource.k8s.io/v1), got keys {sorted(raw)}"
        )
    if exactly is not None:
        sub = _subrequest(_mapping(exactly, where, f"{field}.exactly"), where, f"{field}.exactly", name)
        return Request(name, (sub,))
    subs = _list(first, where, f"{field}.firstAvailable")
    if not 1 <= len(subs) <= MAX_SUBREQUESTS:
        raise ManifestError(
            f"{where}: field {field}.firstAvailable must have 1 to {MAX_SUBREQUESTS} entries, got {len(subs)}"
        )
    alternatives = []
    for i, sub in enumerate(subs):
        sub_field = f"{field}.firstAvailable[{i}]"
        sub_map = _mapping(sub, where, sub_field)
        alternatives.append(
            _subrequest(sub_map, where, sub_field, _name(sub_map.get("name"), where, f"{sub_field}.name"))
        )
    return Request(name, tuple(alternatives), first_available=True)


def _constraint(raw: Any, where: str, field: str, names: set[str]) -> Constraint:
    raw = _mapping(raw, where, field)
    requests = tuple(
        _string(r, where, f"{field}.requests") for r in _list(raw.get("requests"), where, f"{field}.requests")
    )
    for request in requests:
        if request.split("/", 1)[0] not in names:
            raise ManifestError(
                f"{where}: field {field}.requests names {request!r}, which is not a request of "
                f"the claim; requests: {', '.join(sorted(names))}"
            )
    match, distinct = raw.get("matchAttribute"), raw.get("distinctAttribute")
    if (match is None) == (distinct is None):
        raise ManifestError(f"{where}: {field} must set exactly one of matchAttribute or distinctAttribute")
    attribute_field = "matchAttribute" if match is not None else "distinctAttribute"
    attribute = _string(match if match is not None else distinct, where, f"{field}.{attribute_field}")
    if not _FULLY_QUALIFIED.match(attribute):
        raise ManifestError(
            f"{where}: field {field}.{attribute_field} must be a fully qualified attribute name "
            f"<domain>/<id>, e.g. resource.kubernetes.io/pcieRoot, got {attribute!r}"
        )
    return Constraint(requests, match, distinct)


def parse_claim_spec(spec: Mapping[str, Any], where: str, field: str, api_version: str) -> ClaimSpec:
    devices = _mapping(_mapping(spec, where, field).get("devices"), where, f"{field}.devices")
    raw_requests = _list(devices.get("requests"), where, f"{field}.devices.requests")
    if len(raw_requests) > MAX_REQUESTS_PER_CLAIM:
        raise ManifestError(
            f"{where}: field {field}.devices.requests has {len(raw_requests)} entries; "
            f"at most {MAX_REQUESTS_PER_CLAIM} are allowed"
        )
    requests = tuple(
        _request(r, where, f"{field}.devices.requests[{i}]", api_version) for i, r in enumerate(raw_requests)
    )
    names = {r.name for r in requests}
    if len(names) != len(requests):
        raise ManifestError(
            f"{where}: request names in {field}.devices.requests must be unique, "
            f"got {[r.name for r in requests]}"
        )
    constraints = tuple(
        _constraint(c, where, f"{field}.devices.constraints[{i}]", names)
        for i, c in enumerate(_list(devices.get("constraints"), where, f"{field}.devices.constraints"))
    )
    return ClaimSpec(requests, constraints)


def parse_claim_template(obj: Mapping[str, Any]) -> ClaimTemplate:
    """A ResourceClaimTemplate (`spec.spec`) or a ResourceClaim (`spec`, shared by the pods naming it)."""
    kind = obj.get("kind") or "ResourceClaimTemplate"
    where = _where(obj, kind)
    api_version = str(obj.get("apiVersion") or "resource.k8s.io/v1")
    meta = _mapping(obj.get("metadata"), where, "metadata")
    name = _string(meta.get("name"), where, "metadata.name")
    namespace = _string(meta.get("namespace"), where, "metadata.namespace", required=False) or "default"
    spec = _mapping(obj.get("spec"), where, "spec")
    if kind == "ResourceClaim":
        return ClaimTemplate(name, namespace, parse_claim_spec(spec, where, "spec", api_version), shared=True)
    return ClaimTemplate(
        name,
        namespace,
        parse_claim_spec(_mapping(spec.get("spec"), where, "spec.spec"), where, "spec.spec", api_version),
    )


@dataclass(frozen=True)
class PodClaimRef:
    """One entry of a pod's `spec.resourceClaims`."""

    name: str
    template: str | None = None
    claim: str | None = None


def parse_pod_claims(pod_spec: Mapping[str, Any], where: str, field: str) -> tuple[PodClaimRef, ...]:
    refs = []
    for i, raw in enumerate(_list(pod_spec.get("resourceClaims"), where, f"{field}.resourceClaims")):
        entry_field = f"{field}.resourceClaims[{i}]"
        entry = _mapping(raw, where, entry_field)
        template, claim = entry.get("resourceClaimTemplateName"), entry.get("resourceClaimName")
        if (template is None) == (claim is None):
            raise ManifestError(
                f"{where}: {entry_field} must set exactly one of resourceClaimTemplateName or "
                f"resourceClaimName, got keys {sorted(entry)}"
            )
        refs.append(
            PodClaimRef(
                _string(entry.get("name"), where, f"{entry_field}.name"),
                template if isinstance(template, str) else None,
                claim if isinstance(claim, str) else None,
            )
        )
    return tuple(refs)


def selectors_of(classes: Sequence[DeviceClass]) -> list[str]:
    return [s for c in classes for s in c.selectors]
