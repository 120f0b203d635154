"""Applies health changes: the health stream, the metrics, a log line per transition, and the
device entries the slice controller publishes (taints, or an unallocatable device left out)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from vke_gpu_dra_core import facts

from ..kubelet.resource_health import DeviceHealthBoard
from ..metrics import Metrics
from .policy import Change, DeviceHealth, TaintSupport, health_annotations, published_entries

log = logging.getLogger(__name__)

KINDS = facts.HEALTH_PROBLEMS


class Watcher(Protocol):
    """A health source running in its own thread."""

    def start(self) -> None: ...
    def stop(self, timeout: float = ...) -> None: ...


class HealthMonitor:
    """Thread-safe sink for the changes a watcher's tracker reports."""

    def __init__(
        self,
        *,
        driver: str,
        entries: Sequence[dict[str, Any]],
        board: DeviceHealthBoard,
        metrics: Metrics,
        support: TaintSupport,
        publish: Callable[[list[dict[str, Any]], dict[str, str]], None],
    ) -> None:
        self._driver = driver
        self._entries = list(entries)
        self._board = board
        self._metrics = metrics
        self.support = support
        self._publish = publish
        self._lock = threading.Lock()
        self._health: dict[str, DeviceHealth] = {}
        metrics.device_taints_supported.set(1 if support.taints else 0)

    def desired_entries(self) -> list[dict[str, Any]]:
        with self._lock:
            return published_entries(self._entries, self._health, driver=self._driver, support=self.support)

    def health(self, device: str) -> DeviceHealth:
        with self._lock:
            return self._health.get(device, DeviceHealth(device))

    def apply(self, changes: Sequence[Change]) -> None:
        if not changes:
            return
        with self._lock:
            for change in changes:
                self._record(change)
            entries = published_entries(
                self._entries, self._health, driver=self._driver, support=self.support
            )
            notes = health_annotations(self._health, driver=self._driver)
        self._publish(entries, notes)

    def _record(self, change: Change) -> None:
        after = change.after
        self._health[after.name] = after
        self._board.set_status(after.name, after.status, after.reason)
        kinds = {p.kind for p in after.problems}
        for kind in KINDS:
            self._metrics.device_health_problem.labels(device=after.name, reason=kind).set(
                1 if kind in kinds else 0
            )
        if change.before.status != after.status:
            self._metrics.device_health_transitions.labels(device=after.name, to=after.status).inc()
        self._metrics.devices_unhealthy.set(self._board.unhealthy_count())
        since = min((p.since for p in after.problems), default=None)
        fields = {
            "device": after.name,
            "health": after.status,
            "reason": after.reason or None,
            "was": change.before.reason or change.before.status,
            "since": since,
        }
        if after.status == "unhealthy":
            action = "tainted" if self.support.taints else "left out of the resource slices"
            log.warning(f"device unhealthy: {action}", extra={"fields": fields})
        elif after.problems:
            log.warning("device health changed", extra={"fields": fields})
        else:
            action = "taint removed" if self.support.taints else "published again"
            log.info(f"device recovered: {action}", extra={"fields": fields})
