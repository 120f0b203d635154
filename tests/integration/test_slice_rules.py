"""Our ResourceSlices follow 1.38's rules on every release (kubernetes 1.38 changelog): attribute and
capacity names short (no driver prefix, #142218) and never with more than one `/` (#141644), a per-device
node selector of one term at most (#141213), taints with `timeAdded` (#141107). What the real plugin
publishes on the real 1.34, 1.37 and 1.38 servers, for the driver gates that change its devices, is
created again with strict field validation (`fieldValidation=Strict`, a dry run): the server knows every
field and warns about none.
"""

from __future__ import annotations

import json
import ssl
import urllib.request
from typing import Any

import pytest
from vke_gpu_dra_core import facts

from .cluster import Cluster
from .controlplane import wait_until
from .test_planner_agreement import MEMORY_GIB, VCPUS

H100 = "NVIDIA H100 80GB HBM3"
#: The driver gates that change what a device carries (shares, MIG placements and their counters).
DRIVER_GATES = ["", "ConsumableShares=true,DynamicMIG=true"]


def problems(item: dict[str, Any]) -> list[str]:
    """What breaks 1.38's rules in one ResourceSlice."""
    found = []
    for device in item["spec"].get("devices") or []:
        name = device["name"]
        for kind in ("attributes", "capacity"):
            for key in device.get(kind) or {}:
                if key.count("/") > 1:
                    found.append(f"{name}: {kind} {key!r} has more than one '/'")
                if key.startswith(f"{facts.DRIVER_NAME}/"):
                    found.append(f"{name}: {kind} {key!r} carries the driver's own prefix")
        terms = (device.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
        if len(terms) > 1:
            found.append(f"{name}: a node selector of {len(terms)} terms")
        found += [
            f"{name}: taint {t['key']} without timeAdded"
            for t in device.get("taints") or []
            if not t.get("timeAdded")
        ]
    return found


def strict_dry_run(cluster: Cluster, item: dict[str, Any]) -> tuple[int, list[str]]:
    """POST a copy of `item` with strict field validation as a dry run: the status and the warnings."""
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{item['metadata']['name']}-strict"},
        "spec": item["spec"],
    }
    api = cluster.api
    request = urllib.request.Request(
        f"{api.server}/apis/resource.k8s.io/v1/resourceslices?dryRun=All&fieldValidation=Strict",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {api.token}", "Content-Type": "application/json"},
    )
    context = ssl.create_default_context(cafile=str(api.ca_file))
    with urllib.request.urlopen(request, context=context, timeout=30) as response:
        return response.status, response.headers.get_all("Warning") or []


@pytest.mark.parametrize("gates", DRIVER_GATES, ids=["default", "shares-and-mig"])
def test_published_slices_keep_1_38s_rules_and_pass_strict_validation(
    each_cluster: Cluster, monkeypatch: pytest.MonkeyPatch, gates: str
) -> None:
    cluster = each_cluster
    monkeypatch.setenv("FEATURE_GATES", gates)
    objects = cluster.install_chart()
    name = cluster.add_node("rules", cpu=str(VCPUS), memory=f"{MEMORY_GIB}Gi")["metadata"]["name"]
    pod = cluster.plugin_pod(objects, name)
    [service_account] = [o for o in objects if o["kind"] == "ServiceAccount"]
    plugin = cluster.start_plugin(
        name, cluster.token(service_account["metadata"]["name"], pod), gpus=2, product=H100
    )
    published = wait_until(lambda: cluster.slices_of(name) or plugin.process.poll() is not None, timeout=60)
    assert published and plugin.process.poll() is None, f"no slices published:\n{plugin.log}"
    slices = cluster.slices_of(name)
    assert [p for item in slices for p in problems(item)] == []
    for item in slices:
        status, warnings = strict_dry_run(cluster, item)
        assert (status, warnings) == (201, []), f"{cluster.plane.version}: {item['metadata']['name']}"


@pytest.mark.parametrize(
    ("device", "found"),
    [
        ({"attributes": {"a/b/c": {"string": "x"}}}, "has more than one '/'"),
        ({"capacity": {f"{facts.DRIVER_NAME}/memory": {"value": "1Gi"}}}, "carries the driver's own prefix"),
        ({"nodeSelector": {"nodeSelectorTerms": [{}, {}]}}, "a node selector of 2 terms"),
        ({"taints": [{"key": "k", "effect": "NoSchedule"}]}, "taint k without timeAdded"),
    ],
)
def test_each_rule_is_found(device: dict[str, Any], found: str) -> None:
    """The check itself: each broken rule is named (the published slices above break none)."""
    [problem] = problems({"spec": {"devices": [{"name": "gpu-0", **device}]}})
    assert problem.startswith("gpu-0: ") and found in problem
