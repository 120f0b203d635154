"""What kubelet talks to: the DRA socket and the registration socket, served first of all.

`KubeletEndpoints.start` serves the DRA socket (prepare/unprepare v1 and v1beta1, resource health v1
and v1alpha1) and then the registration socket, before the plugin loads anything else: kubelet finds
and registers the plugin within milliseconds of the process start (the entry point imports the rest of
the plugin only afterwards). Until `open` gives the claims, the state, the metrics and the devices,
kubelet's calls wait at the start gate within their own deadline, and the health streams say nothing;
`fail` answers the waiting calls with why the start failed.

This module loads gRPC, the kubelet protocols and the gate only: no API client, no metrics library.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from .dra_service import ClaimPreparer, DRAServicer, add_dra_servicer
from .registration import RegistrationServicer, RegistrationStatus, add_registration_servicer
from .resource_health import DeviceHealthBoard, ResourceHealthServicer, add_resource_health_servicer
from .sockets import remove_socket, unix_server
from .start_gate import StartGate

#: The stop after a failed start (`fail`) gives the calls waiting at the gate this long to send the failure
#: they answer. They answer at once, and gRPC ends the stop as soon as they have, so it bounds the exit
#: rather than delaying it; with no grace the server would cancel them before their answer is sent.
FAILED_START_GRACE: Final = 5.0

if TYPE_CHECKING:
    import grpc
    from vke_gpu_dra_core.device_model import Device

    from ..metrics import Metrics
    from .claim_fetch import ClaimReader

log = logging.getLogger(__name__)


class EndpointSettings(Protocol):
    """What the endpoints take from the plugin's configuration (`config.Config` has it)."""

    @property
    def driver_name(self) -> str: ...

    @property
    def node_name(self) -> str: ...

    @property
    def dra_socket(self) -> Path: ...

    @property
    def registration_socket(self) -> Path: ...


#: Worker threads for the DRA socket's calls: concurrent Prepare/Unprepare calls plus health streams.
DRA_WORKERS: Final = 32
#: Worker threads for the registration socket's calls (GetInfo, NotifyRegistrationStatus), on top.
REGISTRATION_WORKERS: Final = 4
#: How long the start waits for kubelet's GetInfo before loading the rest of the plugin (`wait_for_info`).
INFO_WAIT_SECONDS: Final = 0.05


class KubeletEndpoints:
    """The plugin's two sockets for kubelet, with the start gate in front of the DRA calls. One gRPC server
    listens on both (one completion queue and one polling thread at rest, instead of two); kubelet dials
    the registration socket for registration and the DRA socket it names for the rest."""

    def __init__(
        self, *, driver_name: str, node_name: str, dra_socket: Path, registration_socket: Path
    ) -> None:
        self.driver_name = driver_name
        self.dra_socket = dra_socket
        self.registration_socket = registration_socket
        self.gate = StartGate()
        self.registration = RegistrationStatus()
        self.health_board = DeviceHealthBoard(node_name)
        self.dra_servicer = DRAServicer(gate=self.gate)
        self._server: grpc.Server | None = None
        self._registration_servicer: RegistrationServicer | None = None

    def start(self) -> None:
        """Serve both sockets, the DRA socket's file made before the registration socket's (kubelet
        registers the plugin as soon as that one appears, and dials the DRA socket then)."""
        server = unix_server(
            self.dra_socket,
            self.registration_socket,
            max_workers=DRA_WORKERS + REGISTRATION_WORKERS,
            name="kubelet",
        )
        add_dra_servicer(server, self.dra_servicer)
        add_resource_health_servicer(server, ResourceHealthServicer(self.health_board))
        self._registration_servicer = RegistrationServicer(
            driver_name=self.driver_name, dra_endpoint=self.dra_socket, status=self.registration
        )
        add_registration_servicer(server, self._registration_servicer)
        server.start()
        self._server = server
        log.info(
            "registration served",
            extra={
                "fields": {
                    "registration_socket": str(self.registration_socket),
                    "dra_socket": str(self.dra_socket),
                }
            },
        )

    def wait_for_info(self, timeout: float = INFO_WAIT_SECONDS) -> bool:
        """Wait up to `timeout` seconds for kubelet's GetInfo (it asks within milliseconds of the socket
        appearing): answered while this thread waits, it is not queued behind the imports of the rest of
        the plugin, which hold the interpreter's lock. False when it did not come (no kubelet yet, or a
        slow one: it is answered whenever it comes)."""
        servicer = self._registration_servicer
        return servicer is not None and servicer.info_asked.wait(timeout)

    @classmethod
    def of(cls, config: EndpointSettings) -> KubeletEndpoints:
        """The endpoints the plugin's configuration (`config.Config`) names."""
        return cls(
            driver_name=config.driver_name,
            node_name=config.node_name,
            dra_socket=config.dra_socket,
            registration_socket=config.registration_socket,
        )

    @property
    def started(self) -> bool:
        return self._server is not None

    def open(
        self, *, claims: ClaimReader, state: ClaimPreparer, metrics: Metrics, devices: Sequence[Device]
    ) -> None:
        """The plugin is ready: the health streams get the devices, and kubelet's calls go through."""
        self.health_board.add_devices(devices)
        self.dra_servicer.bind(claims=claims, state=state, metrics=metrics)
        self.gate.open()

    def fail(self, why: str) -> None:
        """The start failed: calls waiting at the gate answer `why` (stop with FAILED_START_GRACE)."""
        self.gate.fail(why)

    def stop(self, grace: float) -> None:
        """The registration socket's file first (kubelet's plugin watcher deregisters the plugin and no
        one can dial it again), then the server after `grace` seconds for the calls in flight; both
        socket files are removed."""
        remove_socket(self.registration_socket)
        self.health_board.close()  # ends resource-health streams
        if self._server is not None:
            self._server.stop(grace).wait()
        remove_socket(self.dra_socket)
        self.dra_servicer.close()  # its claim-reader pool, once no call can use it
