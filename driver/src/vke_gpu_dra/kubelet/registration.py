"""The kubelet plugin-registration service served on `<registrar-dir>/<driver>-reg.sock`.

With a rolling-update id (the pod UID) each pod gets sockets of its own, so two plugin pods of
one driver can run on a node at once during an upgrade (kubelet 1.33+ keeps one registration per
endpoint): `<plugin-data-dir>/dra-<id>.sock`, and the first registration socket name of
`rolling_update_registration_names` whose path fits a unix socket, as Kubernetes' Go helper
(k8s.io/dynamic-resource-allocation 0.37 `kubeletplugin.RollingUpdateRegistrarSocketFile`) names
it. kubelet finds registration sockets by watching the registrar directory, whatever their name.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from ._proto.pluginregistration.v1 import api_pb2 as reg_pb2
from ._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from .resource_health import HEALTH_SERVICES
from .socket_names import (
    DRA_SOCKET_NAME,
    dra_socket_name,
    registration_socket,
    registration_socket_name,
    rolling_update_registration_names,
)

log = logging.getLogger(__name__)

__all__ = [
    "DRA_SOCKET_NAME",
    "RegistrationServicer",
    "RegistrationSnapshot",
    "RegistrationStatus",
    "add_registration_servicer",
    "dra_socket_name",
    "registration_socket",
    "registration_socket_name",
    "rolling_update_registration_names",
]

PLUGIN_TYPE = "DRAPlugin"
#: The DRA services on the DRA socket, in order of preference (kubelet takes the first it knows).
DRA_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
#: PluginInfo.supported_versions: every service on the DRA socket, as the Go helper lists them.
#: kubelet picks its DRA service from the first two and (1.37+) its health service from the last
#: two; a kubelet ignores the names it does not know.
SUPPORTED_VERSIONS = DRA_SERVICES + HEALTH_SERVICES


@dataclass(frozen=True)
class RegistrationSnapshot:
    """Last registration status kubelet reported (`registered` is None until kubelet reports)."""

    registered: bool | None
    error: str
    updated_at: float | None


class RegistrationStatus:
    """Thread-safe record of kubelet's registration notifications, with change listeners."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot = RegistrationSnapshot(None, "", None)
        self._listeners: list[Callable[[RegistrationSnapshot], None]] = []

    def add_listener(self, listener: Callable[[RegistrationSnapshot], None]) -> None:
        """Call `listener` on every change, and at once with what kubelet reported already (if anything)."""
        with self._lock:
            self._listeners.append(listener)
            snapshot = self._snapshot
        if snapshot.registered is not None:
            listener(snapshot)

    def record(self, registered: bool, error: str) -> None:
        snapshot = RegistrationSnapshot(registered, error, time.time())
        with self._lock:
            self._snapshot = snapshot
            listeners = list(self._listeners)
        for listener in listeners:
            listener(snapshot)

    def snapshot(self) -> RegistrationSnapshot:
        with self._lock:
            return self._snapshot


class RegistrationServicer(reg_grpc.RegistrationServicer):
    """Answers kubelet's GetInfo and records NotifyRegistrationStatus."""

    def __init__(self, *, driver_name: str, dra_endpoint: Path, status: RegistrationStatus) -> None:
        if not dra_endpoint.is_absolute():
            raise ValueError(f"DRA endpoint {dra_endpoint} must be an absolute path")
        self._info = reg_pb2.PluginInfo(
            type=PLUGIN_TYPE,
            name=driver_name,
            endpoint=str(dra_endpoint),
            supported_versions=list(SUPPORTED_VERSIONS),
        )
        self._status = status
        #: Set once kubelet (or anyone) asked for the plugin's info.
        self.info_asked = threading.Event()

    def GetInfo(self, request: reg_pb2.InfoRequest, context: grpc.ServicerContext) -> reg_pb2.PluginInfo:
        self.info_asked.set()
        return self._info

    def NotifyRegistrationStatus(
        self, request: reg_pb2.RegistrationStatus, context: grpc.ServicerContext
    ) -> reg_pb2.RegistrationStatusResponse:
        self._status.record(request.plugin_registered, request.error)
        if request.plugin_registered:
            log.info("registered with kubelet", extra={"fields": {"driver": self._info.name}})
            return reg_pb2.RegistrationStatusResponse()
        log.error(
            "kubelet rejected the registration",
            extra={"fields": {"driver": self._info.name, "error": request.error}},
        )
        # Like the Go helper: a failed registration is answered with an error.
        context.set_code(grpc.StatusCode.UNKNOWN)
        context.set_details(f"registration failed: {request.error}")
        return reg_pb2.RegistrationStatusResponse()


def add_registration_servicer(server: grpc.Server, servicer: RegistrationServicer) -> None:
    reg_grpc.add_RegistrationServicer_to_server(servicer, server)
