"""Builders for ResourceClaim API JSON as the cluster side hands it to DeviceState.prepare."""

from __future__ import annotations

from typing import Any

from vke_gpu_dra_core import facts

REQUEST = {"name": "gpu", "exactly": {"deviceClassName": facts.DEVICE_CLASS_GPU.name}}


def result(device: str, request: str = "gpu", pool: str = "node-a", driver: str = facts.DRIVER_NAME) -> dict:
    return {"request": request, "driver": driver, "pool": pool, "device": device}


def opaque(
    parameters: Any,
    *,
    source: str = "FromClaim",
    requests: list[str] | None = None,
    driver: str = facts.DRIVER_NAME,
) -> dict:
    entry: dict[str, Any] = {"source": source, "opaque": {"driver": driver, "parameters": parameters}}
    if requests is not None:
        entry["requests"] = requests
    return entry


def gpu_config(**fields: Any) -> dict:
    return {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", **fields}


def mig_config(**fields: Any) -> dict:
    return {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "MigDeviceConfig", **fields}


def claim(
    uid: str,
    *results: dict,
    namespace: str = "default",
    name: str = "c",
    config: list[dict] | None = None,
    allocated: bool = True,
) -> dict:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
        "spec": {"devices": {"requests": [REQUEST]}},
        "status": {},
    }
    if allocated:
        devices: dict[str, Any] = {"results": list(results)}
        if config is not None:
            devices["config"] = config
        obj["status"]["allocation"] = {"devices": devices}
    return obj
