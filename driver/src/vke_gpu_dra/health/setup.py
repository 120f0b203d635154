"""Health watching as the plugin starts and stops it: device-taint support from the cluster features
detected at start, build the monitor, pick the source (NVML events for real GPUs, the health file for
simulated ones) and run it."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from vke_gpu_dra_core.device_model import Device
from vke_gpu_dra_core.discovery import DeviceSource

from ..cluster_features import ClusterFeatures
from ..kubelet.resource_health import DeviceHealthBoard
from ..metrics import Metrics
from ..slices import MAX_DEVICES_PER_SLICE
from . import taint_support
from .monitor import HealthMonitor, Watcher
from .policy import TaintSupport, health_annotation_key
from .simulated import FILE_NAME, SimulatedHealthFile

log = logging.getLogger(__name__)


class HealthWatching:
    """Built before the slice controller (its entries and slice size depend on taint support),
    started after it (changes are published through it)."""

    def __init__(
        self,
        *,
        driver: str,
        devices: Sequence[Device],
        board: DeviceHealthBoard,
        metrics: Metrics,
        support: TaintSupport,
        recovery_window: float,
        ignored_xids: frozenset[int],
        entry: Callable[[Device], dict[str, Any]] = Device.slice_entry,
    ) -> None:
        self.support = support
        self._driver = driver
        self._devices = list(devices)
        self._metrics = metrics
        self._recovery_window = recovery_window
        self._ignored_xids = ignored_xids
        self._publish: Callable[[list[dict[str, Any]], dict[str, str]], None] = lambda _entries, _notes: None
        self.monitor = HealthMonitor(
            driver=driver,
            entries=[entry(d) for d in self._devices],
            board=board,
            metrics=metrics,
            support=support,
            publish=self._relay,
        )
        self.watcher: Watcher | None = None

    def _relay(self, entries: list[dict[str, Any]], annotations: dict[str, str]) -> None:
        self._publish(entries, annotations)

    @classmethod
    def prepare(
        cls,
        features: ClusterFeatures,
        *,
        driver: str,
        devices: Sequence[Device],
        board: DeviceHealthBoard,
        metrics: Metrics,
        recovery_window: float,
        ignored_xids: frozenset[int],
        entry: Callable[[Device], dict[str, Any]] = Device.slice_entry,
    ) -> HealthWatching:
        support = taint_support.support_of(features)
        log.info(
            "unhealthy devices get device taints"
            if support.taints
            else "unhealthy devices are left out of the slices",
            extra={"fields": {"detected": support.detail}},
        )
        return cls(
            driver=driver,
            devices=devices,
            board=board,
            metrics=metrics,
            support=support,
            recovery_window=recovery_window,
            ignored_xids=ignored_xids,
            entry=entry,
        )

    @property
    def managed_annotations(self) -> tuple[str, ...]:
        """The slice annotations the health monitor sets (the slice controller removes them when unset)."""
        return (health_annotation_key(self._driver),)

    @property
    def slice_size(self) -> int:
        """Devices per slice: a slice whose devices may carry taints holds fewer on 1.35+ servers."""
        return self.support.max_devices_with_taints if self.support.taints else MAX_DEVICES_PER_SLICE

    def start(
        self,
        source: DeviceSource,
        *,
        simulated: bool,
        plugin_data_dir: Path,
        publish: Callable[[list[dict[str, Any]], dict[str, str]], None],
    ) -> None:
        self._publish = publish
        # An NvmlSource can only exist once its module is loaded: NVML bindings are not imported otherwise.
        nvml = sys.modules.get("vke_gpu_dra.discovery.nvml")
        if nvml is not None and isinstance(source, nvml.NvmlSource):
            from .nvml_watch import NvmlHealthWatcher  # noqa: PLC0415

            self.watcher = NvmlHealthWatcher(
                source,
                self._devices,
                self.monitor,
                self._metrics,
                recovery_window=self._recovery_window,
                ignored_xids=self._ignored_xids,
            )
        elif simulated:
            self.watcher = SimulatedHealthFile(
                plugin_data_dir / FILE_NAME,
                [d.name for d in self._devices],
                self.monitor,
                recovery_window=self._recovery_window,
                ignored_xids=self._ignored_xids,
            )
        else:
            log.info("this device source reports no health events; health is not watched")
            return
        try:
            self.watcher.start()
        except Exception as err:
            log.error(
                "GPU health watching could not start; devices stay published as healthy",
                extra={"fields": {"error": str(err)}},
                exc_info=True,
            )
            self.watcher = None

    def stop(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
