"""Health decisions, apart from any I/O: which events make a device unhealthy, when it recovers, and
what the published slice says about it.

Problems a device can have (NVIDIA's taint keys, kubernetes-sigs/dra-driver-nvidia-gpu v0.4.x
`cmd/gpu-kubelet-plugin/device_health.go`, so tolerations and DeviceTaintRules written for NVIDIA's
driver work unchanged):

* `xid`: a critical XID (or a double-bit ECC error, XID 48) that is not ignored; taint
  `gpu.nvidia.com/xid=<xid>` NoSchedule.
* `gpu-lost`: NVML cannot reach the GPU (a probe answers GPU_IS_LOST or similar); taint
  `gpu.nvidia.com/gpu-lost` NoSchedule.
* `unmonitored`: the GPU's events cannot be registered; taint `gpu.nvidia.com/unmonitored` with effect
  `None` (informational, 1.35+ servers only); the device stays allocatable.

Recovery (beyond NVIDIA, whose taints stay until the plugin restarts): an `xid` problem ends once the
GPU answers NVML and no fatal event was seen for the recovery window; a `gpu-lost` problem ends once
the GPU has answered without interruption for the window. Every new fatal event or lost probe starts
the window again, so a flapping GPU stays out until it has been stable for a whole window.
Time is passed in (`now`, seconds), so tests drive the windows with their own clock.
"""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from vke_gpu_dra_core import facts

ProblemKind = facts.HealthProblem

#: XIDs NVIDIA's plugin treats as application errors (the GPU stays healthy), as in its
#: `xidsToSkip` (dra-driver-nvidia-gpu v0.4.x, cmd/gpu-kubelet-plugin/device_health.go, after
#: https://docs.nvidia.com/deploy/xid-errors/index.html).
DEFAULT_IGNORED_XIDS: Final = frozenset(
    {
        13,  # Graphics Engine Exception
        31,  # GPU memory page fault
        43,  # GPU stopped processing
        45,  # Preemptive cleanup, due to previous errors
        68,  # Video processor exception
        109,  # Context Switch Timeout Error
    }
)
#: The XID the driver logs for a double-bit ECC error; an nvmlEventTypeDoubleBitEccError event counts as it.
DOUBLE_BIT_ECC_XID: Final = 48
#: Default recovery window, seconds.
DEFAULT_RECOVERY_WINDOW: Final = 300.0

#: Taint key per problem, under the driver name (gpu.nvidia.com/xid, ...): core's facts name them.
TAINT_SUFFIX: Final[Mapping[ProblemKind, str]] = {kind: kind for kind in facts.HEALTH_PROBLEMS}
#: Effects: never NoExecute (evicting running work is the operator's call, through a DeviceTaintRule).
TAINT_EFFECT: Final[Mapping[ProblemKind, str]] = {
    "xid": "NoSchedule",
    "gpu-lost": "NoSchedule",
    "unmonitored": "None",
}
#: Problems that make a device unallocatable (and UNHEALTHY in the health stream).
BLOCKING: Final = frozenset({"xid", "gpu-lost"})


def parse_xid_list(value: str) -> frozenset[int]:
    """`"74, 79"` -> {74, 79}; raises ValueError naming what is allowed (NVIDIA's plugin skips bad items
    silently; a typo here would quietly taint GPUs, so it is an error)."""
    xids: set[int] = set()
    for raw in value.split(","):
        item = raw.strip()
        if not item:
            continue
        if not item.isdigit() or int(item) > 2**32 - 1:
            raise ValueError(
                f"must be a comma-separated list of XID numbers (e.g. 74,79); {item!r} is not one"
            )
        xids.add(int(item))
    return frozenset(xids)


@dataclass(frozen=True)
class Problem:
    kind: ProblemKind
    #: Unix time the problem began (kept while it lasts; the taint's timeAdded).
    since: float
    #: The XID for `xid` problems (the latest fatal one).
    xid: int | None = None

    @property
    def reason(self) -> str:
        return f"xid {self.xid}" if self.kind == "xid" else self.kind


