"""The fake API server's server-side apply of a ResourceClaim's `status.devices` (KEP-4817), by key.

As the API server does for the list-map keyed by `driver`, `pool`, `device` and `shareID`: a field manager's
apply sets the entries it names and removes the ones it applied before and names no more; other managers'
entries stay. Entries must name an allocated device ("must be an allocated device in the claim"), carry at
most 8 conditions in metav1.Condition's shape and `data` as a JSON object of at most 10 KiB. With the
feature gate off (`served` False) the field is dropped, as `dropDisabledDRAResourceClaimDeviceStatusFields`
does for a claim that had none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

Key = tuple[str, str, str, str | None]

MAX_CONDITIONS = 8
MAX_DATA = 10 * 1024
_CONDITION_FIELDS = ("type", "status", "reason", "lastTransitionTime")


def key_of(entry: Mapping[str, Any]) -> Key:
    return (entry.get("driver", ""), entry.get("pool", ""), entry.get("device", ""), entry.get("shareID"))


def allocated_keys(claim: Mapping[str, Any]) -> set[Key]:
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return {key_of(r) for r in results}


def entry_errors(index: int, entry: Mapping[str, Any], allocated: set[Key]) -> list[str]:
    where = f"status.devices[{index}]"
    errors = []
    if key_of(entry) not in allocated:
        errors.append(f"{where}: Invalid value: {key_of(entry)!r}: must be an allocated device in the claim")
    conditions = entry.get("conditions") or []
    if len(conditions) > MAX_CONDITIONS:
        errors.append(
            f"{where}.conditions: Too many: {len(conditions)}: must have at most {MAX_CONDITIONS} items"
        )
    for i, condition in enumerate(conditions):
        for name in _CONDITION_FIELDS:
            if not condition.get(name):
                errors.append(f"{where}.conditions[{i}].{name}: Required value")
        if condition.get("status") not in ("True", "False", "Unknown"):
            errors.append(f"{where}.conditions[{i}].status: Unsupported value: {condition.get('status')!r}")
    if "data" in entry:
        data = entry["data"]
        if not isinstance(data, dict):
            errors.append(f"{where}.data: Invalid value: must be a valid JSON object")
        elif len(json.dumps(data, separators=(",", ":"))) > MAX_DATA:
            errors.append(f"{where}.data: Too long: may not be more than {MAX_DATA} bytes")
    return errors


def apply(
    claim: dict[str, Any],
    applied: Mapping[str, Any],
    manager: str,
    owners: dict[str, set[Key]],
    *,
    served: bool = True,
) -> list[str]:
    """Apply `applied` (the apply configuration's `status`) to `claim` in place as `manager`; `owners`:
    manager -> the keys it owns on this claim, updated. The validation errors, nothing changed when any."""
    status = claim.setdefault("status", {})
    if not served and not status.get("devices"):
        return []
    entries = list(applied.get("devices") or [])
    allocated = allocated_keys(claim)
    errors = [e for i, entry in enumerate(entries) for e in entry_errors(i, entry, allocated)]
    if errors:
        return errors
    named = {key_of(e): dict(e) for e in entries}
    before = owners.get(manager, set())
    kept = [e for e in status.get("devices") or [] if key_of(e) not in before and key_of(e) not in named]
    merged = kept + list(named.values())
    if merged:
        status["devices"] = merged
    else:
        status.pop("devices", None)
    owners[manager] = set(named)
    return []
