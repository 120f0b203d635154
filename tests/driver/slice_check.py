"""Check published devices as the apiserver would: schema (kubernetes-validate) plus the rules it skips."""

from __future__ import annotations

from collections.abc import Sequence

import kubernetes_validate
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Device, Version
from vke_gpu_dra_core.object_names import is_dns_label, is_dns_subdomain
from vke_gpu_dra_testing.fake_apiserver import C_IDENTIFIER, MAX_ATTRS_AND_CAPS, SEMVER


def resource_slice(devices: Sequence[Device], node: str = "node-a") -> dict[str, object]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{facts.DRIVER_NAME}-abcde"},
        "spec": {
            "driver": facts.DRIVER_NAME,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": [d.slice_entry() for d in devices],
        },
    }


def qualified_name_ok(name: str) -> bool:
    domain, _, ident = name.rpartition("/")
    if domain and not is_dns_subdomain(domain, 63):
        return False
    return len(ident) <= 32 and bool(C_IDENTIFIER.match(ident))


def apiserver_problems(devices: Sequence[Device]) -> list[str]:
    """Rules kubernetes-validate does not check (names, value lengths, strict semver, per-device limits)."""
    problems = []
    names = [d.name for d in devices]
    if len(set(names)) != len(names):
        problems.append(f"duplicate device names: {names}")
    if len(devices) > 128:
        problems.append(f"{len(devices)} devices > 128")
    for dev in devices:
        if not is_dns_label(dev.name):
            problems.append(f"{dev.name}: not a DNS label")
        if len(dev.attributes) + len(dev.capacity) > MAX_ATTRS_AND_CAPS:
            problems.append(f"{dev.name}: more than {MAX_ATTRS_AND_CAPS} attributes and capacities")
        for key, value in dev.attributes.items():
            if not qualified_name_ok(key):
                problems.append(f"{dev.name}: bad attribute name {key!r}")
            if isinstance(value, Version):
                if len(value.value) > 64 or not SEMVER.match(value.value):
                    problems.append(f"{dev.name}: {key}={value.value!r} is not strict semver")
            elif isinstance(value, str) and len(value) > 64:
                problems.append(f"{dev.name}: {key} longer than 64 characters")
        for key in dev.capacity:
            if not qualified_name_ok(key):
                problems.append(f"{dev.name}: bad capacity name {key!r}")
    return problems


def assert_publishable(devices: Sequence[Device]) -> None:
    kubernetes_validate.validate(resource_slice(devices), "1.34.0", strict=True)
    assert apiserver_problems(devices) == []