@dataclass(frozen=True)
class DeviceHealth:
    """What is known about one device now."""

    name: str
    problems: tuple[Problem, ...] = ()

    @property
    def allocatable(self) -> bool:
        return not any(p.kind in BLOCKING for p in self.problems)

    @property
    def status(self) -> Literal["healthy", "unhealthy", "unknown"]:
        if not self.allocatable:
            return "unhealthy"
        return "unknown" if self.problems else "healthy"

    @property
    def reason(self) -> str:
        return ", ".join(p.reason for p in self.problems)


@dataclass(frozen=True)
class Change:
    before: DeviceHealth
    after: DeviceHealth


@dataclass
class _GpuState:
    devices: tuple[str, ...]
    #: When the GPU started answering NVML without interruption (None while lost).
    answering_since: float | None
    lost_since: float | None = None
    xid: dict[str, tuple[int, float, float]] = field(default_factory=dict)  # device -> (xid, since, last)
    unmonitored_since: float | None = None


class HealthTracker:
    """Health of every device, grouped by the GPU they are on (a full GPU, or its MIG devices).

    Feed it observations; each returns the devices whose health changed. `tick(now)` ends problems
    whose recovery window has passed. Not thread-safe: one watcher thread owns it.
    """

    def __init__(
        self,
        gpus: Mapping[str, Sequence[str]],
        *,
        now: float,
        recovery_window: float = DEFAULT_RECOVERY_WINDOW,
        ignored_xids: Iterable[int] = DEFAULT_IGNORED_XIDS,
    ) -> None:
        self.recovery_window = recovery_window
        self.ignored_xids = frozenset(ignored_xids)
        self._gpus = {gpu: _GpuState(tuple(devs), answering_since=now) for gpu, devs in gpus.items()}
        self._gpu_of = {dev: gpu for gpu, devs in gpus.items() for dev in devs}

    # --- reading ---

    def health(self, device: str) -> DeviceHealth:
        state = self._gpus[self._gpu_of[device]]
        problems: list[Problem] = []
        if device in state.xid:
            xid, since, _ = state.xid[device]
            problems.append(Problem("xid", since, xid))
        if state.lost_since is not None:
            problems.append(Problem("gpu-lost", state.lost_since))
        if state.unmonitored_since is not None:
            problems.append(Problem("unmonitored", state.unmonitored_since))
        return DeviceHealth(device, tuple(problems))

    def all(self) -> list[DeviceHealth]:
        return [self.health(dev) for dev in sorted(self._gpu_of)]

    def devices_of(self, gpu: str) -> tuple[str, ...]:
        return self._gpus[gpu].devices

    def is_ignored(self, xid: int) -> bool:
        return xid in self.ignored_xids

    # --- observations ---

    def _changes(self, devices: Iterable[str], mutate: Callable[[], None]) -> list[Change]:
        devices = list(devices)
        before = {d: self.health(d) for d in devices}
        mutate()
        return [Change(before[d], after) for d in devices if (after := self.health(d)) != before[d]]

    def xid(self, device: str, xid: int, now: float) -> list[Change]:
        """A critical XID on `device`; ignored XIDs change nothing."""
        if self.is_ignored(xid):
            return []
        state = self._gpus[self._gpu_of[device]]

        def mutate() -> None:
            _, since, _ = state.xid.get(device, (xid, now, now))
            state.xid[device] = (xid, since, now)

        return self._changes([device], mutate)

    def lost(self, gpu: str, now: float) -> list[Change]:
        """A probe of `gpu` failed as a lost GPU does: all its devices are unhealthy."""
        state = self._gpus[gpu]

        def mutate() -> None:
            state.answering_since = None
            if state.lost_since is None:
                state.lost_since = now

        return self._changes(state.devices, mutate)

    def answered(self, gpu: str, now: float) -> list[Change]:
        """A probe of `gpu` succeeded; recovery is decided by `tick`."""
        state = self._gpus[gpu]
        if state.answering_since is None:
            state.answering_since = now
        return self.tick(now, [gpu])

    def unmonitored(self, gpu: str, now: float) -> list[Change]:
        state = self._gpus[gpu]

        def mutate() -> None:
            if state.unmonitored_since is None:
                state.unmonitored_since = now

        return self._changes(state.devices, mutate)

    def monitored(self, gpu: str) -> list[Change]:
        """The GPU's events are watched again (the simulated source's line went away)."""
        state = self._gpus[gpu]

        def mutate() -> None:
            state.unmonitored_since = None

        return self._changes(state.devices, mutate)

    def tick(self, now: float, gpus: Iterable[str] | None = None) -> list[Change]:
        """End the problems whose recovery window has passed."""
        changes: list[Change] = []
        for gpu in self._gpus if gpus is None else gpus:
            state = self._gpus[gpu]
            if state.answering_since is None:
                continue  # still lost: nothing recovers
            if now - state.answering_since >= self.recovery_window:
                changes += self._changes(state.devices, functools.partial(self._recover, state, now))
        return changes

    def _recover(self, state: _GpuState, now: float) -> None:
        """End what the window allows on a GPU that has answered for a whole window."""
        state.lost_since = None
        for dev, (_, _, last) in list(state.xid.items()):
            if now - last >= self.recovery_window:
                del state.xid[dev]


