"""Does this API server keep KEP-4815 shared counters in ResourceSlices, and in which layout? Decided
once at start, for dynamic MIG, the way `taint_support.detect` decides device taints.

Two facts, never a guess: the server's version (`/version`: shared counters exist from 1.34, beside the
devices consuming them; from 1.35 in slices of their own, as NVIDIA's `shouldUseSplitResourceSlices`
decides; the DRAPartitionableDevices gate is alpha and off by default until 1.36, beta and on in 1.36)
and a server-side dry-run create of a ResourceSlice carrying a counter set in that layout: a server with
the field disabled drops it silently, one with it enabled keeps it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from ..kubeapi import SLICE_API_VERSION, KubeAPI, KubeError
from .taint_support import parse_version

log = logging.getLogger(__name__)

#: The first release with shared counters (alpha, beside the devices), and the one that split them off.
FIRST_VERSION = (1, 34)
SPLIT_VERSION = (1, 35)
PROBE_COUNTER_SET = "counter-probe"

SharedCountersLayout = Literal["inline", "split"]


@dataclass(frozen=True)
class SharedCountersSupport:
    """Where the server keeps shared counters (`layout` None: it does not keep them)."""

    layout: SharedCountersLayout | None
    #: The server's minor version (1.<minor>), for the slice limits of that version; 0 when unknown.
    kubernetes_minor: int
    detail: str


def probe_slice(driver: str, node_name: str, layout: SharedCountersLayout) -> dict[str, Any]:
    """The dry-run object: one counter set, with (1.34) or without (1.35+) a device consuming it."""
    spec: dict[str, Any] = {
        "driver": driver,
        "nodeName": node_name,
        "pool": {"name": node_name, "generation": 0, "resourceSliceCount": 1},
        "sharedCounters": [{"name": PROBE_COUNTER_SET, "counters": {"probe": {"value": "1"}}}],
    }
    if layout == "inline":
        spec["devices"] = [
            {
                "name": "counter-probe",
                "consumesCounters": [
                    {"counterSet": PROBE_COUNTER_SET, "counters": {"probe": {"value": "1"}}}
                ],
            }
        ]
    return {
        "apiVersion": SLICE_API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{node_name}-{driver}-counter-probe-"},
        "spec": spec,
    }


def detect_shared_counters(api: KubeAPI, *, driver: str, node_name: str) -> SharedCountersSupport:
    """SharedCountersSupport for this server; layout None when either fact cannot be read (logged)."""
    try:
        version = parse_version(api.server_version())
    except KubeError as err:
        log.warning("cannot read the API server's version", extra={"fields": {"error": str(err)}})
        return SharedCountersSupport(None, 0, f"cannot read the API server's version: {err}")
    if version is None:
        return SharedCountersSupport(None, 0, "the API server's version is unreadable")
    shown = f"{version[0]}.{version[1]}"
    if version < FIRST_VERSION:
        return SharedCountersSupport(None, version[1], f"server {shown} has no shared counters")
    layout: SharedCountersLayout = "split" if version >= SPLIT_VERSION else "inline"
    try:
        stored = api.create_slice(probe_slice(driver, node_name, layout), dry_run=True)
    except KubeError as err:
        return SharedCountersSupport(
            None, version[1], f"server {shown}: the dry-run of a slice with shared counters failed: {err}"
        )
    kept = bool((stored.get("spec") or {}).get("sharedCounters"))
    return SharedCountersSupport(
        layout if kept else None,
        version[1],
        f"server {shown}: the dry-run {'kept' if kept else 'dropped'} shared counters ({layout} layout; "
        "feature gate DRAPartitionableDevices)",
    )
