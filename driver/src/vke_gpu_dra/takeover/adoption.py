"""Claims adopted from NVIDIA's plugin: the ledger kept in the plugin data directory, and the answer
kubelet's next prepare of an adopted claim gets.

The ledger (`vke-gpu-dra-takeover.json`, written only by this plugin, atomically) holds a copy of each
claim read from NVIDIA's checkpoint and whether its NVIDIA leftovers were released (undone) yet. It is
what keeps a claim released once unprepared although NVIDIA's file, which is never written, still
lists it. Format (JSON, version 1):

    {"format": "vke-gpu-dra-takeover", "version": 1,
     "claims": [{"uid", "state": "PrepareStarted"|"PrepareCompleted", "released": bool,
                 "namespace", "name" (only when known: NVIDIA's file or kubelet's prepare named it),
                 "groups": [{"mpsDaemonId", "devices": [{"kind", "uuid", "deviceName", "poolName",
                                                         "requests", "cdiDeviceIds"}]}],
                 "allocated": [{"request", "driver", "pool", "device"}], "sharingStrategies": [...]}]}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Device, PreparedDevice

from ..sharing.mps import mps_container_edits
from .nvidia_checkpoint import (
    AllocatedResult,
    NvidiaCheckpoint,
    NvidiaClaim,
    NvidiaClaimState,
    NvidiaDevice,
    NvidiaGroup,
)

LEDGER_FILE: Final = "vke-gpu-dra-takeover.json"
FORMAT: Final = "vke-gpu-dra-takeover"
VERSION: Final = 1
#: NVIDIA's MPS control files root in the plugin data directory and its workload mount points.
NVIDIA_MPS_DIR: Final = "mps"
NVIDIA_MPS_PIPE_IN_CONTAINER: Final = "/tmp/nvidia-mps"


class LedgerError(ValueError):
    """The takeover ledger is not valid (bad JSON or shape)."""


class AdoptionError(ValueError):
    """An adopted claim cannot be answered on this node (a device is gone or changed)."""


@dataclass(frozen=True)
class LedgerEntry:
    claim: NvidiaClaim
    released: bool = False


# ------------------------------------------------------------------------------------ ledger JSON


def _claim_to_json(claim: NvidiaClaim, released: bool) -> dict[str, Any]:
    return {
        "uid": claim.uid,
        "state": claim.state.value,
        "released": released,
        "groups": [
            {
                "mpsDaemonId": g.mps_daemon_id,
                "devices": [
                    {
                        "kind": d.kind,
                        "uuid": d.uuid,
                        "deviceName": d.device_name,
                        "poolName": d.pool_name,
                        "requests": list(d.requests),
                        "cdiDeviceIds": list(d.cdi_device_ids),
                    }
                    for d in g.devices
                ],
            }
            for g in claim.groups
        ],
        "allocated": [
            {"request": a.request, "driver": a.driver, "pool": a.pool, "device": a.device}
            for a in claim.allocated
        ],
        "sharingStrategies": sorted(claim.sharing_strategies),
        **({"namespace": claim.namespace, "name": claim.name} if claim.name else {}),
    }


def _claim_from_json(raw: Any, where: str) -> LedgerEntry:
    try:
        groups = tuple(
            NvidiaGroup(
                tuple(
                    NvidiaDevice(
                        str(d["kind"]),
                        str(d["uuid"]),
                        str(d["deviceName"]),
                        str(d["poolName"]),
                        tuple(str(r) for r in d["requests"]),
                        tuple(str(i) for i in d["cdiDeviceIds"]),
                    )
                    for d in g["devices"]
                ),
                str(g["mpsDaemonId"]),
            )
            for g in raw["groups"]
        )
        allocated = tuple(
            AllocatedResult(str(a["request"]), str(a["driver"]), str(a["pool"]), str(a["device"]))
            for a in raw["allocated"]
        )
        claim = NvidiaClaim(
            str(raw["uid"]),
            NvidiaClaimState(raw["state"]),
            groups,
            allocated,
            frozenset(str(s) for s in raw["sharingStrategies"]),
            str(raw.get("namespace", "")),
            str(raw.get("name", "")),
        )
        released = raw["released"]
    except (KeyError, TypeError, ValueError) as exc:
        raise LedgerError(f"{where}: {type(exc).__name__}: {exc}") from None
    if not isinstance(released, bool):
        raise LedgerError(f"{where}.released must be true or false, got {released!r}")
    return LedgerEntry(claim, released)


def encode(entries: Mapping[str, LedgerEntry]) -> bytes:
    claims = [_claim_to_json(entries[uid].claim, entries[uid].released) for uid in sorted(entries)]
    document = {"format": FORMAT, "version": VERSION, "claims": claims}
    return json.dumps(document, indent=2, sort_keys=True).encode() + b"\n"


def decode(data: bytes) -> dict[str, LedgerEntry]:
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LedgerError(f"not valid JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise LedgerError(f"format must be {FORMAT!r}")
    if document.get("version") != VERSION:
        raise LedgerError(f"version must be {VERSION}, got {document.get('version')!r}")
    claims = document.get("claims")
    if not isinstance(claims, list):
        raise LedgerError(f"claims must be a list, got {type(claims).__name__}")
    entries: dict[str, LedgerEntry] = {}
    for i, raw in enumerate(claims):
        entry = _claim_from_json(raw, f"claims[{i}]")
        entries[entry.claim.uid] = entry
    return entries


def read_ledger(path: Path) -> dict[str, LedgerEntry]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    return decode(data)


# --------------------------------------------------------------------------------- pure decisions


def merge(ledger: Mapping[str, LedgerEntry], nvidia: NvidiaCheckpoint) -> dict[str, LedgerEntry]:
    """The ledger with NVIDIA's claims it does not know yet added (adopted); known claims stay as they are.

    A claim already in the ledger keeps its state, so a claim released here stays released although
    NVIDIA's file still lists it. A released claim NVIDIA's file no longer lists is dropped (it can
    never be adopted again), so the ledger does not grow across moves back and forth.
    """
    merged = {uid: e for uid, e in ledger.items() if not e.released or uid in nvidia.claims}
    for uid, claim in nvidia.claims.items():
        merged.setdefault(uid, LedgerEntry(claim))
    return merged


def nvidia_mps_root(plugin_data_dir: Path, daemon_id: str) -> Path:
    return plugin_data_dir / NVIDIA_MPS_DIR / daemon_id


def nvidia_mps_edits(plugin_data_dir: Path, daemon_id: str) -> dict[str, Any]:
    """NVIDIA's container edits for a workload of its MPS daemon (GetCDIContainerEdits)."""
    return mps_container_edits(nvidia_mps_root(plugin_data_dir, daemon_id), NVIDIA_MPS_PIPE_IN_CONTAINER)


