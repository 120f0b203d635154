"""Opaque device configuration of NVIDIA's API (`resource.nvidia.com/v1beta1`), decoded strictly.

Claims and DeviceClasses written for NVIDIA's driver may carry `GpuConfig` / `MigDeviceConfig`
parameters. They are decoded with NVIDIA's rules (unknown fields are errors; class configs first,
then claim configs, later wins). A default GpuConfig and MigDeviceConfig come first; the last
config that names the result's request exactly, or names no requests and has the device's type,
wins. Sharing strategies are valid only with their feature gate (TimeSlicingSettings, MPSSupport).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.featuregates import FeatureGates

API_VERSION: Final = "resource.nvidia.com/v1beta1"
KIND_GPU: Final = "GpuConfig"
KIND_MIG: Final = "MigDeviceConfig"
#: Kinds of NVIDIA's API for compute domains (not part of this driver).
COMPUTE_DOMAIN_KINDS: Final = frozenset(
    {"ComputeDomain", "ComputeDomainChannelConfig", "ComputeDomainDaemonConfig"}
)
#: Device type each config kind applies to.
KIND_DEVICE_TYPE: Final = {KIND_GPU: facts.DEVICE_TYPE_GPU, KIND_MIG: facts.DEVICE_TYPE_MIG}

STRATEGIES: Final = ("TimeSlicing", "MPS")
#: Time-slice interval -> the number `nvidia-smi compute-policy --set-timeslice` takes.
INTERVALS: Final = {"Default": 0, "Short": 1, "Medium": 2, "Long": 3}
_MPS_FIELDS: Final = {
    "defaultActiveThreadPercentage",
    "defaultPinnedDeviceMemoryLimit",
    "defaultPerDevicePinnedMemoryLimit",
}


class OpaqueConfigError(ValueError):
    """An opaque config this driver cannot accept; the message names the config, field and allowed values."""


@dataclass(frozen=True)
class DeviceConfig:
    """One decoded config entry of `status.allocation.devices.config` for this driver."""

    kind: str
    source: str
    requests: tuple[str, ...]
    sharing: Mapping[str, Any] | None
    #: Human-readable position, e.g. "config[2] (FromClaim, GpuConfig)".
    label: str

    def applies_to_request(self, request: str) -> bool:
        """NVIDIA's rule: the result's request name (`req` or `req/sub`) must be listed exactly."""
        return request in self.requests


def _fields(obj: Any, allowed: set[str], where: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise OpaqueConfigError(f"{where} must be an object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - allowed)
    if unknown:
        known = ", ".join(sorted(allowed))
        raise OpaqueConfigError(f"{where}: unknown field(s) {', '.join(unknown)} (allowed: {known})")
    return obj


def quantity_bytes(value: Any, where: str) -> int:
    """A resource.Quantity (JSON string or number) as an integer, rounded up like Quantity.Value()."""
    # Exact quantities (fractions, decimal) load with the first configuration that names one.
    from vke_gpu_dra_core.quantity import QuantityError, quantity_value  # noqa: PLC0415

    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise OpaqueConfigError(f"{where} must be a quantity such as '1Gi', got {value!r}")
    try:
        return quantity_value(str(value).strip())
    except QuantityError:
        raise OpaqueConfigError(f"{where} must be a quantity such as '1Gi', got {value!r}") from None


def _check_mps(obj: Any, where: str) -> None:
    mps = _fields(obj, _MPS_FIELDS, where)
    pct = mps.get("defaultActiveThreadPercentage")
    if pct is not None and (not isinstance(pct, int) or isinstance(pct, bool)):
        raise OpaqueConfigError(f"{where}.defaultActiveThreadPercentage must be an integer, got {pct!r}")
    if mps.get("defaultPinnedDeviceMemoryLimit") is not None:
        quantity_bytes(mps["defaultPinnedDeviceMemoryLimit"], f"{where}.defaultPinnedDeviceMemoryLimit")
    per_device = mps.get("defaultPerDevicePinnedMemoryLimit")
    if per_device is not None:
        if not isinstance(per_device, Mapping):
            raise OpaqueConfigError(
                f"{where}.defaultPerDevicePinnedMemoryLimit must be a map, got {per_device!r}"
            )
        for key, value in per_device.items():
            quantity_bytes(value, f"{where}.defaultPerDevicePinnedMemoryLimit[{key!r}]")


def _check_sharing(kind: str, obj: Any, where: str) -> Mapping[str, Any] | None:
    """Strict decoding only (fields and types); which strategies are valid depends on the gates."""
    if obj is None:
        return None
    allowed = {"strategy", "mpsConfig"} | ({"timeSlicingConfig"} if kind == KIND_GPU else set())
    sharing = _fields(obj, allowed, where)
    strategy = sharing.get("strategy", "")
    if not isinstance(strategy, str):
        raise OpaqueConfigError(f"{where}.strategy must be a string, got {strategy!r}")
    ts = sharing.get("timeSlicingConfig")
    if ts is not None:
        interval = _fields(ts, {"interval"}, f"{where}.timeSlicingConfig").get("interval")
        if interval is not None and not isinstance(interval, str):
            raise OpaqueConfigError(f"{where}.timeSlicingConfig.interval must be a string, got {interval!r}")
    if sharing.get("mpsConfig") is not None:
        _check_mps(sharing["mpsConfig"], f"{where}.mpsConfig")
    return sharing


def decode_parameters(params: Any, where: str) -> tuple[str, Mapping[str, Any] | None]:
    """(kind, sharing) of NVIDIA opaque parameters; OpaqueConfigError for what a strict decoder rejects."""
    if not isinstance(params, Mapping):
        raise OpaqueConfigError(f"{where}: parameters must be an object, got {type(params).__name__}")
    api_version, kind = params.get("apiVersion"), params.get("kind")
    if api_version != API_VERSION:
        raise OpaqueConfigError(f"{where}: apiVersion must be {API_VERSION!r}, got {api_version!r}")
    if kind in COMPUTE_DOMAIN_KINDS:
        raise OpaqueConfigError(
            f"{where}: kind {kind} is for compute domains, which this driver does not support"
        )
    if kind not in KIND_DEVICE_TYPE:
        raise OpaqueConfigError(f"{where}: kind must be one of {KIND_GPU}, {KIND_MIG}, got {kind!r}")
    _fields(params, {"apiVersion", "kind", "sharing"}, f"{where} ({kind})")
    return kind, _check_sharing(kind, params.get("sharing"), f"{where} ({kind}) field sharing")


def decode_configs(configs: Any, driver_name: str) -> list[DeviceConfig]:
    """This driver's configs from `status.allocation.devices.config`, FromClass first, then FromClaim."""
    if configs is None:
        return []
    if not isinstance(configs, list):
        raise OpaqueConfigError(
            f"status.allocation.devices.config must be a list, got {type(configs).__name__}"
        )
    decoded: dict[str, list[DeviceConfig]] = {"FromClass": [], "FromClaim": []}
    for i, entry in enumerate(configs):
        where = f"config[{i}]"
        if not isinstance(entry, Mapping):
            raise OpaqueConfigError(f"{where} must be an object, got {type(entry).__name__}")
        source = entry.get("source")
        if source not in decoded:
            raise OpaqueConfigError(f"{where}.source must be FromClass or FromClaim, got {source!r}")
        opaque = entry.get("opaque")
        if not isinstance(opaque, Mapping):
            raise OpaqueConfigError(f"{where}: only opaque parameters are supported by this driver")
        if opaque.get("driver") != driver_name:
            continue  # another driver's config: a request may be satisfied by several drivers
        requests = entry.get("requests") or []
        if not isinstance(requests, list) or not all(isinstance(r, str) for r in requests):
            raise OpaqueConfigError(f"{where}.requests must be a list of request names, got {requests!r}")
        kind, sharing = decode_parameters(opaque.get("parameters"), f"{where} ({source})")
        label = f"{where} ({source}, {kind})"
        decoded[source].append(DeviceConfig(kind, source, tuple(requests), sharing, label))
    return decoded["FromClass"] + decoded["FromClaim"]


