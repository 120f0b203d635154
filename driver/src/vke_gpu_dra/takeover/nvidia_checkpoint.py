"""Read-only reader of NVIDIA's `checkpoint.json` (k8s-dra-driver-gpu 25.8.1, `gpu-kubelet-plugin`).

The file lies in the plugin data directory that both plugins share
(`/var/lib/kubelet/plugins/gpu.nvidia.com`).
NVIDIA writes it through kubelet's checkpoint manager as the compact JSON of

    {"checksum": <V1 checksum>,
     "v1": {"preparedClaims": {uid: {"status", "preparedDevices"}}},
     "v2": {"checksum": <V2 checksum>,
            "preparedClaims": {uid: {"checkpointState", "status", "preparedDevices"}}}}

(`v2` since the V2 format; files of older plugins have `checksum` and `v1` only; V1 claims count as
`PrepareCompleted`, V1 lists only completed claims). `status` is the claim's ResourceClaimStatus;
`preparedDevices` is a list of groups `{"devices": [{"gpu": {"info": {"uuid"}, "device": D} | null,
"mig": {...} | null}], "configState": {"mpsControlDaemonID"}}` with `D` kubeletplugin.Device's untagged
fields `Requests`, `PoolName`, `DeviceName`, `CDIDeviceIDs`.

Checksums: kubelet's `checksum.New(data)` is FNV-32a over spew's `%#v` print of the bytes, i.e. over the
text `([]uint8)[b0 b1 ...]` (decimal bytes separated by spaces). The V1 checksum covers the compact JSON of
`{"checksum":0,"v1":<v1>}`, the V2 checksum that of `<v2>` with its own checksum set to 0. NVIDIA's
reader re-marshals what it parsed; this reader hashes the exact bytes of the file's `v1` and `v2` values
instead, which is the same for every file NVIDIA wrote (Go's encoder is canonical) and rejects a file
that was re-formatted by hand. Nothing here writes the file: a rollback to NVIDIA's plugin finds it as
NVIDIA left it.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

#: NVIDIA's checkpoint file name in the plugin data directory (DriverPluginCheckpointFileBasename).
NVIDIA_CHECKPOINT_FILE: Final = "checkpoint.json"

_FNV32_OFFSET: Final = 0x811C9DC5
_FNV32_PRIME: Final = 0x01000193
_WS: Final = re.compile(r"[ \t\n\r]*")


class NvidiaCheckpointError(ValueError):
    """NVIDIA's checkpoint is unreadable: bad JSON, a checksum mismatch or an unexpected shape."""


class NvidiaClaimState(enum.StrEnum):
    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"


@dataclass(frozen=True)
class NvidiaDevice:
    """One device NVIDIA prepared for a claim."""

    kind: str  # "gpu" or "mig"
    uuid: str
    device_name: str
    pool_name: str
    requests: tuple[str, ...]
    cdi_device_ids: tuple[str, ...]


@dataclass(frozen=True)
class NvidiaGroup:
    """Devices NVIDIA prepared under one config, with the MPS control daemon it started for them ("" none)."""

    devices: tuple[NvidiaDevice, ...]
    mps_daemon_id: str = ""


@dataclass(frozen=True)
class AllocatedResult:
    """One result of the claim's allocation as NVIDIA stored it (status.allocation.devices.results)."""

    request: str
    driver: str
    pool: str
    device: str


@dataclass(frozen=True)
class NvidiaClaim:
    uid: str
    state: NvidiaClaimState
    groups: tuple[NvidiaGroup, ...]
    allocated: tuple[AllocatedResult, ...]
    #: Sharing strategies named by this driver's opaque configs in the allocation ("TimeSlicing", "MPS").
    sharing_strategies: frozenset[str]
    #: The claim's namespace/name: NVIDIA's V2 form has them from 25.12 (`namespace`, `name`); 25.8.1
    #: and the V1 form record none ("": learnt from kubelet's next prepare, see `Takeover.name`).
    namespace: str = ""
    name: str = ""


@dataclass(frozen=True)
class NvidiaCheckpoint:
    #: 2 when the file has the V2 form, 1 when it has the V1 form only.
    version: int
    claims: Mapping[str, NvidiaClaim]


