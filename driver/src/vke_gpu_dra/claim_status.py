"""What the plugin reports in a prepared claim's `status.devices` (KEP-4817), computed without I/O.

Each device this node prepared for a claim gets one entry, keyed as the API keys the list (`driver`,
`pool`, `device`, and `shareID` for a consumable share): a `Ready` condition (True: the device is
prepared on the node) and `data`, an opaque JSON object naming the physical GPU (`DATA_*` keys below).
`kubectl describe resourceclaim` shows both.

The entries are written by server-side apply on the `status` subresource under one field manager
(`FIELD_MANAGER`): the API server merges them by key with what other drivers write on the same claim,
and an apply without entries removes exactly the entries this manager wrote. The apply body is the
whole intent (`apply_body`), so a write never depends on what the claim held before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, Device, PreparedDevice
from vke_gpu_dra_core.featuregates import FeatureGates
from vke_gpu_dra_core.objects import lookup

from .allocation import allocated_devices
from .kubeapi import RESOURCE_API_VERSION

#: The field manager of every status write: the plugin owns its entries under this name.
FIELD_MANAGER: Final = "vke-gpu-dra-kubelet-plugin"
#: The condition the API documents for a device "configured according to the class and claim config".
CONDITION_READY: Final = "Ready"
REASON_PREPARED: Final = "Prepared"
#: Keys of the opaque `data` object.
DATA_GPU_UUID: Final = "gpuUUID"  #: the physical GPU (a MIG device's parent)
DATA_MIG_UUID: Final = "migUUID"  #: the MIG device, when the device is one and its UUID is known
DATA_TYPE: Final = "type"  #: gpu or mig
DATA_PRODUCT: Final = "productName"
DATA_SHARING: Final = "sharingStrategy"  #: TimeSlicing or MPS; absent when the device is not shared
DATA_REQUESTS: Final = "requests"  #: the claim's requests the device was prepared for
#: The API's limit on `data` (AllocatedDeviceStatusDataMaxLength) and on conditions per device.
DATA_MAX_BYTES: Final = 10 * 1024


@dataclass(frozen=True)
class DeviceFacts:
    """What `data` says about one prepared device."""

    device_type: str
    gpu_uuid: str
    mig_uuid: str | None = None
    product: str | None = None
    sharing: str | None = None


def device_facts(device: Device, *, sharing: str | None = None, mig_uuid: str | None = None) -> DeviceFacts:
    """The facts of a published device: a MIG device names its parent GPU and its own UUID (`mig_uuid`
    overrides it: a dynamic MIG placement has one only once prepare created it)."""
    product = device.attributes.get(facts.ATTR_PRODUCT_NAME)
    product_name = product if isinstance(product, str) and product else None
    if device.device_type == facts.DEVICE_TYPE_MIG:
        parent = device.attributes.get(facts.ATTR_PARENT_UUID) or device.extra.get(facts.ATTR_PARENT_UUID, "")
        return DeviceFacts(
            facts.DEVICE_TYPE_MIG,
            gpu_uuid=str(parent),
            mig_uuid=mig_uuid or device.uuid or None,
            product=product_name,
            sharing=sharing,
        )
    return DeviceFacts(device.device_type, gpu_uuid=device.uuid, product=product_name, sharing=sharing)


def sharing_strategies(
    ref: ClaimRef,
    claim: Mapping[str, Any],
    *,
    driver_name: str,
    pool_name: str,
    devices: Mapping[str, Device],
    gates: FeatureGates,
) -> dict[tuple[str, str | None], str]:
    """(device, shareID) -> the sharing strategy its config asked for, for the shared devices of a claim
    prepare accepted; {} when the claim cannot be read that way (the status then names no strategy)."""
    try:
        allocated = allocated_devices(
            ref, claim, driver_name=driver_name, pool_name=pool_name, devices=devices, gates=gates
        )
    except ClaimError:
        return {}
    return {
        (a.device.name, a.share_id): a.sharing.strategy for a in allocated if a.sharing.strategy is not None
    }


def data_of(facts_: DeviceFacts, requests: Sequence[str]) -> dict[str, Any]:
    """The opaque `data` of one device: only the keys that have a value."""
    data: dict[str, Any] = {DATA_TYPE: facts_.device_type, DATA_GPU_UUID: facts_.gpu_uuid}
    if facts_.mig_uuid:
        data[DATA_MIG_UUID] = facts_.mig_uuid
    if facts_.product:
        data[DATA_PRODUCT] = facts_.product
    if facts_.sharing:
        data[DATA_SHARING] = facts_.sharing
    if requests:
        data[DATA_REQUESTS] = list(requests)
    return data


def rfc3339(at: datetime) -> str:
    """A condition's `lastTransitionTime`: RFC 3339 in UTC, whole seconds (as metav1.Time serialises)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_condition(at: datetime, generation: int | None) -> dict[str, Any]:
    """`Ready=True` in metav1.Condition's shape (type, status, reason, message, lastTransitionTime)."""
    condition: dict[str, Any] = {
        "type": CONDITION_READY,
        "status": "True",
        "reason": REASON_PREPARED,
        "message": "prepared on the node: CDI devices ready for the claim's containers",
        "lastTransitionTime": rfc3339(at),
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def status_entries(
    driver_name: str,
    prepared: Sequence[PreparedDevice],
    device_facts_by_key: Mapping[tuple[str, str | None], DeviceFacts],
    *,
    at: datetime,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """One `status.devices` entry per prepared device (the first of a repeated key), in prepare's order.

    `device_facts_by_key`: (device, shareID) -> its facts; a device without facts gets the condition and
    no `data`. Raises ValueError when an entry's `data` would exceed the API's limit.
    """
    entries: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str | None]] = set()
    for dev in prepared:
        key = (dev.pool_name, dev.device_name, dev.share_id)
        if key in seen:
            continue
        seen.add(key)
        entry: dict[str, Any] = {"driver": driver_name, "pool": dev.pool_name, "device": dev.device_name}
        if dev.share_id is not None:
            entry["shareID"] = dev.share_id
        entry["conditions"] = [ready_condition(at, generation)]
        known = device_facts_by_key.get((dev.device_name, dev.share_id))
        if known is not None:
            data = data_of(known, dev.request_names)
            size = len(_compact(data))
            if size > DATA_MAX_BYTES:
                raise ValueError(
                    f"status.devices data of device {dev.device_name} is {size} bytes; "
                    f"the API allows at most {DATA_MAX_BYTES}"
                )
            entry["data"] = data
        entries.append(entry)
    return entries


def apply_body(ref: ClaimRef, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The server-side apply configuration of a claim's status: our entries, all of them (none removes
    ours). `metadata.uid` makes the write fail (422, the uid is immutable) on a claim re-created under the
    same name."""
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid},
        "status": {"devices": [dict(e) for e in entries]},
    }


def kept_entries(claim: Mapping[str, Any], driver_name: str, pool_name: str) -> list[Mapping[str, Any]]:
    """The entries of `driver_name` in pool `pool_name` that a claim (as the API answered) holds."""
    found = lookup(claim, "status", "devices") or []
    if not isinstance(found, list):
        return []
    return [
        e
        for e in found
        if isinstance(e, Mapping) and e.get("driver") == driver_name and e.get("pool") == pool_name
    ]


def generation_of(claim: Mapping[str, Any]) -> int | None:
    generation = lookup(claim, "metadata", "generation")
    return generation if isinstance(generation, int) and not isinstance(generation, bool) else None


def _compact(data: Mapping[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()