def config_for(
    request: str, device_type: str, device_name: str, configs: Sequence[DeviceConfig]
) -> DeviceConfig | None:
    """The config that applies to one allocated device, by NVIDIA's selection rule.

    Walk the configs from the last one back: the first that names the request exactly wins (a
    config of the wrong device type is then an error); a request-less config of the device's type
    wins as well, so a later general config beats an earlier request-specific one. None: defaults.
    """
    for config in reversed(configs):
        if config.requests:
            if not config.applies_to_request(request):
                continue
            if KIND_DEVICE_TYPE[config.kind] != device_type:
                what = "GPU" if config.kind == KIND_GPU else "MIG device"
                raise OpaqueConfigError(
                    f"cannot apply {what} config to request: {request} ({config.kind} from {config.label}; "
                    f"device {device_name} is of type {device_type})"
                )
            return config
        if KIND_DEVICE_TYPE[config.kind] == device_type:
            return config
    return None


@dataclass(frozen=True)
class MpsSettings:
    """The MPS settings of one config (decoded; limits are normalised per daemon in `mps_limits`)."""

    active_thread_percentage: int | None = None
    pinned_memory_limit: Any = None
    per_device_pinned_memory_limit: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Sharing:
    """What a config asks of its devices once normalised and validated (NVIDIA's Normalize + Validate)."""

    #: None (no sharing), "TimeSlicing" or "MPS".
    strategy: str | None = None
    #: `--set-timeslice` value for TimeSlicing on full GPUs; None on MIG devices (nothing to set).
    timeslice: int | None = None
    mps: MpsSettings | None = None


NO_SHARING: Final = Sharing()