# --- what the published slice says ---


@dataclass(frozen=True)
class TaintSupport:
    """What this API server does with `spec.devices[].taints` (detected once at start)."""

    #: The server keeps device taints (1.36, or an older server with the DRADeviceTaints gate on).
    taints: bool
    #: The `None` effect is valid (1.35+).
    none_effect: bool
    #: Most taints a device may carry (4 on 1.34, 16 from 1.35).
    max_taints: int = 4
    #: Most devices in a slice whose devices carry taints (64 from 1.35; 128 on 1.34).
    max_devices_with_taints: int = 128
    #: One line for the log: how this was decided.
    detail: str = ""


NO_TAINTS: Final = TaintSupport(taints=False, none_effect=False, detail="not detected")


def rfc3339(when: float) -> str:
    return datetime.datetime.fromtimestamp(int(when), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def taints_for(health: DeviceHealth, *, driver: str, support: TaintSupport) -> list[dict[str, Any]]:
    """The `taints` of the device's slice entry: one per problem the server can express."""
    taints: list[dict[str, Any]] = []
    for problem in health.problems:
        effect = TAINT_EFFECT[problem.kind]
        if effect == "None" and not support.none_effect:
            continue  # informational only, and this server cannot say it
        taint: dict[str, Any] = {"key": facts.health_taint_key(problem.kind, driver), "effect": effect}
        if problem.xid is not None:
            taint["value"] = str(problem.xid)
        taint["timeAdded"] = rfc3339(problem.since)
        taints.append(taint)
    return taints[: support.max_taints]


#: Annotation (under the driver name) on every slice of the node's pool listing its devices with health
#: problems, for operators (`vke-gpu-dra verify`): on servers without device taints an unhealthy device
#: is not in the slice at all, so this is where its XID and since when are seen.
HEALTH_ANNOTATION_SUFFIX: Final = facts.HEALTH_ANNOTATION_SUFFIX


def health_annotation_key(driver: str) -> str:
    return facts.health_annotation_key(driver)


def health_annotations(health: Mapping[str, DeviceHealth], *, driver: str) -> dict[str, str]:
    """`{<driver>/device-health: JSON}` listing the devices with problems; empty when there are none.

    The JSON is a list of `{"device", "health", "problems": [{"reason", "xid"?, "since"}]}`.
    """
    rows: list[dict[str, Any]] = []
    for name in sorted(health):
        state = health[name]
        if not state.problems:
            continue
        problems = []
        for p in state.problems:
            row: dict[str, Any] = {"reason": p.kind, "since": rfc3339(p.since)}
            if p.xid is not None:
                row["xid"] = p.xid
            problems.append(row)
        rows.append({"device": name, "health": state.status, "problems": problems})
    if not rows:
        return {}
    return {health_annotation_key(driver): json.dumps(rows, separators=(",", ":"))}


def published_entries(
    entries: Sequence[dict[str, Any]],
    health: Mapping[str, DeviceHealth],
    *,
    driver: str,
    support: TaintSupport,
) -> list[dict[str, Any]]:
    """The device entries to publish: with taints where the server keeps them; otherwise an
    unallocatable device is left out until it recovers (informational problems change nothing)."""
    out: list[dict[str, Any]] = []
    for entry in entries:
        state = health.get(str(entry["name"]))
        if state is None or not state.problems:
            out.append(entry)
            continue
        if not support.taints:
            if state.allocatable:
                out.append(entry)
            continue
        taints = taints_for(state, driver=driver, support=support)
        out.append({**entry, "taints": taints} if taints else entry)
    return out
