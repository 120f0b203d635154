"""Does this API server keep `spec.devices[].taints` of a ResourceSlice? Decided once at start.

Two facts, never a guess: the server's version (`/version`: device taints exist from 1.33, as an
alpha field behind the DRADeviceTaints gate, beta and on by default from 1.36; the `None` effect is
valid from 1.35; 4 taints per device on 1.34, 16 from 1.35, and then at most 64 devices in a slice
whose devices carry taints) and a server-side dry-run create of a ResourceSlice whose one device
carries a taint: a server with the field disabled drops it silently, one with it enabled answers it.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from ..kubeapi import SLICE_API_VERSION, KubeAPI, KubeError
from .policy import NO_TAINTS, TaintSupport

log = logging.getLogger(__name__)

_VERSION = re.compile(r"^v?(\d+)\.(\d+)")
#: The first release with the field (alpha).
FIRST_VERSION = (1, 33)
PROBE_DEVICE = "taint-probe"


def parse_version(info: dict[str, Any]) -> tuple[int, int] | None:
    """(major, minor) from a /version answer: gitVersion first (`v1.36.2-vke.1`), else major/minor."""
    match = _VERSION.match(str(info.get("gitVersion", "")))
    if match:
        return int(match[1]), int(match[2])
    try:
        return int(str(info["major"]).rstrip("+")), int(str(info["minor"]).rstrip("+"))
    except (KeyError, ValueError):
        return None


def probe_slice(driver: str, node_name: str) -> dict[str, Any]:
    """The dry-run object: one device with one taint, in this node's pool."""
    return {
        "apiVersion": SLICE_API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{node_name}-{driver}-taint-probe-"},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 0, "resourceSliceCount": 1},
            "devices": [
                {"name": PROBE_DEVICE, "taints": [{"key": f"{driver}/probe", "effect": "NoSchedule"}]}
            ],
        },
    }


def detect(api: KubeAPI, *, driver: str, node_name: str) -> TaintSupport:
    """TaintSupport for this server; without taints when either fact cannot be read (logged)."""
    try:
        version = parse_version(api.server_version())
    except KubeError as err:
        log.warning(
            "cannot read the API server's version; publishing without device taints",
            extra={"fields": {"error": str(err)}},
        )
        return NO_TAINTS
    if version is None:
        log.warning("the API server's version is unreadable; publishing without device taints")
        return NO_TAINTS
    shown = f"{version[0]}.{version[1]}"
    if version < FIRST_VERSION:
        return TaintSupport(taints=False, none_effect=False, detail=f"server {shown} has no device taints")
    try:
        stored = api.create_slice(probe_slice(driver, node_name), dry_run=True)
    except KubeError as err:
        log.warning(
            "the dry-run that shows whether device taints are kept failed; publishing without them",
            extra={"fields": {"error": str(err), "server": shown}},
        )
        return NO_TAINTS
    devices = (stored.get("spec") or {}).get("devices") or [{}]
    kept = bool(devices[0].get("taints"))
    modern = version >= (1, 35)
    return TaintSupport(
        taints=kept,
        none_effect=modern,
        max_taints=16 if modern else 4,
        max_devices_with_taints=64 if modern else 128,
        detail=f"server {shown}: the dry-run {'kept' if kept else 'dropped'} a device taint",
    )
