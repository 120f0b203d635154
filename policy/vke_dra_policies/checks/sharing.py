"""GPU sharing configs (GpuConfig/MigDeviceConfig `sharing`) need the driver's matching feature gate.

NVIDIA's driver, and this project's, refuse `sharing.strategy: TimeSlicing` without the gate
`TimeSlicingSettings` and `MPS` without `MPSSupport`, at prepare time on the node (the pod then
never starts). This check finds that before `pulumi up`: every opaque config of the driver in a
DeviceClass, ResourceClaim or ResourceClaimTemplate of the stack is compared with the gates the
stack's driver release enables (`featureGates` in its values, as Helm merges them).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r

from . import Violation
from .driver import driver_releases, effective_values

DESCRIPTION: Final = (
    "Claims and DeviceClasses ask for GPU sharing (TimeSlicing, MPS) only when the driver release "
    "enables the matching feature gate."
)
#: Strategy -> the driver feature gate it needs (NVIDIA's names).
GATES: Final = {"TimeSlicing": "TimeSlicingSettings", "MPS": "MPSSupport"}
_CONFIG_PATHS: Final = {
    pt.DEVICE_CLASS: ("spec", "config"),
    pt.RESOURCE_CLAIM: ("spec", "devices", "config"),
    pt.RESOURCE_CLAIM_TEMPLATE: ("spec", "spec", "devices", "config"),
}


def _strategies(res: r.Res) -> Iterator[tuple[str, Any]]:
    path = _CONFIG_PATHS[res.type]
    for i, entry in enumerate(r.as_list(r.get_path(res.props, path))):
        if not isinstance(entry, Mapping):
            continue
        opaque = entry.get("opaque")
        if not isinstance(opaque, Mapping) or opaque.get("driver") != facts.DRIVER_NAME:
            continue
        strategy = r.get_path(opaque, ("parameters", "sharing", "strategy"))
        if strategy is not None:
            yield f"{r.format_path((*path, i))}.opaque.parameters.sharing.strategy", strategy


def _enabled_gates(resources: Sequence[r.Res]) -> set[str] | None:
    """Gates enabled by the stack's driver release(s); None when unknown yet or the stack has no driver."""
    enabled: set[str] = set()
    releases = driver_releases(list(resources))
    if not releases:
        return None  # the driver is installed outside this stack: its gates are not known here
    for release, kind in releases:
        values = effective_values(release, kind)
        if values is r.UNKNOWN:
            return None
        gates = values.get("featureGates")
        if gates is r.UNKNOWN:
            return None
        if isinstance(gates, Mapping):
            enabled.update(k for k, v in gates.items() if v is True or v == "true")
    return enabled


def sharing_gates(resources: Sequence[r.Res], _config: Mapping[str, Any] | None = None) -> list[Violation]:
    enabled = _enabled_gates(resources)
    if enabled is None:
        return []
    out = []
    for res in r.of_type(list(resources), *_CONFIG_PATHS):
        for where, strategy in _strategies(res):
            if strategy is r.UNKNOWN:
                continue
            gate = GATES.get(strategy) if isinstance(strategy, str) else None
            if gate is None:
                out.append(
                    Violation(
                        f"{res.label}: {where} is {strategy!r}; the driver knows TimeSlicing and MPS only.",
                        res.urn,
                    )
                )
            elif gate not in enabled:
                out.append(
                    Violation(
                        f"{res.label}: {where} is {strategy}, but the driver release does not enable "
                        f"feature gate {gate}, so every pod using it fails to start (unknown GPU sharing "
                        f"strategy: {strategy}); set the stack config vke-gpu-dra:driver.featureGates to "
                        f"'{gate}=true' or drop the sharing.",
                        res.urn,
                    )
                )
    return out
