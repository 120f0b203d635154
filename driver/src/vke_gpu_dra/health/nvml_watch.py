"""Watches GPUs through NVML: one event set for the node, one thread.

At start every GPU is registered on the event set for critical XID and double-bit ECC errors (a GPU
whose events cannot be registered is `unmonitored`); MIG devices are resolved to their GPU-instance
and compute-instance ids, which NVML puts in each event. The thread waits on the set with a timeout
(`wait_ms`, so a stop is noticed promptly) and every `probe_interval` seconds asks NVML for each
GPU's handle and UUID: an answer like GPU_IS_LOST marks the GPU lost. The decisions are
`policy.HealthTracker`'s; this module only does NVML I/O.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pynvml
from vke_gpu_dra_core.device_model import Device

from ..discovery.nvml import NvmlSource
from ..metrics import Metrics
from .monitor import HealthMonitor
from .policy import DOUBLE_BIT_ECC_XID, Change, HealthTracker

log = logging.getLogger(__name__)

#: nvml.h: nvmlEventTypeXidCriticalError, nvmlEventTypeDoubleBitEccError.
EVENT_MASK: Final = pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError
#: gpuInstanceId/computeInstanceId of an event that concerns the whole GPU.
WHOLE_GPU: Final = 0xFFFFFFFF
#: Probe answers that mean the GPU is gone (fell off the bus, needs a reset, no longer enumerated).
LOST_ERRORS: Final = frozenset(
    {pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED, pynvml.NVML_ERROR_NOT_FOUND}
)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class Placement:
    """Where an event lands: the GPU's UUID and the GI/CI ids (WHOLE_GPU for a full GPU)."""

    gpu_uuid: str
    gi: int = WHOLE_GPU
    ci: int = WHOLE_GPU


def gpu_groups(devices: Sequence[Device]) -> dict[str, list[str]]:
    """GPU UUID -> names of the devices published for it (the GPU itself, or its MIG devices)."""
    groups: dict[str, list[str]] = {}
    for dev in devices:
        groups.setdefault(dev.extra.get("parentUUID", dev.uuid), []).append(dev.name)
    return groups


