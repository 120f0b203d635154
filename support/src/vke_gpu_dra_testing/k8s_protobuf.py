"""Kubernetes' protobuf form of a ResourceClaim, built with the protobuf library from descriptors of
Kubernetes' messages (field numbers from `k8s.io/api/resource/v1/generated.proto` and apimachinery's), as
far as the fake API server and the tests use it: an implementation of the wire format apart from the
driver's own (`vke_gpu_dra.claim_wire`).

A body is `MAGIC` + runtime.Unknown{typeMeta, raw: the object's message}. A RawExtension (opaque device
config, a device's `data`) is carried as raw bytes: the bytes its writer sent, which JSON reads lose.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

#: Content type of Kubernetes' protobuf encoding, and the bytes every such body starts with.
PROTOBUF = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

OPT, REP = (
    descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
    descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
)
STRING, BYTES = (
    descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
    descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
)
INT64, INT32 = descriptor_pb2.FieldDescriptorProto.TYPE_INT64, descriptor_pb2.FieldDescriptorProto.TYPE_INT32
MESSAGE = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE

#: message -> (field, number, label, type or message name): Kubernetes' messages, as far as the tests
#: use them.
K8S: dict[str, list[tuple[str, int, int, int | str]]] = {
    "TypeMeta": [("apiVersion", 1, OPT, STRING), ("kind", 2, OPT, STRING)],
    "Unknown": [
        ("typeMeta", 1, OPT, "TypeMeta"),
        ("raw", 2, OPT, BYTES),
        ("contentEncoding", 3, OPT, STRING),
        ("contentType", 4, OPT, STRING),
    ],
    "Time": [("seconds", 1, OPT, INT64), ("nanos", 2, OPT, INT32)],
    "ObjectMeta": [
        ("name", 1, OPT, STRING),
        ("namespace", 3, OPT, STRING),
        ("uid", 5, OPT, STRING),
        ("resourceVersion", 6, OPT, STRING),
        ("generation", 7, OPT, INT64),
        ("creationTimestamp", 8, OPT, "Time"),
    ],
    "RawExtension": [("raw", 1, OPT, BYTES)],
    "Condition": [
        ("type", 1, OPT, STRING),
        ("status", 2, OPT, STRING),
        ("observedGeneration", 3, OPT, INT64),
        ("lastTransitionTime", 4, OPT, "Time"),
        ("reason", 5, OPT, STRING),
        ("message", 6, OPT, STRING),
    ],
    "OpaqueDeviceConfiguration": [("driver", 1, OPT, STRING), ("parameters", 2, OPT, "RawExtension")],
    "DeviceConfiguration": [("opaque", 1, OPT, "OpaqueDeviceConfiguration")],
    "DeviceAllocationConfiguration": [
        ("source", 1, OPT, STRING),
        ("requests", 2, REP, STRING),
        ("deviceConfiguration", 3, OPT, "DeviceConfiguration"),
    ],
    "DeviceRequestAllocationResult": [
        ("request", 1, OPT, STRING),
        ("driver", 2, OPT, STRING),
        ("pool", 3, OPT, STRING),
        ("device", 4, OPT, STRING),
    ],
    "DeviceAllocationResult": [
        ("results", 1, REP, "DeviceRequestAllocationResult"),
        ("config", 2, REP, "DeviceAllocationConfiguration"),
    ],
    "AllocationResult": [
        ("devices", 1, OPT, "DeviceAllocationResult"),
        ("allocationTimestamp", 5, OPT, "Time"),
    ],
    "ResourceClaimConsumerReference": [
        ("resource", 3, OPT, STRING),
        ("name", 4, OPT, STRING),
        ("uid", 5, OPT, STRING),
    ],
    "AllocatedDeviceStatus": [
        ("driver", 1, OPT, STRING),
        ("pool", 2, OPT, STRING),
        ("device", 3, OPT, STRING),
        ("conditions", 4, REP, "Condition"),
        ("data", 5, OPT, "RawExtension"),
        ("shareID", 7, OPT, STRING),
    ],
    "ResourceClaimStatus": [
        ("allocation", 1, OPT, "AllocationResult"),
        ("reservedFor", 2, REP, "ResourceClaimConsumerReference"),
        ("devices", 4, REP, "AllocatedDeviceStatus"),
    ],
    "ResourceClaimSpec": [("devices", 1, OPT, BYTES)],
    "ResourceClaim": [
        ("metadata", 1, OPT, "ObjectMeta"),
        ("spec", 2, OPT, "ResourceClaimSpec"),
        ("status", 3, OPT, "ResourceClaimStatus"),
    ],
    "Status": [
        ("status", 2, OPT, STRING),
        ("message", 3, OPT, STRING),
        ("reason", 4, OPT, STRING),
        ("code", 6, OPT, INT32),
    ],
}


def _classes() -> dict[str, Any]:
    file = descriptor_pb2.FileDescriptorProto(name="k8s_test.proto", package="k8s", syntax="proto2")
    for name, fields in K8S.items():
        message = file.message_type.add(name=name)
        for field, number, label, kind in fields:
            f = message.field.add(name=field, number=number, label=label)
            if isinstance(kind, str):
                f.type, f.type_name = MESSAGE, f".k8s.{kind}"
            else:
                f.type = kind
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"k8s.{name}")) for name in K8S}


PB = _classes()


def wants_protobuf(accept: str) -> bool:
    """Whether a request's Accept header asks for the protobuf form first."""
    return accept.split(",", maxsplit=1)[0].strip() == PROTOBUF


