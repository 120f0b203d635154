"""Device health for kubelet's DRAResourceHealth stream (NodeWatchResources), v1 and v1alpha1.

`DeviceHealthBoard` holds the current health of every device (thread-safe) and wakes the
streams when it changes; `ResourceHealthServicer` sends the complete device list on every
change and at a fixed interval. One servicer answers both API versions on the DRA socket:
`v1.DRAResourceHealth` (kubelet 1.37+ prefers it) and `v1alpha1.DRAResourceHealth` (kubelet
1.34 to 1.36; 1.37 to 1.39 still take it from plugins that offer nothing newer). The two
schemas are the same message for message and field for field, so every v1alpha1 update is the
v1 update re-read as v1alpha1.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import grpc

from ._proto.dra_health.v1 import api_pb2 as health_pb2
from ._proto.dra_health.v1 import api_pb2_grpc as health_grpc
from ._proto.dra_health.v1alpha1 import api_pb2 as health_v1alpha1_pb2
from ._proto.dra_health.v1alpha1 import api_pb2_grpc as health_v1alpha1_grpc

if TYPE_CHECKING:
    from vke_gpu_dra_core.device_model import Device

#: The health services in PluginInfo.supported_versions (`<proto package>.<service>`), newest
#: first, as Kubernetes' Go helper (kubeletplugin) lists them: kubelet 1.37+ opens the stream on
#: the newest it knows, and only for plugins that list one; kubelet 1.34 to 1.36 open v1alpha1
#: without looking.
HEALTH_SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
#: Longest `message` kubelet keeps (it cuts longer ones to 1021 characters and "...").
MAX_MESSAGE_CHARS = 1024
#: Seconds between two full lists when nothing changes (kubelet's default timeout is 30 s).
DEFAULT_RESEND_INTERVAL = 30.0

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
    #: Why it is not healthy (`xid 79`, `gpu-lost`, `unmonitored`); "" when healthy. It is the
    #: stream's `message` (kubelet 1.36+ shows it in the pod status), the log's and the metrics'.
    reason: str = ""


class DeviceHealthBoard:
    """Current health of this node's devices, with a version number bumped on every change."""

    def __init__(self, pool_name: str, devices: Sequence[Device] | None = None) -> None:
        """`devices` None: not known yet (the plugin registers before discovery); `add_devices` gives
        them, and the streams send nothing until then."""
        self.pool_name = pool_name
        self._cond = threading.Condition()
        self._entries: dict[str, DeviceHealthEntry] = {}
        self._version = 0
        self._closed = False
        self._known = False
        if devices is not None:
            self.add_devices(devices)

    def add_devices(self, devices: Sequence[Device]) -> None:
        """The node's devices, discovered: each healthy or not as discovery found it."""
        now = int(time.time())
        with self._cond:
            self._entries = {
                d.name: DeviceHealthEntry(d.name, d.healthy, now, "healthy" if d.healthy else "unhealthy")
                for d in devices
            }
            self._known = True
            self._version += 1
            self._cond.notify_all()

    @property
    def known(self) -> bool:
        """The devices are known (`add_devices`)."""
        with self._cond:
            return self._known

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


def health_message(reason: str) -> str:
    """The `message` of a device: its reason, cut as kubelet would cut it beyond 1024 characters."""
    if len(reason) <= MAX_MESSAGE_CHARS:
        return reason
    return reason[: MAX_MESSAGE_CHARS - 3] + "..."


def health_response(
    pool_name: str, entries: Sequence[DeviceHealthEntry]
) -> health_pb2.NodeWatchResourcesResponse:
    """The v1 update: every device with its health, last change and reason."""
    response = health_pb2.NodeWatchResourcesResponse()
    for entry in entries:
        response.devices.add(
            device=health_pb2.DeviceIdentifier(pool_name=pool_name, device_name=entry.name),
            health=_PROTO_STATUS[entry.status],
            last_updated_time=entry.updated_at,
            message=health_message(entry.reason),
        )
    return response


def as_v1alpha1(
    response: health_pb2.NodeWatchResourcesResponse,
) -> health_v1alpha1_pb2.NodeWatchResourcesResponse:
    """The same update for a v1alpha1 client (the schemas are wire-identical)."""
    return health_v1alpha1_pb2.NodeWatchResourcesResponse.FromString(response.SerializeToString())


class ResourceHealthServicer(health_grpc.DRAResourceHealthServicer):
    """v1: streams the full device list on every change and every `resend_interval` seconds."""

    def __init__(self, board: DeviceHealthBoard, *, resend_interval: float = DEFAULT_RESEND_INTERVAL) -> None:
        self._board = board
        self._resend_interval = resend_interval

    def NodeWatchResources(
        self, request: health_pb2.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[health_pb2.NodeWatchResourcesResponse]:
        context.add_callback(self._board.wake)
        while context.is_active() and not self._board.closed:
            version, entries = self._board.snapshot()
            if self._board.known:  # registered before discovery: nothing to say until the devices are known
                yield health_response(self._board.pool_name, entries)
            self._board.wait(version, self._resend_interval)


class ResourceHealthV1alpha1Servicer(health_v1alpha1_grpc.DRAResourceHealthServicer):
    """v1alpha1: the v1 servicer's stream, each update re-read as v1alpha1."""

    def __init__(self, v1: ResourceHealthServicer) -> None:
        self._v1 = v1

    def NodeWatchResources(
        self, request: health_v1alpha1_pb2.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[health_v1alpha1_pb2.NodeWatchResourcesResponse]:
        for response in self._v1.NodeWatchResources(health_pb2.NodeWatchResourcesRequest(), context):
            yield as_v1alpha1(response)


def add_resource_health_servicer(server: grpc.Server, servicer: ResourceHealthServicer) -> None:
    """Serve `servicer` as v1.DRAResourceHealth and as v1alpha1.DRAResourceHealth."""
    health_grpc.add_DRAResourceHealthServicer_to_server(servicer, server)
    health_v1alpha1_grpc.add_DRAResourceHealthServicer_to_server(
        ResourceHealthV1alpha1Servicer(servicer), server
    )