class NvmlHealthWatcher:
    def __init__(
        self,
        source: NvmlSource,
        devices: Sequence[Device],
        monitor: HealthMonitor,
        metrics: Metrics,
        *,
        recovery_window: float,
        ignored_xids: frozenset[int],
        wait_ms: int = 1000,
        probe_interval: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._source = source
        self._devices = list(devices)
        self._monitor = monitor
        self._metrics = metrics
        self._wait_ms = wait_ms
        self._probe_interval = probe_interval
        self._clock = clock
        self.tracker = HealthTracker(
            gpu_groups(self._devices), now=clock(), recovery_window=recovery_window, ignored_xids=ignored_xids
        )
        self._placement: dict[Placement, list[str]] = {}
        self._event_set: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Set once the GPUs are registered and the thread waits for events (tests wait for it).
        self.watching = threading.Event()
        #: Rounds of the thread's loop done (wait, probe, recovery): a later round has seen all before it.
        self.rounds = 0

    # --- lifecycle ---

    def start(self) -> None:
        self._source.open()
        try:
            self._event_set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as err:
            # Without events (an old driver, a library without the event API) the probe still finds lost GPUs.
            log.warning(
                "cannot create an NVML event set; every GPU is unmonitored, lost GPUs are still found",
                extra={"fields": {"error": str(err)}},
            )
            now = self._clock()
            self._monitor.apply(
                [c for gpu in gpu_groups(self._devices) for c in self.tracker.unmonitored(gpu, now)]
            )
        try:
            if self._event_set is not None:
                self._register()
        except Exception:
            self._close()
            raise
        self._thread = threading.Thread(target=self._run, name="gpu-health", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("the GPU health watcher did not stop in time")
                return
        self._close()

    def _close(self) -> None:
        if self._event_set is not None:
            try:
                pynvml.nvmlEventSetFree(self._event_set)
            except pynvml.NVMLError as err:
                log.warning("nvmlEventSetFree failed", extra={"fields": {"error": str(err)}})
            self._event_set = None
        self._source.close()

    # --- registration ---

    def _register(self) -> None:
        now = self._clock()
        changes: list[Change] = []
        for gpu_uuid, names in gpu_groups(self._devices).items():
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid.encode())
                supported = int(pynvml.nvmlDeviceGetSupportedEventTypes(handle))
                if not EVENT_MASK & supported:
                    raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # none of the events we watch
                pynvml.nvmlDeviceRegisterEvents(handle, EVENT_MASK & supported, self._event_set)
                self._resolve(gpu_uuid, names)
            except pynvml.NVMLError as err:
                log.warning(
                    "cannot watch GPU events; its devices are unmonitored",
                    extra={"fields": {"gpu": gpu_uuid, "devices": names, "error": str(err)}},
                )
                changes += self.tracker.unmonitored(gpu_uuid, now)
        self._monitor.apply(changes)

    def _resolve(self, gpu_uuid: str, names: list[str]) -> None:
        by_name = {d.name: d for d in self._devices}
        for name in names:
            dev = by_name[name]
            if "parentUUID" not in dev.extra:
                self._placement[Placement(gpu_uuid)] = [name]
                continue
            if not dev.uuid:  # a dynamic MIG placement: its MIG device exists only while a claim holds it
                continue
            handle = pynvml.nvmlDeviceGetHandleByUUID(dev.uuid.encode())
            gi = int(pynvml.nvmlDeviceGetGpuInstanceId(handle))
            ci = int(pynvml.nvmlDeviceGetComputeInstanceId(handle))
            self._placement[Placement(gpu_uuid, gi, ci)] = [name]
        # An event for the whole GPU concerns every device on it.
        self._placement.setdefault(Placement(gpu_uuid), list(names))

    # --- the thread ---

    def _run(self) -> None:
        next_probe = 0.0
        self.watching.set()
        while not self._stop.is_set():
            if self._event_set is None:
                self._stop.wait(self._wait_ms / 1000)
            elif self._wait_for_event():
                next_probe = 0.0  # a GPU is lost: find out which one now
            now = self._clock()
            if now >= next_probe:
                self._monitor.apply(self._probe(now))
                next_probe = now + self._probe_interval
            self._monitor.apply(self.tracker.tick(self._clock()))
            self.rounds += 1

    def _wait_for_event(self) -> bool:
        """Wait up to `wait_ms` for one event and apply it; True when NVML answers GPU_IS_LOST."""
        try:
            data = pynvml.nvmlEventSetWait_v2(self._event_set, self._wait_ms)
        except pynvml.NVMLError as err:
            if err.value == pynvml.NVML_ERROR_GPU_IS_LOST:
                return True
            if err.value != pynvml.NVML_ERROR_TIMEOUT:
                log.debug("waiting for NVML events failed", extra={"fields": {"error": str(err)}})
                self._stop.wait(0.1)
            return False
        self._monitor.apply(self._event(data))
        return False

    def _event(self, data: Any) -> list[Change]:
        event_type = int(data.eventType)
        kind = "xid" if event_type == pynvml.nvmlEventTypeXidCriticalError else "double-bit-ecc"
        xid = int(data.eventData) if kind == "xid" else DOUBLE_BIT_ECC_XID
        try:
            gpu_uuid = _text(pynvml.nvmlDeviceGetUUID(data.device))
        except pynvml.NVMLError as err:
            log.warning(
                "an NVML event names a GPU that does not answer", extra={"fields": {"error": str(err)}}
            )
            self._metrics.health_events.labels(kind=kind, outcome="unmatched").inc()
            return []
        placement = Placement(gpu_uuid, int(data.gpuInstanceId), int(data.computeInstanceId))
        names = self._placement.get(placement)
        fields = {"gpu": gpu_uuid, "xid": xid, "gi": placement.gi, "ci": placement.ci}
        if names is None:
            log.info("NVML event for a device this plugin does not publish", extra={"fields": fields})
            self._metrics.health_events.labels(kind=kind, outcome="unmatched").inc()
            return []
        if self.tracker.is_ignored(xid):
            log.info("ignored XID (application error)", extra={"fields": {**fields, "devices": names}})
            self._metrics.health_events.labels(kind=kind, outcome="ignored").inc()
            return []
        log.warning("fatal GPU event", extra={"fields": {**fields, "devices": names}})
        self._metrics.health_events.labels(kind=kind, outcome="fatal").inc()
        now = self._clock()
        return [c for name in names for c in self.tracker.xid(name, xid, now)]

    def _probe(self, now: float) -> list[Change]:
        changes: list[Change] = []
        for gpu_uuid in gpu_groups(self._devices):
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid.encode())
                pynvml.nvmlDeviceGetUUID(handle)
            except pynvml.NVMLError as err:
                if err.value in LOST_ERRORS:
                    first = self.tracker.health(self.tracker.devices_of(gpu_uuid)[0])
                    if not any(p.kind == "gpu-lost" for p in first.problems):
                        self._metrics.health_events.labels(kind="gpu-lost", outcome="fatal").inc()
                    changes += self.tracker.lost(gpu_uuid, now)
                else:
                    log.warning(
                        "probing a GPU failed", extra={"fields": {"gpu": gpu_uuid, "error": str(err)}}
                    )
                continue
            changes += self.tracker.answered(gpu_uuid, now)
        return changes