def kubelet_checksum(data: bytes) -> int:
    """kubelet checkpointmanager `checksum.New(data)` for a byte slice: FNV-32a of spew's `%#v` print."""
    printed = b"([]uint8)[" + b" ".join(str(b).encode() for b in data) + b"]"
    value = _FNV32_OFFSET
    for byte in printed:
        value = ((value ^ byte) * _FNV32_PRIME) & 0xFFFFFFFF
    return value


def _members(text: str, start: int, where: str) -> dict[str, tuple[int, int]]:
    """Spans (start, end) in `text` of the member values of the JSON object at `text[start]`.

    `text` is already known to be valid JSON, so only the structure is walked here.
    """
    decoder = json.JSONDecoder()

    def skip(i: int) -> int:
        match = _WS.match(text, i)
        assert match is not None  # a `*` pattern always matches
        return match.end()

    if text[start : start + 1] != "{":
        raise NvidiaCheckpointError(f"{where} must be a JSON object")
    spans: dict[str, tuple[int, int]] = {}
    i = skip(start + 1)
    if text[i : i + 1] == "}":
        return spans
    while True:
        key, i = decoder.raw_decode(text, i)
        i = skip(skip(i) + 1)  # the ':'
        _, end = decoder.raw_decode(text, i)
        if key in spans:
            raise NvidiaCheckpointError(f"{where}: duplicate key {key!r}")
        spans[key] = (i, end)
        i = skip(end)
        if text[i : i + 1] == "}":
            return spans
        i = skip(i + 1)  # the ','


