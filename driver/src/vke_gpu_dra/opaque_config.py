"""Opaque device configuration of NVIDIA's API (`resource.nvidia.com/v1beta1`), decoded strictly.

Claims and DeviceClasses written for NVIDIA's driver may carry `GpuConfig` / `MigDeviceConfig`
parameters. They are decoded with NVIDIA's rules (unknown fields are errors; class configs first,
then claim configs, later wins). Sharing strategies (time-slicing, MPS) are not implemented by this
driver yet, so a config that asks for one is rejected with an error naming the kind and field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from . import facts

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
INTERVALS: Final = ("Default", "Short", "Medium", "Long")
_MPS_FIELDS: Final = {
    "defaultActiveThreadPercentage", "defaultPinnedDeviceMemoryLimit", "defaultPerDevicePinnedMemoryLimit",
}
_QUANTITY_RE: Final = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[KMGTPE]i|[mkMGTPE])?$")


class ConfigError(ValueError):
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
        main = request.split("/", 1)[0]
        return request in self.requests or main in self.requests


def _fields(obj: Any, allowed: set[str], where: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise ConfigError(f"{where} must be an object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - allowed)
    if unknown:
        known = ", ".join(sorted(allowed))
        raise ConfigError(f"{where}: unknown field(s) {', '.join(unknown)} (allowed: {known})")
    return obj


def _check_quantity(value: Any, where: str) -> None:
    if not isinstance(value, str) or not _QUANTITY_RE.match(value):
        raise ConfigError(f"{where} must be a quantity such as '1Gi', got {value!r}")


def _check_mps(obj: Any, where: str) -> None:
    mps = _fields(obj, _MPS_FIELDS, where)
    pct = mps.get("defaultActiveThreadPercentage")
    if pct is not None and (not isinstance(pct, int) or isinstance(pct, bool) or not 0 <= pct <= 100):
        raise ConfigError(f"{where}.defaultActiveThreadPercentage must be an integer 0-100, got {pct!r}")
    if mps.get("defaultPinnedDeviceMemoryLimit") is not None:
        _check_quantity(mps["defaultPinnedDeviceMemoryLimit"], f"{where}.defaultPinnedDeviceMemoryLimit")
    per_device = mps.get("defaultPerDevicePinnedMemoryLimit")
    if per_device is not None:
        if not isinstance(per_device, Mapping):
            raise ConfigError(f"{where}.defaultPerDevicePinnedMemoryLimit must be a map, got {per_device!r}")
        for key, value in per_device.items():
            _check_quantity(value, f"{where}.defaultPerDevicePinnedMemoryLimit[{key!r}]")


def _check_sharing(kind: str, obj: Any, where: str) -> Mapping[str, Any] | None:
    if obj is None:
        return None
    allowed = {"strategy", "mpsConfig"} | ({"timeSlicingConfig"} if kind == KIND_GPU else set())
    sharing = _fields(obj, allowed, where)
    strategy = sharing.get("strategy")
    if strategy not in STRATEGIES:
        raise ConfigError(
            f"{where}.strategy: unknown GPU sharing strategy {strategy!r} (allowed: {', '.join(STRATEGIES)})"
        )
    ts = sharing.get("timeSlicingConfig")
    if ts is not None:
        if strategy != "TimeSlicing":
            raise ConfigError(f"{where}.timeSlicingConfig needs strategy TimeSlicing, got {strategy}")
        interval = _fields(ts, {"interval"}, f"{where}.timeSlicingConfig").get("interval")
        if interval is not None and interval not in INTERVALS:
            raise ConfigError(
                f"{where}.timeSlicingConfig.interval must be one of {', '.join(INTERVALS)}, got {interval!r}"
            )
    if sharing.get("mpsConfig") is not None:
        if strategy != "MPS":
            raise ConfigError(f"{where}.mpsConfig needs strategy MPS, got {strategy}")
        _check_mps(sharing["mpsConfig"], f"{where}.mpsConfig")
    return sharing


def decode_parameters(params: Any, where: str) -> tuple[str, Mapping[str, Any] | None]:
    """(kind, sharing) of NVIDIA opaque parameters; ConfigError for anything a strict decoder rejects."""
    if not isinstance(params, Mapping):
        raise ConfigError(f"{where}: parameters must be an object, got {type(params).__name__}")
    api_version, kind = params.get("apiVersion"), params.get("kind")
    if api_version != API_VERSION:
        raise ConfigError(f"{where}: apiVersion must be {API_VERSION!r}, got {api_version!r}")
    if kind in COMPUTE_DOMAIN_KINDS:
        raise ConfigError(f"{where}: kind {kind} is for compute domains, which this driver does not support")
    if kind not in KIND_DEVICE_TYPE:
        raise ConfigError(f"{where}: kind must be one of {KIND_GPU}, {KIND_MIG}, got {kind!r}")
    _fields(params, {"apiVersion", "kind", "sharing"}, f"{where} ({kind})")
    return kind, _check_sharing(kind, params.get("sharing"), f"{where} ({kind}) field sharing")


def decode_configs(configs: Any, driver_name: str) -> list[DeviceConfig]:
    """This driver's configs from `status.allocation.devices.config`, FromClass first, then FromClaim."""
    if configs is None:
        return []
    if not isinstance(configs, list):
        raise ConfigError(f"status.allocation.devices.config must be a list, got {type(configs).__name__}")
    decoded: dict[str, list[DeviceConfig]] = {"FromClass": [], "FromClaim": []}
    for i, entry in enumerate(configs):
        where = f"config[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where} must be an object, got {type(entry).__name__}")
        opaque = entry.get("opaque")
        if not isinstance(opaque, Mapping) or opaque.get("driver") != driver_name:
            continue  # another driver's config (or a non-opaque kind this driver does not read)
        source = entry.get("source")
        if source not in decoded:
            raise ConfigError(f"{where}.source must be FromClass or FromClaim, got {source!r}")
        requests = entry.get("requests") or []
        if not isinstance(requests, list) or not all(isinstance(r, str) for r in requests):
            raise ConfigError(f"{where}.requests must be a list of request names, got {requests!r}")
        kind, sharing = decode_parameters(opaque.get("parameters"), f"{where} ({source})")
        label = f"{where} ({source}, {kind})"
        decoded[source].append(DeviceConfig(kind, source, tuple(requests), sharing, label))
    return decoded["FromClass"] + decoded["FromClaim"]


def config_for(
    request: str, device_type: str, device_name: str, configs: Sequence[DeviceConfig]
) -> DeviceConfig | None:
    """The config that applies to one allocated device (NVIDIA's selection rule), or None for the defaults."""
    for config in reversed(configs):
        if config.requests and config.applies_to_request(request):
            if KIND_DEVICE_TYPE[config.kind] != device_type:
                raise ConfigError(
                    f"cannot apply {config.kind} from {config.label} to request {request}: "
                    f"device {device_name} is of type {device_type}"
                )
            return config
    for config in reversed(configs):
        if not config.requests and KIND_DEVICE_TYPE[config.kind] == device_type:
            return config
    return None


def check_supported(config: DeviceConfig) -> None:
    """Reject settings this driver cannot apply yet (any sharing strategy)."""
    if config.sharing is not None:
        raise ConfigError(
            f"{config.label} field sharing: GPU sharing strategy {config.sharing.get('strategy')} "
            "is not supported by this driver yet (leave sharing unset or null)"
        )
