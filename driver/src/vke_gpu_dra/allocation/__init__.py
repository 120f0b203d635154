"""Pure checks of a fetched ResourceClaim: is it the claim kubelet meant, allocated, and ours to prepare?"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, Device
from vke_gpu_dra_core.featuregates import FeatureGates
from vke_gpu_dra_core.objects import lookup

from ..opaque_config import (
    NO_SHARING,
    DeviceConfig,
    OpaqueConfigError,
    Sharing,
    config_for,
    decode_configs,
    resolve_sharing,
)


@dataclass(frozen=True)
class AllocatedDevice:
    """One allocation result of this driver on this node, with the config that applies to it."""

    request: str
    device: Device
    config: DeviceConfig | None
    #: What the config asks for this device (normalised and validated for the enabled gates).
    sharing: Sharing = NO_SHARING
    #: The result's `shareID` (consumable shares, Kubernetes 1.36): which share of the device this is.
    share_id: str | None = None

    @property
    def request_name(self) -> str:
        """The request without its `/subrequest` part (what kubelet matches containers against)."""
        return self.request.split("/", 1)[0]


def _label(ref: ClaimRef) -> str:
    return f"{ref.namespace}/{ref.name}"


def allocated_devices(
    ref: ClaimRef,
    claim: Mapping[str, Any],
    *,
    driver_name: str,
    pool_name: str,
    devices: Mapping[str, Device],
    gates: FeatureGates | None = None,
) -> list[AllocatedDevice]:
    """This node's devices allocated to `claim` (API JSON); raises ClaimError with one clear message."""
    label = _label(ref)
    uid = lookup(claim, "metadata", "uid")
    if uid != ref.uid:
        raise ClaimError(f"claim {label} got replaced: uid {uid}, expected {ref.uid}")
    allocation = lookup(claim, "status", "allocation")
    if not isinstance(allocation, Mapping):
        raise ClaimError(f"claim {label} is not allocated")
    results = lookup(allocation, "devices", "results") or []
    if not isinstance(results, list):
        raise ClaimError(f"claim {label}: status.allocation.devices.results must be a list")
    try:
        configs = decode_configs(lookup(allocation, "devices", "config"), driver_name)
    except OpaqueConfigError as exc:
        raise ClaimError(f"claim {label}: {exc}") from None

    allocated = [
        _one_result(
            label,
            i,
            result,
            driver_name=driver_name,
            pool_name=pool_name,
            devices=devices,
            configs=configs,
            gates=gates or FeatureGates(),
        )
        for i, result in enumerate(results)
        if isinstance(result, Mapping) and result.get("driver") == driver_name
    ]
    if not allocated:
        raise ClaimError(f"claim {label} has no devices allocated by driver {driver_name}")
    return allocated


def _one_result(
    label: str,
    index: int,
    result: Mapping[str, Any],
    *,
    driver_name: str,
    pool_name: str,
    devices: Mapping[str, Device],
    configs: list[DeviceConfig],
    gates: FeatureGates,
) -> AllocatedDevice:
    request, pool, name = result.get("request"), result.get("pool"), result.get("device")
    share_id = result.get("shareID")
    if share_id is not None and not (isinstance(share_id, str) and share_id):
        raise ClaimError(
            f"claim {label}: result {index} of {driver_name}: shareID must be a non-empty string, "
            f"got {share_id!r}"
        )
    if not (
        isinstance(request, str)
        and isinstance(pool, str)
        and isinstance(name, str)
        and request
        and pool
        and name
    ):
        raise ClaimError(f"claim {label}: result {index} of {driver_name} needs request, pool and device")
    if pool != pool_name:
        raise ClaimError(
            f"device {name} of claim {label} is in pool {pool}, but this node's pool is {pool_name}"
        )
    device = devices.get(name)
    if device is None:
        known = ", ".join(sorted(devices)) or "none"
        raise ClaimError(f"device {name} of claim {label} is not published by this node (known: {known})")
    try:
        config = config_for(request, device.device_type, name, configs)
        sharing = resolve_sharing(config, device.device_type, gates)
    except OpaqueConfigError as exc:
        raise ClaimError(f"claim {label}: {exc}") from None
    return AllocatedDevice(request, device, config, sharing, share_id)


def results_of(claim: Mapping[str, Any], driver_name: str, pool_name: str) -> list[Mapping[str, Any]]:
    """The allocation results of `driver_name` in pool `pool_name` ([] when the claim is not allocated)."""
    allocation = lookup(claim, "status", "allocation")
    if not isinstance(allocation, Mapping):
        return []
    results = lookup(allocation, "devices", "results")
    if not isinstance(results, list):
        return []
    return [
        r
        for r in results
        if isinstance(r, Mapping) and r.get("driver") == driver_name and r.get("pool") == pool_name
    ]
