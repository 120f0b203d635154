"""DeviceTaintRules as `vke-gpu-dra verify` reports them: which of the driver's published devices each rule
taints, with what effect, and what its `EvictionInProgress` condition says.

A DeviceTaintRule (`resource.k8s.io/v1` from Kubernetes 1.37, where DRADeviceTaints and DRADeviceTaintRules
are GA and on; `v1beta2` on 1.36 and `v1alpha3` before, both off by default) adds one taint to every device
its `deviceSelector` matches, as if the driver had published it: the scheduler and the eviction controller
see it, the ResourceSlice does not. A rule without a selector matches nothing; an empty one matches every
device. `driver`, `pool` and `device` are compared with the published devices here; the `deviceClassName`
and CEL `selectors` of 1.34's v1alpha3 rules are not evaluated (such a rule counts every device its other
fields match). Pure functions over API JSON; `kube.Fetcher` reads the rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from vke_gpu_dra_core.objects import lookup

RESOURCE: Final = "devicetaintrules"
#: The resource.k8s.io versions that may serve DeviceTaintRules, the one to read first first.
VERSIONS: Final = ("v1", "v1beta2", "v1alpha3")
#: The condition the eviction controller sets on a rule (also for `effect: None`, as a dry run).
EVICTION_CONDITION: Final = "EvictionInProgress"
BLOCKING_EFFECTS: Final = ("NoSchedule", "NoExecute")
#: Selector fields only 1.34's v1alpha3 has; not evaluated here.
_UNEVALUATED: Final = ("deviceClassName", "selectors")

JSON = dict[str, Any]


@dataclass(frozen=True)
class PublishedDevice:
    """A device of the driver as its newest ResourceSlices publish it."""

    pool: str
    device: str
    node: str


@dataclass(frozen=True)
class RuleFinding:
    """One DeviceTaintRule that taints devices of the driver."""

    name: str
    key: str
    value: str
    effect: str
    #: `<node>/<device>` of each device it taints.
    devices: tuple[str, ...]
    #: The rule also selects by device class or CEL, which is not evaluated: `devices` may be too many.
    unevaluated: bool = False
    #: The EvictionInProgress condition: status ("True"/"False") and message; None when not set yet.
    eviction: tuple[str, str] | None = None
    #: Its deviceSelector names no driver (`deviceSelector: {}` among them): it taints every driver's devices.
    any_driver: bool = False

    @property
    def blocking(self) -> bool:
        """New pods do not get these devices (NoSchedule), or their pods are evicted (NoExecute)."""
        return self.effect in BLOCKING_EFFECTS

    def text(self) -> str:
        taint = f"{self.key}={self.value}" if self.value else self.key
        shown = ", ".join(self.devices[:4]) + (
            f", … ({len(self.devices)} in all)" if len(self.devices) > 4 else ""
        )
        line = f"DeviceTaintRule {self.name}: {taint} {self.effect} on {shown}"
        if self.unevaluated:
            line += " (its device class and CEL selectors not evaluated)"
        if self.any_driver:
            line += " (its deviceSelector names no driver: it taints the devices of every driver; name it)"
        if self.eviction is not None:
            status, message = self.eviction
            line += f"; {EVICTION_CONDITION}={status}" + (f": {message}" if message else "")
        return line

    def as_json(self) -> JSON:
        return {
            "rule": self.name,
            "key": self.key,
            "value": self.value,
            "effect": self.effect,
            "devices": list(self.devices),
            "unevaluated": self.unevaluated,
            "evictionInProgress": None if self.eviction is None else self.eviction[0],
            "evictionMessage": None if self.eviction is None else self.eviction[1],
            "blocking": self.blocking,
        }


def _selects(selector: Mapping[str, Any], device: PublishedDevice) -> bool:
    pool, name = selector.get("pool"), selector.get("device")
    return (pool is None or pool == device.pool) and (name is None or name == device.device)


def _eviction(rule: Mapping[str, Any]) -> tuple[str, str] | None:
    for condition in lookup(rule, "status", "conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == EVICTION_CONDITION:
            return str(condition.get("status", "")), str(condition.get("message", ""))
    return None


def findings(
    rules: Sequence[Mapping[str, Any]], devices: Sequence[PublishedDevice], driver: str
) -> list[RuleFinding]:
    """The rules that taint at least one of `devices` (all of driver `driver`), by rule name."""
    found = []
    for rule in rules:
        selector = lookup(rule, "spec", "deviceSelector")
        if not isinstance(selector, Mapping):
            continue  # no selector: no device
        if selector.get("driver") not in (None, driver):
            continue
        tainted = tuple(f"{d.node}/{d.device}" for d in devices if _selects(selector, d))
        if not tainted:
            continue
        taint = lookup(rule, "spec", "taint") or {}
        found.append(
            RuleFinding(
                name=str(lookup(rule, "metadata", "name")),
                key=str(taint.get("key", "")),
                value=str(taint.get("value") or ""),
                effect=str(taint.get("effect", "")),
                devices=tainted,
                unevaluated=any(selector.get(k) for k in _UNEVALUATED),
                eviction=_eviction(rule),
                any_driver=selector.get("driver") is None,
            )
        )
    return sorted(found, key=lambda f: f.name)
