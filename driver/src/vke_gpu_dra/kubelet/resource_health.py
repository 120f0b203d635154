"""Device health for kubelet's DRAResourceHealth v1alpha1 stream (NodeWatchResources).

`DeviceHealthBoard` holds the current health of every device (thread-safe) and wakes the
streams when it changes; `ResourceHealthServicer` sends the complete device list on every
change and at a fixed interval.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import grpc
from vke_gpu_dra_core.device_model import Device

from ._proto.dra_health.v1alpha1 import api_pb2 as health_pb2
from ._proto.dra_health.v1alpha1 import api_pb2_grpc as health_grpc

#: Health as the stream reports it.
HealthStatus = Literal["healthy", "unhealthy", "unknown"]
_PROTO_STATUS = {
    "healthy": health_pb2.HEALTHY,
    "unhealthy": health_pb2.UNHEALTHY,
    "unknown": health_pb2.UNKNOWN,
}


@dataclass(frozen=True)
class DeviceHealthEntry:
    name: str
    healthy: bool
    updated_at: int
    #: "unknown" for a device that cannot be watched (it stays allocatable).
    status: HealthStatus = "healthy"
    #: Why it is not healthy (`xid 79`, `gpu-lost`, `unmonitored`); "" when healthy. The v1alpha1
    #: stream has no field for it: it goes to the log and the metrics.
    reason: str = ""


class DeviceHealthBoard:
    """Current health of this node's devices, with a version number bumped on every change."""

    def __init__(self, pool_name: str, devices: Sequence[Device]) -> None:
        now = int(time.time())
        self.pool_name = pool_name
        self._cond = threading.Condition()
        self._entries = {
            d.name: DeviceHealthEntry(d.name, d.healthy, now, "healthy" if d.healthy else "unhealthy")
            for d in devices
        }
        self._version = 0
        self._closed = False

    def set_health(self, device_name: str, healthy: bool) -> bool:
        """Record a device's health; True when it changed."""
        return self.set_status(device_name, "healthy" if healthy else "unhealthy")

    def set_status(self, device_name: str, status: HealthStatus, reason: str = "") -> bool:
        """Record a device's health and why; True when it changed."""
        with self._cond:
            current = self._entries.get(device_name)
            if current is None or (current.status, current.reason) == (status, reason):
                return False
            self._entries[device_name] = DeviceHealthEntry(
                device_name, status != "unhealthy", int(time.time()), status, reason
            )
            self._version += 1
            self._cond.notify_all()
            return True

    def entry(self, device_name: str) -> DeviceHealthEntry | None:
        with self._cond:
            return self._entries.get(device_name)

    def snapshot(self) -> tuple[int, list[DeviceHealthEntry]]:
        with self._cond:
            return self._version, sorted(self._entries.values(), key=lambda e: e.name)

    def unhealthy_count(self) -> int:
        with self._cond:
            return sum(not e.healthy for e in self._entries.values())

    def wait(self, seen_version: int, timeout: float) -> None:
        """Block until the version differs from `seen_version`, `wake()`/`close()`, or `timeout`."""
        with self._cond:
            if self._version == seen_version and not self._closed:
                self._cond.wait(timeout)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed


def health_response(
    pool_name: str, entries: Sequence[DeviceHealthEntry]
) -> health_pb2.NodeWatchResourcesResponse:
    response = health_pb2.NodeWatchResourcesResponse()
    for entry in entries:
        response.devices.add(
            device=health_pb2.DeviceIdentifier(pool_name=pool_name, device_name=entry.name),
            health=_PROTO_STATUS[entry.status],
            last_updated_time=entry.updated_at,
        )
    return response


class ResourceHealthServicer(health_grpc.DRAResourceHealthServicer):
    """Streams the full device list on every change and every `resend_interval` seconds."""

    def __init__(self, board: DeviceHealthBoard, *, resend_interval: float = 30.0) -> None:
        self._board = board
        self._resend_interval = resend_interval

    def NodeWatchResources(
        self, request: health_pb2.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[health_pb2.NodeWatchResourcesResponse]:
        context.add_callback(self._board.wake)
        while context.is_active() and not self._board.closed:
            version, entries = self._board.snapshot()
            yield health_response(self._board.pool_name, entries)
            self._board.wait(version, self._resend_interval)


def add_resource_health_servicer(server: grpc.Server, servicer: ResourceHealthServicer) -> None:
    health_grpc.add_DRAResourceHealthServicer_to_server(servicer, server)
