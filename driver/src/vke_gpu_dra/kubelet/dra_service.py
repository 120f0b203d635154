"""The DRAPlugin gRPC service (v1 and v1beta1) served on `<plugin-data-dir>/dra.sock`.

One servicer object handles both API versions: their messages are identical, so each call
answers with the response class of the version it was called through. Calls run on the
server's thread pool and are not serialized here; the device state is thread-safe.

kubelet gives each call a deadline (45 s). The claims of a Prepare call are read from the API
server concurrently (`claim_fetch.ClaimFetcher`), each request bounded by what is left of that
deadline, so the answer always arrives in time: a claim whose read did not finish gets its own
error saying so. A claim named twice in one call is answered once, as the Go helper does.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any, Protocol

import grpc

from ..metrics import Metrics
from ..model import ClaimError, ClaimRef, PreparedDevice
from ._proto.dra.v1 import api_pb2 as v1_pb2
from ._proto.dra.v1 import api_pb2_grpc as v1_grpc
from ._proto.dra.v1beta1 import api_pb2 as v1beta1_pb2
from ._proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from .claim_fetch import ClaimFetcher, ClaimReader, Deadline

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


def request_names(names: Sequence[str]) -> tuple[str, ...]:
    """Request names as containers reference them: `<request>/<subrequest>` becomes `<request>`."""
    seen: dict[str, None] = {}
    for name in names:
        seen.setdefault(name.split("/", 1)[0], None)
    return tuple(seen)


def unique_claims(claims: Sequence[Any]) -> list[ClaimRef]:
    """The claims of a request, each UID once (the first occurrence), in request order."""
    refs: dict[str, ClaimRef] = {}
    for claim in claims:
        refs.setdefault(claim.uid, ClaimRef(namespace=claim.namespace, name=claim.name, uid=claim.uid))
    return list(refs.values())


def check_claim(ref: ClaimRef, claim: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The claim kubelet named must exist in the API; the device state checks the rest (UID, allocation)."""
    if claim is None:
        raise ClaimError(f"claim {ref.namespace}/{ref.name} not found")
    return claim


class DRAServicer:
    """NodePrepareResources / NodeUnprepareResources for kubelet."""

    def __init__(
        self,
        *,
        claims: ClaimReader,
        state: ClaimPreparer,
        metrics: Metrics,
        fetcher: ClaimFetcher | None = None,
    ) -> None:
        self._state = state
        self._metrics = metrics
        self._fetcher = fetcher or ClaimFetcher(claims)

    def close(self) -> None:
        self._fetcher.close()

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        pb = _PB_BY_PACKAGE[request.DESCRIPTOR.file.package]
        response = pb.NodePrepareResourcesResponse()
        if not request.claims:
            return response
        deadline = Deadline.of(context)
        call_id = next(_call_ids)
        started = time.monotonic()
        refs = unique_claims(request.claims)
        fetched = self._fetcher.fetch(refs, deadline)
        for ref in refs:
            entry = response.claims[ref.uid]
            fields: dict[str, object] = {
                "call": call_id,
                "claim": f"{ref.namespace}/{ref.name}",
                "uid": ref.uid,
            }
            try:
                devices = self._state.prepare(
                    ref, check_claim(ref, fetched[ref.uid].result()), deadline=deadline.at
                )
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
        deadline = Deadline.of(context)
        call_id = next(_call_ids)
        started = time.monotonic()
        for ref in unique_claims(request.claims):
            entry = response.claims[ref.uid]  # every claim gets an entry, even an empty one
            fields: dict[str, object] = {
                "call": call_id,
                "claim": f"{ref.namespace}/{ref.name}",
                "uid": ref.uid,
            }
            try:
                self._state.unprepare(ref, deadline=deadline.at)
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
