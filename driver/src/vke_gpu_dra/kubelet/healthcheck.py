"""grpc.health.v1.Health on TCP for kubelet's gRPC probes (as NVIDIA's plugin does).

Services "" and "liveness" are SERVING only while GetInfo on the registration socket and an
empty NodePrepareResources (v1beta1) on the DRA socket both answer; other names are NOT_FOUND.
"""

from __future__ import annotations

import logging
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ._proto.dra.v1beta1 import api_pb2 as dra_pb2
from ._proto.dra.v1beta1 import api_pb2_grpc as dra_grpc
from ._proto.pluginregistration.v1 import api_pb2 as reg_pb2
from ._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc

log = logging.getLogger(__name__)

KNOWN_SERVICES = ("", "liveness")
#: Each probe dials the socket's path anew: a connection made earlier (gRPC shares them between channels
#: by default) would still answer after the socket file is gone, and kubelet could no longer dial it.
_FRESH_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


class PluginHealthServicer(health_pb2_grpc.HealthServicer):
    def __init__(self, *, registration_socket: Path, dra_socket: Path, timeout: float = 5.0) -> None:
        self._reg = registration_socket
        self._dra = dra_socket
        self._timeout = timeout

    def probe(self) -> str:
        """Empty string when both sockets answer, else what failed."""
        try:
            with grpc.insecure_channel(f"unix:{self._reg}", options=_FRESH_CONNECTION) as channel:
                reg_grpc.RegistrationStub(channel).GetInfo(reg_pb2.InfoRequest(), timeout=self._timeout)
        except grpc.RpcError as err:
            return f"registration socket {self._reg}: {err.code().name}"
        try:
            with grpc.insecure_channel(f"unix:{self._dra}", options=_FRESH_CONNECTION) as channel:
                dra_grpc.DRAPluginStub(channel).NodePrepareResources(
                    dra_pb2.NodePrepareResourcesRequest(), timeout=self._timeout
                )
        except grpc.RpcError as err:
            return f"DRA socket {self._dra}: {err.code().name}"
        return ""

    def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        if request.service not in KNOWN_SERVICES:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        problem = self.probe()
        if problem:
            log.warning("health check failed", extra={"fields": {"problem": problem}})
            return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.NOT_SERVING)
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


def start_health_server(port: int, servicer: PluginHealthServicer) -> grpc.Server:
    """Serve the health service on all addresses at `port` (IPv6 dual-stack, else IPv4)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="health"))
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    bound = 0
    for address in (f"[::]:{port}", f"0.0.0.0:{port}"):
        try:
            bound = server.add_insecure_port(address)
        except RuntimeError:
            bound = 0
        if bound:
            break
    if not bound:
        raise OSError(f"cannot listen on health port {port}")
    server.start()
    return server
