"""Which ResourceSlice fields this API server keeps: decided once at start, read by everything that
publishes (the health taints, the slice entries, consumable shares).

Two facts, never a version table alone. The server's version (`/version`) says which fields can exist
at all and their limits (the `None` taint effect and 16 taints per device from 1.35). Server-side
dry-run creates say whether the server keeps each one: a server whose feature gate is off drops a field
silently, so the dry-run's answer simply lacks it. This matters even where the version looks new
enough: a 1.36 API server run with `--emulated-version=1.34` answers `/version` with 1.36 and drops
every field below, as a 1.34 server does.

| fields (of `spec.devices[]` unless said) | feature gate | 1.34, 1.35 | 1.36 | 1.37 |
|---|---|---|---|---|
| `taints` | DRADeviceTaints | alpha, off | beta, on | GA, on |
| `allowMultipleAllocations`, `requestPolicy` | DRAConsumableCapacity | alpha, off | beta, on | same |
| `bindsToNode`, `binding(Failure)Conditions` | DRADeviceBindingConditions | alpha, off | beta, on | same |
| `spec.sharedCounters`, `consumesCounters` | DRAPartitionableDevices | alpha, off | beta, on | same |

A 1.37 server keeps device taints with its default gates: the dry-run shows it like any other, so nothing
needs setting. DRADeviceTaints is GA there but not yet locked (from 1.38), so a 1.37 server started with
`--feature-gates=DRADeviceTaints=false` still drops them, and the dry-run says so.

Shared counters changed shape (KEP-4815): on 1.34 a slice carries `sharedCounters` beside the devices
that consume them; from 1.35 counters live in a slice of their own ("only one of `sharedCounters` or
`devices` is allowed"). So the probes are two dry-runs: one device carrying every device field (the
server answers field by field), and one slice carrying only `sharedCounters`, in the shape of the
server's version. The gates and their releases are core's table (`vke_gpu_dra_core.dra_gates`), which
the stack config (`cluster.kubernetesVersion`) and the capacity planner (`--kubernetes-version`) read.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from vke_gpu_dra_core import dra_gates

from .kubeapi import SLICE_API_VERSION, KubeAPI, KubeError
from .metrics import Metrics

log = logging.getLogger(__name__)

_VERSION = re.compile(r"^v?(\d+)\.(\d+)")
#: The first release with any of the fields (taints and shared counters, alpha).
FIRST_VERSION: Final = (1, 33)
#: The first release whose shared counters live in a slice of their own.
SEPARATE_COUNTERS_VERSION: Final = (1, 35)
#: Dry-run creates one detection sends (on a server of FIRST_VERSION or later).
DRY_RUNS: Final = 2
PROBE_DEVICE: Final = "feature-probe"
PROBE_COUNTER_SET: Final = "feature-probe"

#: The names the log line and the metric use, one per field group (core's `dra_gates.SLICE_FIELDS`).
TAINTS: Final = "taints"
MULTIPLE_ALLOCATIONS: Final = "allowMultipleAllocations"
BINDING_CONDITIONS: Final = "bindingConditions"
SHARED_COUNTERS: Final = "sharedCounters"
FIELDS: Final = tuple(dra_gates.SLICE_FIELDS)

CounterShape = Literal["beside-devices", "own-slice"]


@dataclass(frozen=True)
class ClusterFeatures:
    """What the API server keeps of a ResourceSlice (see the module docstring)."""

    #: (major, minor) from /version; None when unreadable.
    version: tuple[int, int] | None = None
    taints: bool = False
    multiple_allocations: bool = False
    binding_conditions: bool = False
    #: Where the server keeps shared counters (None: it drops them).
    shared_counters: CounterShape | None = None
    #: One line for the log: how this was decided.
    detail: str = "not detected"

    @property
    def shown_version(self) -> str:
        return f"{self.version[0]}.{self.version[1]}" if self.version else "unknown"

    @property
    def kept(self) -> dict[str, bool]:
        """Field group -> kept, in FIELDS order."""
        return {
            TAINTS: self.taints,
            MULTIPLE_ALLOCATIONS: self.multiple_allocations,
            BINDING_CONDITIONS: self.binding_conditions,
            SHARED_COUNTERS: self.shared_counters is not None,
        }

    @property
    def modern_taints(self) -> bool:
        """The `None` effect and 16 taints per device (1.35+)."""
        return self.version is not None and self.version >= (1, 35)


NONE_KEPT: Final = ClusterFeatures()


def parse_version(info: Mapping[str, Any]) -> tuple[int, int] | None:
    """(major, minor) from a /version answer: gitVersion first (`v1.36.2-vke.1`), else major/minor."""
    match = _VERSION.match(str(info.get("gitVersion", "")))
    if match:
        return int(match[1]), int(match[2])
    try:
        return int(str(info["major"]).rstrip("+")), int(str(info["minor"]).rstrip("+"))
    except (KeyError, ValueError):
        return None


def _pool(driver: str, node_name: str, what: str) -> dict[str, Any]:
    return {
        "apiVersion": SLICE_API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{node_name}-{driver}-{what}-"},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 0, "resourceSliceCount": 1},
        },
    }


def device_probe(driver: str, node_name: str) -> dict[str, Any]:
    """The first dry-run object: one device with every device field this driver may publish."""
    obj = _pool(driver, node_name, "feature-probe")
    obj["spec"]["devices"] = [
        {
            "name": PROBE_DEVICE,
            "taints": [{"key": f"{driver}/probe", "effect": "NoSchedule"}],
            "allowMultipleAllocations": True,
            "capacity": {
                "memory": {
                    "value": "1Gi",
                    "requestPolicy": {
                        "default": "1Gi",
                        "validRange": {"min": "1Mi", "max": "1Gi", "step": "1Mi"},
                    },
                }
            },
            "bindsToNode": True,
            "bindingConditions": [f"{driver}/probe"],
            "bindingFailureConditions": [f"{driver}/probe-failed"],
        }
    ]
    return obj


def counters_probe(driver: str, node_name: str, shape: CounterShape) -> dict[str, Any]:
    """The second dry-run object: a counter set, in the shape of the server's version."""
    obj = _pool(driver, node_name, "counter-probe")
    counters = {"memory": {"value": "1Gi"}}
    obj["spec"]["sharedCounters"] = [{"name": PROBE_COUNTER_SET, "counters": counters}]
    if shape == "beside-devices":
        consumes = [{"counterSet": PROBE_COUNTER_SET, "counters": counters}]
        obj["spec"]["devices"] = [{"name": PROBE_DEVICE, "consumesCounters": consumes}]
    return obj


