"""The DRAPlugin gRPC service (v1 and v1beta1) served on `<plugin-data-dir>/dra.sock`.

One servicer object handles both API versions: their messages are identical, so each call
answers with the response class of the version it was called through. Calls run on the
server's thread pool and are not serialized here; the device state is thread-safe.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any, Protocol

import grpc

from ._proto.dra.v1 import api_pb2 as v1_pb2
from ._proto.dra.v1 import api_pb2_grpc as v1_grpc
from ._proto.dra.v1beta1 import api_pb2 as v1beta1_pb2
from ._proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from .metrics import Metrics
from .model import ClaimError, ClaimRef, PreparedDevice

log = logging.getLogger(__name__)

DRA_SOCKET_NAME = "dra.sock"

_PB_BY_PACKAGE: dict[str, ModuleType] = {
    v1_pb2.DESCRIPTOR.package: v1_pb2,
    v1beta1_pb2.DESCRIPTOR.package: v1beta1_pb2,
}
_call_ids = itertools.count(1)


class ClaimPreparer(Protocol):
    """What the service needs from the device state (vke_gpu_dra.state.DeviceState)."""

    def prepare(
        self, ref: ClaimRef, claim: Mapping[str, Any], *, deadline: float | None = None
    ) -> list[PreparedDevice]: ...

    def unprepare(self, ref: ClaimRef, *, deadline: float | None = None) -> None: ...


class ClaimReader(Protocol):
    """Reads ResourceClaims from the API server; None when the claim does not exist."""

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None: ...


def request_names(names: Sequence[str]) -> tuple[str, ...]:
    """Request names as containers reference them: `<request>/<subrequest>` becomes `<request>`."""
    seen: dict[str, None] = {}
    for name in names:
        seen.setdefault(name.split("/", 1)[0], None)
    return tuple(seen)


#: Time kept back from the call's deadline for sending the answer, so that a claim that ran out of
#: time gets its own error before kubelet gives up on the whole call.
ANSWER_MARGIN_SECONDS = 0.5


def call_deadline(context: grpc.ServicerContext) -> float | None:
    """When work for the call must end, as a `time.monotonic()` value; None when kubelet set no deadline."""
    remaining = context.time_remaining()
    if remaining is None:
        return None
    return time.monotonic() + max(0.0, remaining - ANSWER_MARGIN_SECONDS)


def check_claim(ref: ClaimRef, claim: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The claim kubelet named must exist in the API; the device state checks the rest (UID, allocation)."""
    if claim is None:
        raise ClaimError(f"claim {ref.namespace}/{ref.name} not found")
    return claim


class DRAServicer:
    """NodePrepareResources / NodeUnprepareResources for kubelet."""

    def __init__(self, *, claims: ClaimReader, state: ClaimPreparer, metrics: Metrics) -> None:
        self._claims = claims
        self._state = state
        self._metrics = metrics

    def _prepare_one(self, ref: ClaimRef, deadline: float | None) -> list[PreparedDevice]:
        claim = check_claim(ref, self._claims.get_resource_claim(ref.namespace, ref.name))
        return self._state.prepare(ref, claim, deadline=deadline)

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        pb = _PB_BY_PACKAGE[request.DESCRIPTOR.file.package]
        response = pb.NodePrepareResourcesResponse()
        if not request.claims:
            return response
        call_id = next(_call_ids)
        started = time.monotonic()
        deadline = call_deadline(context)
        for claim in request.claims:
            ref = ClaimRef(namespace=claim.namespace, name=claim.name, uid=claim.uid)
            entry = response.claims[claim.uid]
            fields: dict[str, object] = {
                "call": call_id,
                "claim": f"{ref.namespace}/{ref.name}",
                "uid": ref.uid,
            }
            try:
                devices = self._prepare_one(ref, deadline)
            except ClaimError as err:
                entry.error = str(err)
                self._metrics.prepare_claims.labels(result="error").inc()
                log.warning("prepare failed", extra={"fields": {**fields, "error": str(err)}})
                continue
            except Exception as err:
                entry.error = f"internal error preparing claim {ref.namespace}/{ref.name}: {err}"
                self._metrics.prepare_claims.labels(result="error").inc()
                log.exception("unexpected error while preparing", extra={"fields": fields})
                continue
            for dev in devices:
                entry.devices.add(
                    request_names=list(request_names(dev.request_names)),
                    pool_name=dev.pool_name,
                    device_name=dev.device_name,
                    cdi_device_ids=list(dev.cdi_device_ids),
                )
            self._metrics.prepare_claims.labels(result="success").inc()
            log.info(
                "prepared claim",
                extra={"fields": {**fields, "devices": [d.device_name for d in devices]}},
            )
        self._metrics.prepare_seconds.observe(time.monotonic() - started)
        return response

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        pb = _PB_BY_PACKAGE[request.DESCRIPTOR.file.package]
        response = pb.NodeUnprepareResourcesResponse()
        if not request.claims:
            return response
        call_id = next(_call_ids)
        started = time.monotonic()
        deadline = call_deadline(context)
        for claim in request.claims:
            ref = ClaimRef(namespace=claim.namespace, name=claim.name, uid=claim.uid)
            entry = response.claims[claim.uid]  # every claim gets an entry, even an empty one
            fields: dict[str, object] = {
                "call": call_id,
                "claim": f"{ref.namespace}/{ref.name}",
                "uid": ref.uid,
            }
            try:
                self._state.unprepare(ref, deadline=deadline)
            except ClaimError as err:
                entry.error = str(err)
                self._metrics.unprepare_claims.labels(result="error").inc()
                log.warning("unprepare failed", extra={"fields": {**fields, "error": str(err)}})
                continue
            except Exception as err:
                entry.error = f"internal error unpreparing claim {ref.namespace}/{ref.name}: {err}"
                self._metrics.unprepare_claims.labels(result="error").inc()
                log.exception("unexpected error while unpreparing", extra={"fields": fields})
                continue
            self._metrics.unprepare_claims.labels(result="success").inc()
            log.info("unprepared claim", extra={"fields": fields})
        self._metrics.unprepare_seconds.observe(time.monotonic() - started)
        return response


def add_dra_servicer(server: grpc.Server, servicer: DRAServicer) -> None:
    """Register the one servicer under both k8s.io.kubelet.pkg.apis.dra.{v1,v1beta1}.DRAPlugin."""
    v1_grpc.add_DRAPluginServicer_to_server(servicer, server)
    v1beta1_grpc.add_DRAPluginServicer_to_server(servicer, server)