def resolve_sharing(config: DeviceConfig | None, device_type: str, gates: FeatureGates) -> Sharing:
    """Normalise and validate a config as NVIDIA's 25.8.1 plugin does for the enabled gates.

    `config` None means the defaults: with TimeSlicingSettings on, NVIDIA's default configs are
    TimeSlicing (interval Default on full GPUs). Messages carry NVIDIA's wording.
    """
    raw = dict(config.sharing) if config is not None and config.sharing is not None else None
    label = config.label if config is not None else f"default {device_type} config"
    if raw is None:
        if not gates.time_slicing:
            return NO_SHARING
        raw = {"strategy": "TimeSlicing"}
    strategy = raw.get("strategy", "")
    if not ((gates.time_slicing and strategy == "TimeSlicing") or (gates.mps and strategy == "MPS")):
        gate = {"TimeSlicing": "TimeSlicingSettings", "MPS": "MPSSupport"}.get(strategy)
        hint = f"; feature gate {gate} is off" if gate else f" (allowed: {', '.join(STRATEGIES)})"
        raise OpaqueConfigError(f"{label} field sharing: unknown GPU sharing strategy: {strategy}{hint}")
    if strategy == "TimeSlicing":
        if raw.get("mpsConfig") is not None:
            raise OpaqueConfigError(
                f"{label} field sharing: cannot use MpsConfig with the 'TimeSlicing' strategy"
            )
        if device_type != facts.DEVICE_TYPE_GPU:
            return Sharing("TimeSlicing")  # NVIDIA accepts it on MIG devices and sets nothing
        ts = raw.get("timeSlicingConfig")
        interval = "Default" if ts is None else ts.get("interval")
        if interval is None:
            raise OpaqueConfigError(
                f"{label} field sharing.timeSlicingConfig.interval: must be set "
                f"(allowed: {', '.join(INTERVALS)})"
            )
        if interval not in INTERVALS:
            raise OpaqueConfigError(
                f"{label} field sharing.timeSlicingConfig.interval: unknown time-slice interval: {interval} "
                f"(allowed: {', '.join(INTERVALS)})"
            )
        return Sharing("TimeSlicing", timeslice=INTERVALS[interval])
    if raw.get("timeSlicingConfig") is not None:
        raise OpaqueConfigError(
            f"{label} field sharing: cannot use TimeSlicingConfig with the 'MPS' strategy"
        )
    if gates.consumable_shares:
        # NVIDIA's plugin starts with both gates and refuses MPS per claim (device_state.go).
        raise OpaqueConfigError(
            f"{label} field sharing: MPS sharing is not supported when consumable shares is enabled "
            "(feature gate ConsumableShares)"
        )
    mps = raw.get("mpsConfig") or {}
    pct = mps.get("defaultActiveThreadPercentage")
    where = f"{label} field sharing.mpsConfig.defaultActiveThreadPercentage"
    if pct is not None and pct < 0:
        raise OpaqueConfigError(f"{where}: active thread percentage must not be negative, got {pct}")
    if pct is not None and pct > 100:
        raise OpaqueConfigError(f"{where}: active thread percentage must not be greater than 100, got {pct}")
    return Sharing(
        "MPS",
        mps=MpsSettings(
            pct, mps.get("defaultPinnedDeviceMemoryLimit"), mps.get("defaultPerDevicePinnedMemoryLimit")
        ),
    )


def _megabyte(value: Any, where: str) -> str | None:
    mib = quantity_bytes(value, where) // 1024 // 1024
    return f"{mib}M" if mib > 0 else None


def mps_limits(settings: MpsSettings, uuids: Sequence[str], label: str) -> dict[str, str]:
    """Pinned-memory limit per device UUID as NVIDIA passes them (`<MiB>M`), keys uuid or index."""
    limits: dict[str, str] = {}
    base = f"{label} field sharing.mpsConfig"
    if settings.pinned_memory_limit is not None and uuids:
        value = _megabyte(settings.pinned_memory_limit, f"{base}.defaultPinnedDeviceMemoryLimit")
        if value is None:
            raise OpaqueConfigError(
                f"{base}.defaultPinnedDeviceMemoryLimit: invalid limit: default value set too low: "
                f"{settings.pinned_memory_limit} (at least 1Mi)"
            )
        limits = dict.fromkeys(uuids, value)
    for key, raw in (settings.per_device_pinned_memory_limit or {}).items():
        if key in uuids:
            uuid = key
        else:
            try:
                index = int(key)
            except ValueError:
                raise OpaqueConfigError(
                    f"{base}.defaultPerDevicePinnedMemoryLimit: invalid device: unable to parse key as an "
                    f"integer: {key} (use a UUID of the claim's devices or an index 0-{len(uuids) - 1})"
                ) from None
            if not 0 <= index < len(uuids):
                raise OpaqueConfigError(
                    f"{base}.defaultPerDevicePinnedMemoryLimit: invalid device: invalid device index: "
                    f"{index} (the config applies to {len(uuids)} device(s))"
                )
            uuid = uuids[index]
        value = _megabyte(raw, f"{base}.defaultPerDevicePinnedMemoryLimit[{key!r}]")
        if value is None:
            raise OpaqueConfigError(
                f"{base}.defaultPerDevicePinnedMemoryLimit: invalid limit: value set too low: {key}: {raw} "
                "(at least 1Mi)"
            )
        limits[uuid] = value
    return limits
