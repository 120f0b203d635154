"""Claims in Kubernetes' protobuf form for the tests (`vke_gpu_dra_testing.k8s_protobuf`'s messages)."""

from __future__ import annotations

from typing import Any

from vke_gpu_dra_core import facts
from vke_gpu_dra_testing.k8s_protobuf import PB, devices_json, envelope, open_envelope

__all__ = ["CONFIG", "NODE", "PB", "body", "claim_message", "device_status", "devices_json", "parse"]

NODE = "node-a"
#: A claim's device config as a Python JSON client stores it: whitespace, keys in the client's order.
CONFIG = b'{"kind": "GpuConfig", "apiVersion": "resource.nvidia.com/v1beta1", "sharing": {"strategy": "MPS"}}'


def claim_message(*, devices: list[Any] | None = None, allocated: bool = True) -> Any:
    claim = PB["ResourceClaim"]()
    claim.metadata.name, claim.metadata.namespace = "c1", "default"
    claim.metadata.uid, claim.metadata.resourceVersion, claim.metadata.generation = "uid-1", "42", 1
    claim.metadata.creationTimestamp.seconds = 1_800_000_000
    claim.spec.devices = b"\x0a\x03gpu"
    if allocated:
        result = claim.status.allocation.devices.results.add()
        result.request, result.driver, result.pool, result.device = "gpu", facts.DRIVER_NAME, NODE, "gpu-0"
        config = claim.status.allocation.devices.config.add(source="FromClaim", requests=["gpu"])
        config.deviceConfiguration.opaque.driver = facts.DRIVER_NAME
        config.deviceConfiguration.opaque.parameters.raw = CONFIG
        claim.status.allocation.allocationTimestamp.seconds = 1_800_000_100
        claim.status.reservedFor.add(resource="pods", name="p1", uid="pod-uid")
    for device in devices or []:
        claim.status.devices.append(device)
    return claim


def device_status(driver: str, pool: str, device: str, data: bytes = b'{"mac": "02:00:00:00:00:01"}') -> Any:
    entry = PB["AllocatedDeviceStatus"](driver=driver, pool=pool, device=device)
    entry.data.raw = data
    return entry


def body(message: Any, kind: str = "ResourceClaim", api_version: str = "resource.k8s.io/v1") -> bytes:
    return envelope(message, kind, api_version)


def parse(data: bytes) -> Any:
    """The ResourceClaim message of a protobuf body."""
    api_version, kind, raw = open_envelope(data)
    assert (api_version, kind) == ("resource.k8s.io/v1", "ResourceClaim")
    return PB["ResourceClaim"].FromString(raw)
