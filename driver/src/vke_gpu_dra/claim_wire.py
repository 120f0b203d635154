"""A ResourceClaim's `status.devices` rewritten in the claim's protobuf form, every other byte kept; no I/O.

Why: the API server keeps a claim's opaque device config (`...config[].opaque.parameters`, a RawExtension)
as the bytes its creator sent, and refuses any status write whose allocation differs from them byte for
byte (422, `status.allocation`: the allocation is immutable). Every JSON write (server-side apply, a JSON
or merge patch, an update) makes the server serialise the stored object again: compact, and for an apply
with sorted keys, so config a client sent with whitespace or its keys in another order reads as changed.
Kubernetes' protobuf form carries a RawExtension as its raw bytes, so a claim read as protobuf and sent
back as protobuf, with only `status.devices` changed, keeps them exactly.

The wire format is protobuf's; the field numbers are Kubernetes' (`k8s.io/api/resource/v1/generated.proto`,
`k8s.io/apimachinery/pkg/{apis/meta/v1,runtime}/generated.proto`, the same in every served version). A
body is the envelope `k8s\\x00` + runtime.Unknown{typeMeta, raw: the ResourceClaim message}. Only the fields
named below are read; every other field, known or not, is copied as it came.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

#: Content type of Kubernetes' protobuf encoding.
PROTOBUF: Final = "application/vnd.kubernetes.protobuf"
#: The bytes every protobuf body starts with.
MAGIC: Final = b"k8s\x00"

# runtime.Unknown
_UNKNOWN_TYPE_META: Final = 1
_UNKNOWN_RAW: Final = 2
# runtime.TypeMeta
_TYPE_META_API_VERSION: Final = 1
_TYPE_META_KIND: Final = 2
# resource.k8s.io ResourceClaim
_CLAIM_METADATA: Final = 1
_CLAIM_STATUS: Final = 3
# meta/v1 ObjectMeta
_META_UID: Final = 5
_META_RESOURCE_VERSION: Final = 6
# ResourceClaimStatus
_STATUS_ALLOCATION: Final = 1
_STATUS_DEVICES: Final = 4
# AllocatedDeviceStatus
_DEVICE_DRIVER: Final = 1
_DEVICE_POOL: Final = 2
_DEVICE_DEVICE: Final = 3
_DEVICE_CONDITIONS: Final = 4
_DEVICE_DATA: Final = 5
_DEVICE_SHARE_ID: Final = 7
# meta/v1 Condition
_CONDITION_TYPE: Final = 1
_CONDITION_STATUS: Final = 2
_CONDITION_OBSERVED_GENERATION: Final = 3
_CONDITION_LAST_TRANSITION_TIME: Final = 4
_CONDITION_REASON: Final = 5
_CONDITION_MESSAGE: Final = 6
# meta/v1 Time
_TIME_SECONDS: Final = 1
# runtime.RawExtension
_RAW_EXTENSION_RAW: Final = 1
# meta/v1 Status
_STATUS_MESSAGE: Final = 3
_STATUS_REASON: Final = 4

_VARINT: Final = 0
_FIXED64: Final = 1
_BYTES: Final = 2
_FIXED32: Final = 5
_MAX_VARINT_BYTES: Final = 10


class WireError(ValueError):
    """A body that is not a ResourceClaim in Kubernetes' protobuf form."""


@dataclass(frozen=True)
class Field:
    """One field of a message: its number, wire type, payload (a length-delimited field's content, a
    varint's value as bytes of its encoding) and its whole encoding (tag included), copied unchanged."""

    number: int
    wire_type: int
    payload: bytes
    encoded: bytes


@dataclass(frozen=True)
class StoredClaim:
    """A claim as read in protobuf form: what the rewrite needs, and the rest as it came."""

    type_meta: bytes  #: runtime.Unknown's typeMeta, encoded
    fields: tuple[Field, ...]  #: the ResourceClaim message's fields
    uid: str
    resource_version: str
    allocated: bool
    #: (driver, pool, device, shareID or None) of each `status.devices` entry, in order.
    device_keys: tuple[tuple[str, str, str, str | None], ...]