@dataclass(frozen=True)
class AdoptedAnswer:
    """What a prepare of an adopted, completed claim writes and answers."""

    devices: list[Device]
    prepared: list[PreparedDevice]
    #: Per-device CDI edits: NVIDIA's MPS daemon's pipe and shm, for devices it served.
    extra_edits: dict[str, dict[str, Any]]


def answer(
    claim: NvidiaClaim,
    *,
    pool_name: str,
    devices: Mapping[str, Device],
    plugin_data_dir: Path,
    claim_device_id: Callable[[str, str], str],
) -> AdoptedAnswer:
    """The same devices NVIDIA prepared, under this plugin's CDI ids (`claim_device_id(uid, name)`).

    NVIDIA's sharing settings and MPS daemon stay as they are (they are undone at unprepare); a device
    NVIDIA served with an MPS daemon keeps that daemon's pipe and shm. Raises AdoptionError when a
    device is no longer published here or now has another UUID.
    """
    found: list[Device] = []
    prepared: list[PreparedDevice] = []
    edits: dict[str, dict[str, Any]] = {}
    for group in claim.groups:
        for d in group.devices:
            device = devices.get(d.device_name)
            if device is None:
                raise AdoptionError(
                    f"NVIDIA's plugin prepared it with device {d.device_name}, "
                    "which this node does not publish"
                )
            if d.uuid and device.uuid != d.uuid:
                raise AdoptionError(
                    f"NVIDIA's plugin prepared it with device {d.device_name} = {d.uuid}, "
                    f"which is now {device.uuid}"
                )
            if device not in found:
                found.append(device)
            prepared.append(
                PreparedDevice(
                    request_names=d.requests,
                    pool_name=pool_name,
                    device_name=d.device_name,
                    cdi_device_ids=(claim_device_id(claim.uid, d.device_name),),
                )
            )
            if group.mps_daemon_id:
                edits[d.device_name] = nvidia_mps_edits(plugin_data_dir, group.mps_daemon_id)
    return AdoptedAnswer(found, prepared, edits)


def device_names(claim: NvidiaClaim, driver_name: str = facts.DRIVER_NAME) -> list[str]:
    """The claim's devices on this node: those NVIDIA prepared, else (PrepareStarted) those allocated."""
    names = [d.device_name for g in claim.groups for d in g.devices]
    if not names:
        names = [a.device for a in claim.allocated if a.driver == driver_name]
    return list(dict.fromkeys(names))


def in_use_by_others(uid: str, entries: Mapping[str, LedgerEntry], driver_name: str) -> set[str]:
    """Device names of the other adopted claims that are not released yet."""
    used: set[str] = set()
    for other, entry in entries.items():
        if other != uid and not entry.released:
            used.update(device_names(entry.claim, driver_name))
    return used


def completed(claim: NvidiaClaim) -> bool:
    return claim.state is NvidiaClaimState.PREPARE_COMPLETED
