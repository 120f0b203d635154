"""A client of kubelet's PodResources API on this node: which claims the containers of its pods use.

kubelet serves `v1.PodResourcesLister` on `<kubelet root>/pod-resources/kubelet.sock` to local
readers only (no API server, no RBAC: whoever can open the socket). `List` gives every active pod of
the node (not terminated) with its containers and restartable init containers; for each container,
the claims its `resources.claims` use, by namespace/name, with the devices the driver's prepare
answered (driver, pool, device). The claim's UID is not there. kubelet fills these DRA fields only
with its gate KubeletPodResourcesDynamicResources on (`vke_gpu_dra_core.dra_gates`): on by default
from 1.34, locked on from 1.36; with the gate off a container that uses a claim lists none.

One `List` per call on a fresh channel, bounded by `timeout`; no retries. A failure raises
`PodResourcesError` with a `kind` (`unavailable`: no socket or kubelet does not answer on it;
`timeout`; `unimplemented`: a kubelet without the v1 API; `error`: anything else).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

import grpc

from ._proto.podresources.v1 import api_pb2 as pb
from ._proto.podresources.v1 import api_pb2_grpc as pb_grpc
from .socket_names import POD_RESOURCES_SOCKET as DEFAULT_SOCKET

#: Seconds a List may take when the caller gives no timeout.
DEFAULT_TIMEOUT: Final = 10.0
#: Largest answer read (gRPC's default of 4 MiB is near the size of a node with many busy pods).
MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024

_KINDS: Final = {
    grpc.StatusCode.UNAVAILABLE: "unavailable",
    grpc.StatusCode.DEADLINE_EXCEEDED: "timeout",
    grpc.StatusCode.UNIMPLEMENTED: "unimplemented",
}


class PodResourcesError(Exception):
    """kubelet's PodResources API could not be read; `kind` says how (see the module docs)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class ClaimDevice:
    """One device of a claim as kubelet keeps it from the driver's prepare."""

    driver: str
    pool: str
    device: str


@dataclass(frozen=True)
class ClaimUse:
    """A claim one container of an active pod of the node uses."""

    pod: str  #: the pod's namespace/name
    container: str
    namespace: str  #: the claim's namespace (the pod's)
    name: str  #: the claim's name (generated claims by their generated name)
    devices: tuple[ClaimDevice, ...]


@dataclass(frozen=True)
class PodResourcesView:
    """What one List answered: the active pods of the node and the claims their containers use."""

    pods: tuple[str, ...]  #: namespace/name of each active pod
    claims: tuple[ClaimUse, ...]


def view_of(response: pb.ListPodResourcesResponse) -> PodResourcesView:
    """The claims a List answer names (pure)."""
    pods: list[str] = []
    claims: list[ClaimUse] = []
    for pod in response.pod_resources:
        label = f"{pod.namespace}/{pod.name}"
        pods.append(label)
        for container in pod.containers:
            for used in container.dynamic_resources:
                devices = tuple(
                    ClaimDevice(r.driver_name, r.pool_name, r.device_name) for r in used.claim_resources
                )
                claims.append(ClaimUse(label, container.name, used.claim_namespace, used.claim_name, devices))
    return PodResourcesView(tuple(pods), tuple(claims))


class PodResourcesClient:
    """Lists the claims the pods of this node use through kubelet's socket at `socket`."""

    def __init__(self, socket: Path = DEFAULT_SOCKET) -> None:
        self.socket = socket

    def list_claims(self, timeout: float | None = None) -> PodResourcesView:
        """One List within `timeout` seconds (DEFAULT_TIMEOUT when None); raises PodResourcesError."""
        if not self.socket.exists():
            raise PodResourcesError("unavailable", f"no kubelet PodResources socket at {self.socket}")
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
        try:
            with grpc.insecure_channel(f"unix:{self.socket}", options=options) as channel:
                stub = pb_grpc.PodResourcesListerStub(channel)
                response = stub.List(
                    pb.ListPodResourcesRequest(),
                    timeout=DEFAULT_TIMEOUT if timeout is None else max(timeout, 0.001),
                )
        except grpc.RpcError as err:
            code = err.code() if isinstance(err, grpc.Call) else grpc.StatusCode.UNKNOWN
            details = err.details() if isinstance(err, grpc.Call) else str(err)
            raise PodResourcesError(
                _KINDS.get(code, "error"),
                f"kubelet PodResources List on {self.socket}: {code.name}: {details}",
            ) from None
        return view_of(response)