def _stored_checksum(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise NvidiaCheckpointError(f"{where} must be a non-negative integer, got {value!r}")
    return value


def _verify(stored: int, data: bytes, where: str) -> None:
    actual = kubelet_checksum(data)
    if stored != actual:
        raise NvidiaCheckpointError(f"{where} mismatch: stored {stored}, computed {actual}")


def parse(data: bytes) -> NvidiaCheckpoint:
    """Parse and verify NVIDIA's checkpoint bytes; raises NvidiaCheckpointError naming what is wrong."""
    try:
        text = data.decode("utf-8")
        document = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NvidiaCheckpointError(f"not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise NvidiaCheckpointError(f"top level must be an object, got {type(document).__name__}")
    unknown = sorted(set(document) - {"checksum", "v1", "v2"})
    if unknown:
        raise NvidiaCheckpointError(f"top level has unknown key(s) {unknown}; allowed: checksum, v1, v2")
    if "checksum" not in document:
        raise NvidiaCheckpointError("top level has no checksum")
    start = len(text) - len(text.lstrip())
    spans = _members(text, start, "top level")
    v1 = document.get("v1")
    v1_text = "" if v1 is None else ',"v1":' + text[slice(*spans["v1"])]
    _verify(
        _stored_checksum(document["checksum"], "checksum"),
        ('{"checksum":0' + v1_text + "}").encode(),
        "V1 checksum",
    )
    v2 = document.get("v2")
    if v2 is not None:
        v2_start, v2_end = spans["v2"]
        inner = _members(text, v2_start, "v2")
        if "checksum" not in inner:
            raise NvidiaCheckpointError("v2 has no checksum")
        c_start, c_end = inner["checksum"]
        zeroed = text[v2_start:c_start] + "0" + text[c_end:v2_end]
        _verify(_stored_checksum(v2["checksum"], "v2.checksum"), zeroed.encode(), "V2 checksum")
        return NvidiaCheckpoint(2, _claims(v2, "v2", versioned=True))
    if v1 is None:
        return NvidiaCheckpoint(1, {})
    return NvidiaCheckpoint(1, _claims(v1, "v1", versioned=False))


def read(path: Path) -> NvidiaCheckpoint | None:
    """NVIDIA's checkpoint at `path` (read only), None when there is none; raises NvidiaCheckpointError."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise NvidiaCheckpointError(f"cannot read it: {exc}") from None
    return parse(data)


# ------------------------------------------------------------------------------------------ shape


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise NvidiaCheckpointError(f"{where} must be an object, got {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise NvidiaCheckpointError(f"{where} must be a list, got {type(value).__name__}")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise NvidiaCheckpointError(f"{where} must be a string, got {value!r}")
    return value


def _strings(value: Any, where: str) -> tuple[str, ...]:
    return tuple(_string(v, f"{where}[{i}]") for i, v in enumerate(_list(value, where)))


def _claims(section: Any, where: str, *, versioned: bool) -> dict[str, NvidiaClaim]:
    body = _object(section, where)
    raw_claims = body.get("preparedClaims") or {}
    claims_where = f"{where}.preparedClaims"
    claims: dict[str, NvidiaClaim] = {}
    for uid, raw in _object(raw_claims, claims_where).items():
        claims[uid] = _claim(uid, raw, f"{claims_where}[{uid}]", versioned=versioned)
    return claims


def _claim(uid: str, raw: Any, where: str, *, versioned: bool) -> NvidiaClaim:
    if not uid:
        raise NvidiaCheckpointError(f"{where}: empty claim UID")
    body = _object(raw, where)
    state = NvidiaClaimState.PREPARE_COMPLETED
    if versioned:
        value = body.get("checkpointState")
        try:
            state = NvidiaClaimState(str(value))
        except ValueError:
            allowed = ", ".join(s.value for s in NvidiaClaimState)
            raise NvidiaCheckpointError(
                f"{where}.checkpointState must be one of {allowed}, got {value!r}"
            ) from None
    groups = tuple(
        _group(g, f"{where}.preparedDevices[{i}]")
        for i, g in enumerate(_list(body.get("preparedDevices"), f"{where}.preparedDevices"))
    )
    status = _object(body.get("status") or {}, f"{where}.status")
    allocation = _object(status.get("allocation") or {}, f"{where}.status.allocation")
    devices = _object(allocation.get("devices") or {}, f"{where}.status.allocation.devices")
    results_where = f"{where}.status.allocation.devices.results"
    allocated = []
    for i, r in enumerate(_list(devices.get("results"), results_where)):
        result = _object(r, f"{results_where}[{i}]")
        allocated.append(
            AllocatedResult(
                *(
                    _string(result.get(k, ""), f"{results_where}[{i}].{k}")
                    for k in ("request", "driver", "pool", "device")
                )
            )
        )
    strategies: set[str] = set()
    configs_where = f"{where}.status.allocation.devices.config"
    for i, c in enumerate(_list(devices.get("config"), configs_where)):
        opaque = _object(c, f"{configs_where}[{i}]").get("opaque")
        if not isinstance(opaque, Mapping) or not isinstance(opaque.get("parameters"), Mapping):
            continue
        sharing = opaque["parameters"].get("sharing")
        if isinstance(sharing, Mapping) and isinstance(sharing.get("strategy"), str):
            strategies.add(sharing["strategy"])
    namespace = name = ""
    if versioned:  # PreparedClaimV2's `namespace,omitempty` and `name,omitempty` (25.12 and later)
        namespace = _string(body.get("namespace", ""), f"{where}.namespace")
        name = _string(body.get("name", ""), f"{where}.name")
    return NvidiaClaim(uid, state, groups, tuple(allocated), frozenset(strategies), namespace, name)


def _group(raw: Any, where: str) -> NvidiaGroup:
    body = _object(raw, where)
    devices = []
    for i, d in enumerate(_list(body.get("devices"), f"{where}.devices")):
        devices.append(_device(d, f"{where}.devices[{i}]"))
    state = _object(body.get("configState") or {}, f"{where}.configState")
    daemon = _string(state.get("mpsControlDaemonID", ""), f"{where}.configState.mpsControlDaemonID")
    return NvidiaGroup(tuple(devices), daemon)


def _device(raw: Any, where: str) -> NvidiaDevice:
    body = _object(raw, where)
    kinds = [k for k in ("gpu", "mig") if body.get(k) is not None]
    if len(kinds) != 1:
        raise NvidiaCheckpointError(f"{where} must have exactly one of gpu, mig set, has {kinds or 'none'}")
    kind = kinds[0]
    inner = _object(body[kind], f"{where}.{kind}")
    info = _object(inner.get("info"), f"{where}.{kind}.info")
    device = _object(inner.get("device"), f"{where}.{kind}.device")
    dw = f"{where}.{kind}.device"
    name = _string(device.get("DeviceName"), f"{dw}.DeviceName")
    if not name:
        raise NvidiaCheckpointError(f"{dw}.DeviceName must not be empty")
    return NvidiaDevice(
        kind=kind,
        uuid=_string(info.get("uuid"), f"{where}.{kind}.info.uuid"),
        device_name=name,
        pool_name=_string(device.get("PoolName", ""), f"{dw}.PoolName"),
        requests=_strings(device.get("Requests"), f"{dw}.Requests"),
        cdi_device_ids=_strings(device.get("CDIDeviceIDs"), f"{dw}.CDIDeviceIDs"),
    )