def _open(body: bytes) -> tuple[Field | None, str, str, Field | None]:
    """A protobuf body's runtime.Unknown: its typeMeta (as encoded), the object's kind and apiVersion, and
    its raw message. WireError when the body is not one."""
    if not body.startswith(MAGIC):
        raise WireError(f"not a Kubernetes protobuf body: it starts with {body[:4]!r}, not {MAGIC!r}")
    envelope = _one_each(_fields(body[len(MAGIC) :], "runtime.Unknown"))
    type_meta = envelope.get(_UNKNOWN_TYPE_META)
    meta = _one_each(_fields(_payload(type_meta), "runtime.TypeMeta"))
    kind = _text(meta.get(_TYPE_META_KIND), "TypeMeta.kind")
    api_version = _text(meta.get(_TYPE_META_API_VERSION), "TypeMeta.apiVersion")
    return type_meta, kind, api_version, envelope.get(_UNKNOWN_RAW)


def read_claim(body: bytes) -> StoredClaim:
    """The claim in a protobuf body (`MAGIC` + runtime.Unknown). WireError when it is not one."""
    type_meta, kind, api_version, raw = _open(body)
    if type_meta is None or type_meta.wire_type != _BYTES:
        raise WireError("runtime.Unknown has no typeMeta")
    if kind != "ResourceClaim":
        raise WireError(
            f"the body holds a {kind or 'object without a kind'} ({api_version}), not a ResourceClaim"
        )
    if raw is None or raw.wire_type != _BYTES:
        raise WireError("runtime.Unknown has no raw object")
    fields = tuple(_fields(raw.payload, "ResourceClaim"))
    metadata = _one_each(_fields(_merged(fields, _CLAIM_METADATA), "ObjectMeta"))
    status_fields = _fields(_merged(fields, _CLAIM_STATUS), "ResourceClaimStatus")
    keys = tuple(_device_key(f.payload) for f in status_fields if f.number == _STATUS_DEVICES)
    return StoredClaim(
        type_meta=type_meta.encoded,
        fields=fields,
        uid=_text(metadata.get(_META_UID), "ObjectMeta.uid"),
        resource_version=_text(metadata.get(_META_RESOURCE_VERSION), "ObjectMeta.resourceVersion"),
        allocated=any(f.number == _STATUS_ALLOCATION for f in status_fields),
        device_keys=keys,
    )


def read_status(body: bytes) -> tuple[str, str] | None:
    """(reason, message) of the Status an error answer in protobuf form holds; None when it holds another
    kind. WireError when it is not a protobuf body."""
    _, kind, _, raw = _open(body)
    if kind != "Status":
        return None
    status = _one_each(_fields(_payload(raw), "Status"))
    return _text(status.get(_STATUS_REASON), "Status.reason"), _text(
        status.get(_STATUS_MESSAGE), "Status.message"
    )


def holds_entries_of(claim: StoredClaim, driver: str, pool: str) -> bool:
    return any(k[0] == driver and k[1] == pool for k in claim.device_keys)


def with_devices(claim: StoredClaim, entries: Sequence[Mapping[str, Any]], driver: str, pool: str) -> bytes:
    """The claim's protobuf body with `entries` (`claim_status.status_entries`' dicts) in place of the
    `status.devices` entries it holds of `driver` in `pool`; other drivers' entries, the allocation and
    every other byte as read. Its metadata keeps the uid and resourceVersion read, so an update with it
    applies only to the claim as read (a change since: 409 Conflict)."""
    status_fields = _fields(_merged(claim.fields, _CLAIM_STATUS), "ResourceClaimStatus")
    kept = [
        f.encoded
        for f in status_fields
        if f.number != _STATUS_DEVICES or _device_key(f.payload)[:2] != (driver, pool)
    ]
    status = b"".join(kept) + b"".join(_bytes_field(_STATUS_DEVICES, encode_entry(e)) for e in entries)
    message = b"".join(f.encoded for f in claim.fields if f.number != _CLAIM_STATUS)
    message += _bytes_field(_CLAIM_STATUS, status)
    return MAGIC + claim.type_meta + _bytes_field(_UNKNOWN_RAW, message)


def encode_entry(entry: Mapping[str, Any]) -> bytes:
    """One AllocatedDeviceStatus (driver, pool, device, shareID, conditions, data) in protobuf form."""
    out = _string(_DEVICE_DRIVER, entry["driver"]) + _string(_DEVICE_POOL, entry["pool"])
    out += _string(_DEVICE_DEVICE, entry["device"])
    for condition in entry.get("conditions") or []:
        out += _bytes_field(_DEVICE_CONDITIONS, _condition(condition))
    if "data" in entry:
        raw = json.dumps(entry["data"], separators=(",", ":"), sort_keys=True).encode()
        out += _bytes_field(_DEVICE_DATA, _bytes_field(_RAW_EXTENSION_RAW, raw))
    if entry.get("shareID") is not None:
        out += _string(_DEVICE_SHARE_ID, entry["shareID"])
    return out


