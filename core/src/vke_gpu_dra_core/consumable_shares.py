"""Consumable GPU shares: how a device is published for several claims at once (Kubernetes 1.36,
DRAConsumableCapacity, KEP-5075), the one definition the driver's slices and the capacity planner share.

The shape is NVIDIA's (kubernetes-sigs/dra-driver-nvidia-gpu, `cmd/gpu-kubelet-plugin/
consumable_shares.go`, behind its gate `ConsumableShares` and its `--consumable-shares` modes): the
device gets `allowMultipleAllocations: true` and its `memory` capacity, rounded down to a whole MiB (the
API server wants `max` and `default` multiples of `step`), a `requestPolicy`:

| mode | memory `requestPolicy` | extra capacity |
|---|---|---|
| `memory` (this driver's gate) | default: all of it; validRange {min: 1Mi, max: all, step: 1Mi} | - |
| `unlimited` | default: 0; validRange {min: 0, max: all, step: 1Mi} | - |
| `<N>` (a positive integer) | as `unlimited` | `shares`: N, default 1, validRange {min: 1, max: N, step: 1} |

A device without a `memory` capacity only gets `allowMultipleAllocations`. The GPU does not enforce the
memory a share asked for (as with NVIDIA's gate): it is what the scheduler counts, not a limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from . import facts
from .device_model import Device, binary_si
from .quantity import format_quantity

#: NVIDIA's step (and smallest share) of a GPU's memory.
SHARE_STEP: Final = 2**20
#: The mode this driver publishes with its gate `ConsumableShares` on.
DEFAULT_MODE: Final = "memory"
#: The capacity mode `<N>` adds.
CAPACITY_SHARES: Final = "shares"


class ModeError(ValueError):
    """A consumable-shares mode that is not one of NVIDIA's."""


def check_mode(mode: str) -> str:
    """`mode` when it is `memory`, `unlimited` or a positive integer; ModeError naming it otherwise."""
    if mode in ("memory", "unlimited") or (mode.isdigit() and int(mode) > 0):
        return mode
    raise ModeError(
        f"consumable shares mode {mode!r} is not allowed: must be 'memory', 'unlimited' or a positive integer"
    )


#: A capacity amount: whole, or (Kubernetes 1.37, DRAFractionalCapacityRange) a multiple of 1m.
Amount = int | Fraction


def _render(value: Amount) -> str:
    return binary_si(value) if isinstance(value, int) else format_quantity(value)


@dataclass(frozen=True)
class RequestPolicy:
    """A capacity's `requestPolicy`: `default`, and `validRange` {min, max, step} or `validValues`.

    NVIDIA's shapes are whole numbers; a fractional range (e.g. step 100m) needs Kubernetes 1.37."""

    default: Amount | None = None
    minimum: Amount | None = None
    maximum: Amount | None = None
    step: Amount | None = None
    valid_values: tuple[Amount, ...] = ()

    def render(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.default is not None:
            out["default"] = _render(self.default)
        if self.minimum is not None:
            bounds = {"min": self.minimum, "max": self.maximum, "step": self.step}
            out["validRange"] = {k: _render(v) for k, v in bounds.items() if v is not None}
        elif self.valid_values:
            out["validValues"] = [_render(v) for v in self.valid_values]
        return out


@dataclass(frozen=True)
class Sharing:
    """How a device takes several allocations: `allowMultipleAllocations` and its capacities' policies
    (capacities as published, which may differ from the discovered ones by rounding)."""

    #: (name, value) and (name, policy), by name: hashable, as nodes are compared and cached
    capacities: tuple[tuple[str, int], ...]
    request_policies: tuple[tuple[str, RequestPolicy], ...]

    @property
    def capacity(self) -> Mapping[str, int]:
        return dict(self.capacities)

    @property
    def policies(self) -> Mapping[str, RequestPolicy]:
        return dict(self.request_policies)


def shares_of(device: Device, mode: str = DEFAULT_MODE) -> Sharing:
    """NVIDIA's `--consumable-shares=<mode>` form of `device` (see the module docstring)."""
    check_mode(mode)
    capacity = dict(device.capacity)
    memory = capacity.get(facts.CAPACITY_MEMORY)
    if memory is None:
        return Sharing(tuple(sorted(capacity.items())), ())
    memory = memory // SHARE_STEP * SHARE_STEP
    capacity[facts.CAPACITY_MEMORY] = memory
    policies: dict[str, RequestPolicy] = {}
    if mode == "memory":
        policies[facts.CAPACITY_MEMORY] = RequestPolicy(
            default=memory, minimum=SHARE_STEP, maximum=memory, step=SHARE_STEP
        )
    else:
        policies[facts.CAPACITY_MEMORY] = RequestPolicy(default=0, minimum=0, maximum=memory, step=SHARE_STEP)
    if mode.isdigit():
        shares = int(mode)
        capacity[CAPACITY_SHARES] = shares
        policies[CAPACITY_SHARES] = RequestPolicy(default=1, minimum=1, maximum=shares, step=1)
    return Sharing(tuple(sorted(capacity.items())), tuple(sorted(policies.items())))


def memory_shares(device: Device) -> Sharing:
    """The `memory` mode, the one this driver publishes with its gate on."""
    return shares_of(device, "memory")


def slice_device(device: Device, sharing: Sharing | None) -> dict[str, Any]:
    """The ResourceSlice entry of `device` as the driver publishes it (with its sharing, when it has one)."""
    entry: dict[str, Any] = device.slice_entry()
    if sharing is None:
        return entry
    capacity: dict[str, Any] = {}
    for name, value in sharing.capacity.items():
        capacity[name] = {"value": binary_si(value)}
        if name in sharing.policies:
            capacity[name]["requestPolicy"] = sharing.policies[name].render()
    return {**entry, "allowMultipleAllocations": True, "capacity": capacity}


def shared_entry(device: Device) -> dict[str, Any]:
    """The driver's slice entry of `device` with consumable shares on (`memory` mode)."""
    return slice_device(device, memory_shares(device))