def envelope(message: Any, kind: str, api_version: str) -> bytes:
    unknown = PB["Unknown"](raw=message.SerializeToString())
    unknown.typeMeta.apiVersion, unknown.typeMeta.kind = api_version, kind
    return MAGIC + unknown.SerializeToString()


def open_envelope(data: bytes) -> tuple[str, str, bytes]:
    """(apiVersion, kind, the object's message) of a protobuf body; ValueError when it is not one."""
    if not data.startswith(MAGIC):
        raise ValueError(f"not a Kubernetes protobuf body: it starts with {data[:4]!r}")
    try:
        unknown = PB["Unknown"].FromString(data[len(MAGIC) :])
    except Exception as err:  # the library's DecodeError
        raise ValueError(f"not a runtime.Unknown: {err}") from None
    return unknown.typeMeta.apiVersion, unknown.typeMeta.kind, unknown.raw


def compact(obj: Any) -> bytes:
    """JSON as the API server serialises a RawExtension it parsed: compact, keys sorted."""
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def claim_message(claim: Mapping[str, Any], config_bytes: Sequence[bytes] = ()) -> Any:
    """A claim (API JSON) as a ResourceClaim message: metadata, and of the status the allocation's results
    and config, `reservedFor` and `devices` (the spec is left out). `config_bytes`: each config entry's
    opaque parameters as stored (default: `compact`)."""
    message = PB["ResourceClaim"]()
    meta = claim.get("metadata") or {}
    for name in ("name", "namespace", "uid", "resourceVersion"):
        if meta.get(name):
            setattr(message.metadata, name, meta[name])
    if meta.get("generation"):
        message.metadata.generation = int(meta["generation"])
    status = claim.get("status") or {}
    allocation = status.get("allocation")
    if allocation is not None:
        devices = allocation.get("devices") or {}
        message.status.allocation.SetInParent()
        for r in devices.get("results") or []:
            message.status.allocation.devices.results.add(
                request=r.get("request", ""), driver=r.get("driver", ""), pool=r.get("pool", ""),
                device=r.get("device", ""),
            )  # fmt: skip
        for i, c in enumerate(devices.get("config") or []):
            config = message.status.allocation.devices.config.add(
                source=c.get("source", ""), requests=c.get("requests") or []
            )
            opaque = c.get("opaque")
            if opaque is not None:
                config.deviceConfiguration.opaque.driver = opaque.get("driver", "")
                raw = config_bytes[i] if i < len(config_bytes) else compact(opaque.get("parameters"))
                config.deviceConfiguration.opaque.parameters.raw = raw
    for ref in status.get("reservedFor") or []:
        message.status.reservedFor.add(
            resource=ref.get("resource", ""), name=ref.get("name", ""), uid=ref.get("uid", "")
        )
    for entry in status.get("devices") or []:
        message.status.devices.append(device_message(entry))
    return message


def device_message(entry: Mapping[str, Any]) -> Any:
    """One `status.devices` entry (API JSON) as an AllocatedDeviceStatus message."""
    out = PB["AllocatedDeviceStatus"](driver=entry["driver"], pool=entry["pool"], device=entry["device"])
    if entry.get("shareID") is not None:
        out.shareID = entry["shareID"]
    for c in entry.get("conditions") or []:
        condition = out.conditions.add(
            type=c.get("type", ""),
            status=c.get("status", ""),
            reason=c.get("reason", ""),
            message=c.get("message", ""),
        )
        if c.get("observedGeneration") is not None:
            condition.observedGeneration = int(c["observedGeneration"])
        if c.get("lastTransitionTime"):
            at = datetime.fromisoformat(str(c["lastTransitionTime"]).replace("Z", "+00:00"))
            condition.lastTransitionTime.seconds = int(at.timestamp())
    if "data" in entry:
        out.data.raw = compact(entry["data"])
    return out


def devices_json(claim: Any) -> list[dict[str, Any]]:
    """A ResourceClaim message's `status.devices` as the API answers them in JSON. ValueError when an
    entry's `data` is not JSON."""
    out: list[dict[str, Any]] = []
    for d in claim.status.devices:
        entry: dict[str, Any] = {"driver": d.driver, "pool": d.pool, "device": d.device}
        if d.HasField("shareID"):
            entry["shareID"] = d.shareID
        if d.conditions:
            entry["conditions"] = [_condition_json(c) for c in d.conditions]
        if d.HasField("data"):
            try:
                entry["data"] = json.loads(d.data.raw)
            except ValueError as err:
                raise ValueError(f"status.devices data of device {d.device} is not JSON: {err}") from None
        out.append(entry)
    return out


def _condition_json(c: Any) -> dict[str, Any]:
    condition: dict[str, Any] = {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
    if c.HasField("observedGeneration"):
        condition["observedGeneration"] = c.observedGeneration
    if c.HasField("lastTransitionTime"):
        at = datetime.fromtimestamp(c.lastTransitionTime.seconds, UTC)
        condition["lastTransitionTime"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return condition
