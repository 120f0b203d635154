"""The apiserver's rules for a ResourceSlice: the JSON schema of the emulated version (kubernetes-validate,
strict) and the rules the schema does not express (names, counts, attributes, taints, gated fields)."""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
from vke_gpu_dra_core.object_names import is_dns_label, is_dns_subdomain

from .errors import invalid
from .gates import K8S_VERSION, version_tuple

MAX_DEVICES = 128
MAX_ATTRS_AND_CAPS = 32

C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


def _qualified_name(name: str) -> bool:
    domain, _, ident = name.rpartition("/")
    if domain and not is_dns_subdomain(domain, 63):
        return False
    return 0 < len(ident) <= 32 and bool(C_IDENTIFIER.match(ident))


def slice_rule_errors(obj: dict[str, Any]) -> list[str]:
    """ResourceSlice rules the apiserver enforces and the JSON schema does not."""
    errors: list[str] = []
    spec = obj.get("spec") or {}
    name = obj.get("metadata", {}).get("name", "")
    if name and not is_dns_subdomain(name):
        errors.append(f"metadata.name: Invalid value: {name!r}: must be a DNS subdomain")
    driver = spec.get("driver", "")
    if not is_dns_subdomain(driver, 63):
        errors.append(
            f"spec.driver: Invalid value: {driver!r}: must be a DNS subdomain of at most 63 characters"
        )
    pool = spec.get("pool") or {}
    pool_name = pool.get("name", "")
    if not (0 < len(pool_name) <= 253 and all(is_dns_subdomain(p) for p in pool_name.split("/"))):
        errors.append(f"spec.pool.name: Invalid value: {pool_name!r}")
    if int(pool.get("resourceSliceCount", 0)) <= 0:
        errors.append("spec.pool.resourceSliceCount: Invalid value: must be greater than zero")
    if int(pool.get("generation", -1)) < 0:
        errors.append("spec.pool.generation: Invalid value: must be greater than or equal to zero")
    chosen = [k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k)]
    if len(chosen) != 1:
        errors.append(
            "spec: Invalid value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
            f"`perDeviceNodeSelection` is required, got {chosen}"
        )
    devices = spec.get("devices") or []
    if len(devices) > MAX_DEVICES:
        errors.append(f"spec.devices: Too many: {len(devices)}: must have at most {MAX_DEVICES} items")
    names = [dev.get("name", "") for dev in devices]
    errors += [
        f"spec.devices: Duplicate value: {n!r}" for n in sorted({n for n in names if names.count(n) > 1})
    ]
    for i, dev in enumerate(devices):
        errors += device_rule_errors(f"spec.devices[{i}]", dev)
    return errors


def device_rule_errors(path: str, dev: dict[str, Any]) -> list[str]:
    errors: list[str] = []
    dname = dev.get("name", "")
    if not is_dns_label(dname):
        errors.append(f"{path}.name: Invalid value: {dname!r}: must be a DNS label")
    attrs, caps = dev.get("attributes") or {}, dev.get("capacity") or {}
    if len(attrs) + len(caps) > MAX_ATTRS_AND_CAPS:
        errors.append(f"{path}: Too many: attributes and capacities must be at most {MAX_ATTRS_AND_CAPS}")
    errors += [
        f"{path}.{kind}[{key}]: Invalid value: not a qualified name"
        for kind, keys in (("attributes", attrs), ("capacity", caps))
        for key in keys
        if not _qualified_name(key)
    ]
    for key, value in attrs.items():
        kinds = [k for k in ("int", "bool", "string", "version") if k in value]
        if len(kinds) != 1:
            errors.append(f"{path}.attributes[{key}]: Invalid value: exactly one value must be specified")
            continue
        v = value[kinds[0]]
        if kinds[0] in ("string", "version") and len(v) > 64:
            errors.append(f"{path}.attributes[{key}].{kinds[0]}: Too long: may not be more than 64 bytes")
        if kinds[0] == "version" and not SEMVER.match(v):
            errors.append(
                f"{path}.attributes[{key}].version: Invalid value: {v!r}: "
                "must be a string compatible with semver.org spec 2.0.0"
            )
    return errors


LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _label_key(key: str) -> bool:
    """A label key (validation.IsQualifiedName): optional DNS-subdomain prefix, a name of 1-63 characters."""
    prefix, _, name = key.rpartition("/")
    if prefix and not is_dns_subdomain(prefix):
        return False
    return 0 < len(name) <= 63 and bool(LABEL_VALUE.match(name))


def gated_rule_errors(obj: dict[str, Any], version: str) -> list[str]:
    """The apiserver's rules of the gated fields the fake checks: one of counters or devices from 1.35,
    a `requestPolicy` only on a device that allows multiple allocations."""
    spec = obj.get("spec") or {}
    errors: list[str] = []
    if version_tuple(version) >= (1, 35) and spec.get("sharedCounters") and spec.get("devices"):
        errors.append('spec: Invalid value: "": only one of `sharedCounters` or `devices` is allowed')
    for i, dev in enumerate(spec.get("devices") or []):
        for name, capacity in (dev.get("capacity") or {}).items():
            policy = isinstance(capacity, dict) and "requestPolicy" in capacity
            if policy and not dev.get("allowMultipleAllocations"):
                errors.append(
                    f"spec.devices[{i}].capacity[{name}].requestPolicy: Forbidden: "
                    "allowMultipleAllocations must be true"
                )
    return errors


def taint_rule_errors(obj: dict[str, Any], version: str) -> list[str]:
    """The apiserver's device-taint validation of that version."""
    v = version_tuple(version)
    max_taints = 4 if v < (1, 35) else 16
    effects = ("NoSchedule", "NoExecute") if v < (1, 35) else ("None", "NoSchedule", "NoExecute")
    errors: list[str] = []
    devices = (obj.get("spec") or {}).get("devices") or []
    if v >= (1, 35) and any(d.get("taints") for d in devices) and len(devices) > 64:
        errors.append(
            f"spec.devices: Too many: {len(devices)}: must have at most 64 items when devices have taints"
        )
    for i, dev in enumerate(devices):
        taints = dev.get("taints") or []
        if len(taints) > max_taints:
            errors.append(
                f"spec.devices[{i}].taints: Too many: {len(taints)}: must have at most {max_taints} items"
            )
        for j, taint in enumerate(taints):
            path = f"spec.devices[{i}].taints[{j}]"
            if not _label_key(str(taint.get("key", ""))):
                errors.append(f"{path}.key: Invalid value: {taint.get('key')!r}: must be a qualified name")
            value = str(taint.get("value", ""))
            if len(value) > 63 or not LABEL_VALUE.match(value):
                errors.append(f"{path}.value: Invalid value: {value!r}: must be a valid label value")
            if taint.get("effect") not in effects:
                errors.append(
                    f"{path}.effect: Unsupported value: {taint.get('effect')!r}: supported values: "
                    + ", ".join(f'"{e}"' for e in effects)
                )
    return errors


def validate_slice(obj: dict[str, Any], version: str = K8S_VERSION) -> None:
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as err:
        raise invalid(obj, [str(err.message) if hasattr(err, "message") else str(err)]) from err
    errors = slice_rule_errors(obj) + taint_rule_errors(obj, version) + gated_rule_errors(obj, version)
    if errors:
        raise invalid(obj, errors)