def _dry_run(api: KubeAPI, obj: dict[str, Any], what: str, shown: str) -> dict[str, Any] | None:
    try:
        return api.create_slice(obj, dry_run=True)
    except KubeError as err:
        log.warning(
            f"the dry-run that shows whether the API server keeps {what} failed; not publishing them",
            extra={"fields": {"error": str(err), "server": shown}},
        )
        return None


def detect(api: KubeAPI, *, driver: str, node_name: str) -> ClusterFeatures:
    """The fields this server keeps; none when a fact cannot be read (logged). Nothing is stored."""
    try:
        version = parse_version(api.server_version())
    except KubeError as err:
        log.warning(
            "cannot read the API server's version; publishing no optional ResourceSlice fields",
            extra={"fields": {"error": str(err)}},
        )
        return NONE_KEPT
    if version is None:
        log.warning("the API server's version is unreadable; publishing no optional ResourceSlice fields")
        return NONE_KEPT
    shown = f"{version[0]}.{version[1]}"
    if version < FIRST_VERSION:
        return ClusterFeatures(version=version, detail=f"server {shown} has none of the fields")
    stored = _dry_run(api, device_probe(driver, node_name), "device fields", shown)
    device: Mapping[str, Any] = {}
    if stored is not None:
        device = ((stored.get("spec") or {}).get("devices") or [{}])[0]
    capacity = (device.get("capacity") or {}).get("memory") or {}
    shape: CounterShape = "own-slice" if version >= SEPARATE_COUNTERS_VERSION else "beside-devices"
    counters = _dry_run(api, counters_probe(driver, node_name, shape), "shared counters", shown)
    features = ClusterFeatures(
        version=version,
        taints=bool(device.get("taints")),
        multiple_allocations=bool(device.get("allowMultipleAllocations")) and "requestPolicy" in capacity,
        binding_conditions=bool(device.get("bindingConditions")),
        shared_counters=shape if counters and (counters.get("spec") or {}).get("sharedCounters") else None,
    )
    kept = [name for name, on in features.kept.items() if on]
    said = ", ".join(kept) if kept else "none of the fields"
    return dataclasses.replace(features, detail=f"server {shown}: the dry-runs kept {said}")


def report(features: ClusterFeatures, metrics: Metrics) -> None:
    """Log the set once and export it (`vke_gpu_dra_cluster_slice_field{field}` 1 kept, 0 dropped)."""
    kept = features.kept
    log.info(
        "ResourceSlice fields this API server keeps",
        extra={
            "fields": {
                "server": features.shown_version,
                "kept": [name for name, on in kept.items() if on],
                "dropped": [name for name, on in kept.items() if not on],
                "shared_counters": features.shared_counters,
                "detected": features.detail,
            }
        },
    )
    for name, on in kept.items():
        metrics.cluster_slice_field.labels(field=name).set(1 if on else 0)