def _condition(condition: Mapping[str, Any]) -> bytes:
    out = _string(_CONDITION_TYPE, condition["type"]) + _string(_CONDITION_STATUS, condition["status"])
    if condition.get("observedGeneration") is not None:
        out += _varint_field(_CONDITION_OBSERVED_GENERATION, int(condition["observedGeneration"]))
    at = datetime.fromisoformat(str(condition["lastTransitionTime"]).replace("Z", "+00:00"))
    out += _bytes_field(_CONDITION_LAST_TRANSITION_TIME, _varint_field(_TIME_SECONDS, int(at.timestamp())))
    out += _string(_CONDITION_REASON, condition["reason"]) + _string(_CONDITION_MESSAGE, condition["message"])
    return out


# --- protobuf's wire format ---


def _fields(data: bytes, message: str) -> list[Field]:
    """The fields of one message, in order. WireError on a truncated or malformed one."""
    fields: list[Field] = []
    pos = 0
    while pos < len(data):
        start = pos
        tag, pos = _read_varint(data, pos, message)
        number, wire_type = tag >> 3, tag & 7
        if number == 0:
            raise WireError(f"{message}: field number 0 at byte {start}")
        if wire_type == _VARINT:
            value_start = pos
            _, pos = _read_varint(data, pos, message)
            payload = data[value_start:pos]
        elif wire_type == _BYTES:
            size, pos = _read_varint(data, pos, message)
            if pos + size > len(data):
                raise WireError(f"{message}: field {number} is {size} bytes, past the message's end")
            payload, pos = data[pos : pos + size], pos + size
        elif wire_type in (_FIXED64, _FIXED32):
            width = 8 if wire_type == _FIXED64 else 4
            if pos + width > len(data):
                raise WireError(f"{message}: field {number} runs past the message's end")
            payload, pos = data[pos : pos + width], pos + width
        else:
            raise WireError(f"{message}: field {number} has wire type {wire_type}, not one Kubernetes uses")
        fields.append(Field(number, wire_type, payload, data[start:pos]))
    return fields


def _read_varint(data: bytes, pos: int, message: str) -> tuple[int, int]:
    value = 0
    for i in range(_MAX_VARINT_BYTES):
        if pos + i >= len(data):
            raise WireError(f"{message}: a varint runs past the message's end")
        byte = data[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, pos + i + 1
    raise WireError(f"{message}: a varint longer than {_MAX_VARINT_BYTES} bytes")


def _one_each(fields: Sequence[Field]) -> dict[int, Field]:
    """Field number -> its field (the last one, as protobuf merges a repeated singular field)."""
    return {f.number: f for f in fields}


def _merged(fields: Sequence[Field], number: int) -> bytes:
    """The content of message field `number`: protobuf merges a message field that occurs more than once,
    as their contents concatenated do."""
    return b"".join(f.payload for f in fields if f.number == number and f.wire_type == _BYTES)


def _payload(field: Field | None) -> bytes:
    return b"" if field is None or field.wire_type != _BYTES else field.payload


def _text(field: Field | None, name: str) -> str:
    if field is None:
        return ""
    if field.wire_type != _BYTES:
        raise WireError(f"{name} is not a string (wire type {field.wire_type})")
    try:
        return field.payload.decode()
    except UnicodeDecodeError as err:
        raise WireError(f"{name} is not UTF-8: {err}") from None


def _device_key(entry: bytes) -> tuple[str, str, str, str | None]:
    found = _one_each(_fields(entry, "AllocatedDeviceStatus"))
    share = found.get(_DEVICE_SHARE_ID)
    return (
        _text(found.get(_DEVICE_DRIVER), "AllocatedDeviceStatus.driver"),
        _text(found.get(_DEVICE_POOL), "AllocatedDeviceStatus.pool"),
        _text(found.get(_DEVICE_DEVICE), "AllocatedDeviceStatus.device"),
        None if share is None else _text(share, "AllocatedDeviceStatus.shareID"),
    )


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # an int64 below zero is its two's complement, ten bytes
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _varint_field(number: int, value: int) -> bytes:
    return _varint(number << 3 | _VARINT) + _varint(value)


def _bytes_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | _BYTES) + _varint(len(payload)) + payload


def _string(number: int, text: str) -> bytes:
    return _bytes_field(number, str(text).encode())
