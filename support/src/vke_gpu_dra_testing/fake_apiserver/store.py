"""The ground every resource of the fake stands on: one condition that guards all state, the
resourceVersion counter, the watch events, the requests seen and the emulated version."""

from __future__ import annotations

import copy
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from .gates import K8S_VERSION, version_tuple


class Store:
    """What every resource shares. Callers change state only while holding `cond`."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self._rv = itertools.count(1)
        self.current_rv = 0
        self.events: list[tuple[int, str, dict[str, Any]]] = []
        self.compacted_rv = 0
        #: How often compact() ran: it ends every open watch with 410 Gone, caught up or not.
        self.compactions = 0
        self.requests: list[tuple[str, str]] = []
        #: Watch streams open right now (after their initial events were sent).
        self.watching = 0
        #: When set, watch requests wait for this event before they start (to order a test's steps).
        self.watch_gate: threading.Event | None = None
        self.closing = False
        #: The Kubernetes version emulated (/version, the schema, the device-taint rules).
        self.k8s_version = K8S_VERSION
        #: Feature gates on beyond the version's defaults (e.g. "DRADeviceTaints" before 1.36).
        self.feature_gates: set[str] = set()
        #: False: refuse watch-list requests like an apiserver without the WatchList feature.
        self.watch_list = True

    def _next_rv(self) -> str:
        self.current_rv = next(self._rv)
        return str(self.current_rv)

    def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        self.events.append((int(obj["metadata"]["resourceVersion"]), kind, copy.deepcopy(obj)))
        self.cond.notify_all()

    def pass_watch_gate(self) -> bool:
        """Wait until `watch_gate` (if any) is set; False when the server closes first."""
        gate = self.watch_gate
        while gate is not None and not gate.wait(0.05):
            if self.closing:
                return False
        return True

    def compact(self) -> None:
        """Forget history: open watches and watches from an older resourceVersion get 410 Gone."""
        with self.cond:
            self.compacted_rv = self.current_rv
            self.compactions += 1
            self.events.clear()
            self.cond.notify_all()

    def count(self, method: str, path_contains: str = "") -> int:
        with self.cond:
            return sum(1 for m, p in self.requests if m == method and path_contains in p)

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        """Poll `predicate` until it is true (returns False after `timeout`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            with self.cond:
                self.cond.wait(0.02)
        return predicate()

    def version_info(self) -> dict[str, Any]:
        major, minor = version_tuple(self.k8s_version)
        return {"major": str(major), "minor": str(minor), "gitVersion": f"v{self.k8s_version}"}
