"""The driver's data model: devices as discovered, and devices as prepared for a claim.

Pure data and rendering; no I/O. Discovery (NVML or simulated) produces `Device`s, the slice
publisher renders them with `Device.slice_entry()`, and prepare answers with `PreparedDevice`s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from . import facts
from .object_names import DNS_SUBDOMAIN_MAX, is_dns_label, is_dns_subdomain

_BINARY_SUFFIXES = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


_DECIMAL_SUFFIXES = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3))


def binary_si(value: int) -> str:
    """The quantity as the apiserver returns it: the largest binary suffix that divides `value` exactly.

    A number no binary suffix divides is parsed as DecimalSI, whose canonical form uses the
    largest decimal suffix that divides it (1000 comes back as `1k`), so that form is used.

    >>> binary_si(25769803776), binary_si(85520809984), binary_si(14), binary_si(12345000)
    ('24Gi', '81559Mi', '14', '12345k')
    """
    if value < 0:
        raise ValueError(f"quantity must not be negative, got {value}")
    for suffixes in (_BINARY_SUFFIXES, _DECIMAL_SUFFIXES):
        for suffix, size in suffixes:
            if value and value % size == 0:
                return f"{value // size}{suffix}"
    return str(value)


@dataclass(frozen=True)
class Version:
    """A `version` attribute value (already normalised to strict semver MAJOR.MINOR.PATCH)."""

    value: str


#: A device attribute value; rendered as {"string"|"int"|"bool"|"version": …}.
AttributeValue = str | int | bool | Version


def render_attribute(value: AttributeValue) -> dict[str, object]:
    """Render an attribute value in resource.k8s.io/v1 DeviceAttribute form."""
    if isinstance(value, Version):
        return {"version": value.value}
    if isinstance(value, bool):  # before int: bool is an int subclass
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": value}


@dataclass(frozen=True)
class Device:
    """One allocatable device on this node (a full GPU or a MIG device).

    `attributes` and `capacity` are keyed by the names published in the slice (unqualified names
    belong to the driver's domain). Capacity values are plain integers (bytes for memory); they are
    rendered as BinarySI quantities. The remaining fields are node-local facts used by prepare/CDI.
    """

    name: str
    device_type: str
    uuid: str
    attributes: Mapping[str, AttributeValue]
    capacity: Mapping[str, int]
    #: /dev/nvidia<minor> of the GPU (the parent GPU for MIG devices); None for simulated devices.
    minor: int | None = None
    #: Extra device nodes the container needs (e.g. MIG capability nodes), host paths.
    device_nodes: tuple[str, ...] = ()
    #: True when the device exists only in simulation (CDI sets environment variables only).
    simulated: bool = False
    #: Health as last observed (NVML health events; simulated devices are always healthy).
    healthy: bool = True
    extra: Mapping[str, str] = field(default_factory=dict)

    def slice_entry(self) -> dict[str, object]:
        """The device as an entry of ResourceSlice `spec.devices` (resource.k8s.io/v1)."""
        return {
            "name": self.name,
            "attributes": {k: render_attribute(v) for k, v in sorted(self.attributes.items())},
            "capacity": {k: {"value": binary_si(v)} for k, v in sorted(self.capacity.items())},
        }


@dataclass(frozen=True)
class PreparedDevice:
    """One entry of a NodePrepareResources answer (kubelet's `Device` message)."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    #: The allocation's `shareID` when the device is one of several consumable shares (Kubernetes 1.36,
    #: kubelet's v1 `Device.share_id`); None for a device allocated whole.
    share_id: str | None = None

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "requestNames": list(self.request_names),
            "poolName": self.pool_name,
            "deviceName": self.device_name,
            "cdiDeviceIDs": list(self.cdi_device_ids),
        }
        if self.share_id is not None:
            data["shareID"] = self.share_id
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> PreparedDevice:
        def strings(key: str) -> tuple[str, ...]:
            raw = data.get(key, [])
            if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
                raise ValueError(f"prepared device field {key!r} must be a list of strings, got {raw!r}")
            return tuple(raw)

        pool, device = data.get("poolName"), data.get("deviceName")
        if not isinstance(pool, str) or not isinstance(device, str):
            raise ValueError(f"prepared device needs string poolName and deviceName, got {dict(data)!r}")
        share = data.get("shareID")
        if share is not None and not (isinstance(share, str) and share):
            raise ValueError(f"prepared device field 'shareID' must be a non-empty string, got {share!r}")
        return cls(strings("requestNames"), pool, device, strings("cdiDeviceIDs"), share)


@dataclass(frozen=True)
class ClaimRef:
    """A claim as kubelet names it in NodePrepareResources / NodeUnprepareResources."""

    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} (uid {self.uid})"


#: A claim's UID as kubelet gives it: the API server's `metadata.uid`, a UUID such as
#: 9a7c1e52-3b1f-4f4e-8a55-0c2d6e7f8a90 (it names files and CDI devices of the claim on the node).
CLAIM_UID_RE: Final = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,126}[A-Za-z0-9])?$")


def claim_ref_problem(ref: ClaimRef) -> str | None:
    """What is wrong with a claim reference kubelet sent, naming the field and what is allowed; None
    when it is usable."""
    if not CLAIM_UID_RE.match(ref.uid):
        return (
            f"claim uid {ref.uid!r} is not usable: a claim's uid is 1-128 letters, digits and '-', starting "
            "and ending with a letter or digit (the API server's metadata.uid, a UUID)"
        )
    if not is_dns_label(ref.namespace):
        return (
            f"claim namespace {ref.namespace!r} (claim uid {ref.uid}) is not usable: a namespace is a DNS "
            "label, 1-63 lower-case letters, digits and '-', starting and ending with a letter or digit"
        )
    if not is_dns_subdomain(ref.name):
        return (
            f"claim name {ref.name!r} (claim uid {ref.uid}) is not usable: a claim's name is a DNS "
            f"subdomain, 1-{DNS_SUBDOMAIN_MAX} lower-case letters, digits, '-' and '.', each '.'-separated "
            "part starting and ending with a letter or digit"
        )
    return None


class ClaimError(Exception):
    """A claim cannot be prepared; the message goes into the claim's per-claim `error` verbatim."""


def is_driver_domain(name: str) -> bool:
    """True for attribute/capacity names that belong to the driver's own domain."""
    return "/" not in name or name.startswith(facts.DRIVER_NAME + "/")
