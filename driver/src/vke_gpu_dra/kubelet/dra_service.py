"""The DRAPlugin gRPC service (v1 and v1beta1) served on `<plugin-data-dir>/dra.sock`.

One servicer object handles both API versions: their messages are identical, so each call
answers with the response class of the version it was called through. Calls run on the
server's thread pool and are not serialized here; the device state is thread-safe.

kubelet gives each call a deadline (45 s). The claims of a Prepare call are read from the API
server concurrently (`claim_fetch.ClaimFetcher`), each request bounded by what is left of that
deadline, so the answer always arrives in time: a claim whose read did not finish gets its own
error saying so. A claim named twice in one call is answered once, as the Go helper does.

Both RPCs answer their claims through one loop (`answer_each_claim`): each claim gets its own
entry, its own error and its own log line, and is counted by result in the RPC's metric.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import grpc

from ._proto.dra.v1 import api_pb2 as v1_pb2
from ._proto.dra.v1 import api_pb2_grpc as v1_grpc
from ._proto.dra.v1beta1 import api_pb2 as v1beta1_pb2
from ._proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from .start_gate import StartGate

if TYPE_CHECKING:
    from prometheus_client import Counter
    from vke_gpu_dra_core.device_model import ClaimRef, PreparedDevice

    from ..metrics import Metrics
    from .claim_fetch import ClaimFetcher, ClaimReader, Deadline

# The service is served before the plugin has loaded (kubelet registers it first): the device model and
# the claim reads (`claim_fetch`, the API errors) load with the first call or `bind`, not on that path.

log = logging.getLogger(__name__)


#: The protocol version of each request message (both RPCs, both versions), by its class.
_PB_BY_REQUEST: dict[type, ModuleType] = {
    request: pb
    for pb in (v1_pb2, v1beta1_pb2)
    for request in (pb.NodePrepareResourcesRequest, pb.NodeUnprepareResourcesRequest)
}
#: Whether the version's answer carries a device's consumable share (v1 from Kubernetes 1.35; v1beta1 not).
_HAS_SHARE_ID: dict[ModuleType, bool] = {
    pb: "share_id" in pb.Device.DESCRIPTOR.fields_by_name for pb in (v1_pb2, v1beta1_pb2)
}
_call_ids = itertools.count(1)
T = TypeVar("T")


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
    from vke_gpu_dra_core.device_model import ClaimRef  # noqa: PLC0415  (see the imports)

    refs: dict[str, ClaimRef] = {}
    for claim in claims:
        refs.setdefault(claim.uid, ClaimRef(namespace=claim.namespace, name=claim.name, uid=claim.uid))
    return list(refs.values())


def check_claim(ref: ClaimRef, claim: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The claim kubelet named must exist in the API; the device state checks the rest (UID, allocation)."""
    from vke_gpu_dra_core.device_model import ClaimError  # noqa: PLC0415  (see the imports)

    if claim is None:
        raise ClaimError(f"claim {ref.namespace}/{ref.name} not found")
    return claim


@dataclass(frozen=True)
class _Call:
    """One RPC past its preamble: the claims to act on, its deadline, id and start, what it is bound to."""

    refs: list[ClaimRef]
    deadline: Deadline
    call_id: int
    started: float
    bound: tuple[ClaimFetcher, ClaimPreparer, Metrics]


class DRAServicer:
    """NodePrepareResources / NodeUnprepareResources for kubelet."""

    def __init__(
        self,
        *,
        metrics: Metrics | None = None,
        claims: ClaimReader | None = None,
        state: ClaimPreparer | None = None,
        fetcher: ClaimFetcher | None = None,
        gate: StartGate | None = None,
    ) -> None:
        """Served before the plugin is ready (`gate`): `bind` gives the claims, the state and the metrics
        once it is."""
        self._gate = gate
        self._bound: tuple[ClaimFetcher, ClaimPreparer, Metrics] | None = None
        if state is not None and metrics is not None and (claims is not None or fetcher is not None):
            self.bind(claims=claims, state=state, metrics=metrics, fetcher=fetcher)

    def bind(
        self,
        *,
        state: ClaimPreparer,
        metrics: Metrics,
        claims: ClaimReader | None = None,
        fetcher: ClaimFetcher | None = None,
    ) -> None:
        """Where claims are read and prepared, and counted; the gate opens after this."""
        from .claim_fetch import ClaimFetcher  # noqa: PLC0415  (see the imports)

        if fetcher is None:
            if claims is None:
                raise ValueError("bind needs the claims' reader or a fetcher")
            fetcher = ClaimFetcher(claims)
        self._bound = (fetcher, state, metrics)

    def close(self) -> None:
        if self._bound is not None:
            self._bound[0].close()

    def _ready(
        self, refs: Sequence[ClaimRef], entries: Any, deadline: Deadline
    ) -> tuple[ClaimFetcher, ClaimPreparer, Metrics] | None:
        """Wait for the plugin to be ready within the call's deadline; else every claim answers why."""
        why = self._gate.wait(deadline.at) if self._gate is not None else None
        if why is None and self._bound is not None:
            return self._bound
        why = why or "the plugin is not serving yet"
        for ref in refs:
            entries[ref.uid].error = f"claim {ref.namespace}/{ref.name}: {why}"
        log.warning("call before the plugin was ready", extra={"fields": {"claims": len(refs), "why": why}})
        return None

    def _begin(
        self,
        request: Any,
        response: Any,
        context: grpc.ServicerContext,
        wording: Wording,
        results: Callable[[Metrics], Counter],
    ) -> _Call | None:
        """The preamble of both RPCs: the call's deadline and id, its claims (each UID once), the plugin
        ready; a claim whose reference is not usable gets its error here (`claim_ref_problem`). None when
        no claim is left to act on (the response says why for each)."""
        from vke_gpu_dra_core.device_model import claim_ref_problem  # noqa: PLC0415  (see the imports)

        from .claim_fetch import Deadline  # noqa: PLC0415  (see the imports)

        if not request.claims:
            return None
        deadline = Deadline.of(context)
        call_id, started = next(_call_ids), time.monotonic()
        refs = unique_claims(request.claims)
        bound = self._ready(refs, response.claims, deadline)
        if bound is None:
            return None
        usable = []
        for ref in refs:
            problem = claim_ref_problem(ref)
            if problem is None:
                usable.append(ref)
                continue
            response.claims[ref.uid].error = problem
            results(bound[2]).labels(result="error").inc()
            fields = {
                "call": call_id,
                "claim": f"{ref.namespace}/{ref.name}",
                "uid": ref.uid,
                "error": problem,
            }
            log.warning(wording.failed, extra={"fields": fields})
        return _Call(usable, deadline, call_id, started, bound) if usable else None

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        pb = _PB_BY_REQUEST[type(request)]
        response = pb.NodePrepareResourcesResponse()
        call = self._begin(request, response, context, _PREPARE, lambda m: m.prepare_claims)
        if call is None:
            return response
        refs, deadline, call_id, started = call.refs, call.deadline, call.call_id, call.started
        fetcher, state, metrics = call.bound
        fetched = fetcher.fetch(refs, deadline)

        def prepare(ref: ClaimRef) -> list[PreparedDevice]:
            return state.prepare(ref, check_claim(ref, fetched[ref.uid].result()), deadline=deadline.at)

        answer_each_claim(
            refs,
            response.claims,
            call_id=call_id,
            action=prepare,
            answer=_answer_prepared if _HAS_SHARE_ID[pb] else _answer_prepared_without_shares,
            results=metrics.prepare_claims,
            wording=_PREPARE,
        )
        metrics.prepare_seconds.observe(time.monotonic() - started)
        return response

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        pb = _PB_BY_REQUEST[type(request)]
        response = pb.NodeUnprepareResourcesResponse()
        call = self._begin(request, response, context, _UNPREPARE, lambda m: m.unprepare_claims)
        if call is None:
            return response
        refs, deadline, call_id, started = call.refs, call.deadline, call.call_id, call.started
        _, state, metrics = call.bound

        def unprepare(ref: ClaimRef) -> None:
            state.unprepare(ref, deadline=deadline.at)

        answer_each_claim(
            refs,
            response.claims,
            call_id=call_id,
            action=unprepare,
            answer=_answer_unprepared,
            results=metrics.unprepare_claims,
            wording=_UNPREPARE,
        )
        metrics.unprepare_seconds.observe(time.monotonic() - started)
        return response


@dataclass(frozen=True)
class Wording:
    """What one RPC logs and answers about each claim."""

    done: str  #: info line of a claim that was handled
    failed: str  #: warning line of a claim refused with a ClaimError (its text is the answer)
    unexpected: str  #: error line (with the trace) of any other exception
    internal: str  #: start of the answer to such an exception: "<internal> claim <ns>/<name>: <error>"


_PREPARE = Wording(
    done="prepared claim",
    failed="prepare failed",
    unexpected="unexpected error while preparing",
    internal="internal error preparing",
)
_UNPREPARE = Wording(
    done="unprepared claim",
    failed="unprepare failed",
    unexpected="unexpected error while unpreparing",
    internal="internal error unpreparing",
)


def _answer_prepared(
    entry: Any, devices: list[PreparedDevice], *, with_shares: bool = True
) -> dict[str, object]:
    """The claim's devices; a consumable share carries its `share_id` where the protocol has it (v1 from
    Kubernetes 1.35: kubelet keeps it per container; v1beta1 has no such field)."""
    for dev in devices:
        added = entry.devices.add(
            request_names=list(request_names(dev.request_names)),
            pool_name=dev.pool_name,
            device_name=dev.device_name,
            cdi_device_ids=list(dev.cdi_device_ids),
        )
        if dev.share_id is not None and with_shares:
            added.share_id = dev.share_id
    return {"devices": [d.device_name for d in devices]}


def _answer_prepared_without_shares(entry: Any, devices: list[PreparedDevice]) -> dict[str, object]:
    return _answer_prepared(entry, devices, with_shares=False)


def _answer_unprepared(entry: Any, outcome: None) -> dict[str, object]:
    return {}


def answer_each_claim(
    refs: Sequence[ClaimRef],
    entries: Any,
    *,
    call_id: int,
    action: Callable[[ClaimRef], T],
    answer: Callable[[Any, T], Mapping[str, object]],
    results: Counter,
    wording: Wording,
) -> None:
    """Run `action` on each claim in turn and answer it in `entries` (the response's claims map).

    Every claim gets an entry, even an empty one. A ClaimError becomes that claim's error as it
    is; any other exception an "internal error" naming the claim; neither stops the other claims.
    On success `answer` fills the entry from the action's outcome and returns the fields it adds
    to the log line. `results` counts each claim by result ("success" or "error"). This is the
    one catch-all of a kubelet call, where its answer is built; the device state answers each of
    its own calls once (`batch.answering`) and hands that answer over as the exception raised here.
    """
    from vke_gpu_dra_core.device_model import ClaimError  # noqa: PLC0415  (see the imports)

    for ref in refs:
        entry = entries[ref.uid]
        fields: dict[str, object] = {
            "call": call_id,
            "claim": f"{ref.namespace}/{ref.name}",
            "uid": ref.uid,
        }
        try:
            outcome = action(ref)
        except ClaimError as err:
            entry.error = str(err)
            results.labels(result="error").inc()
            log.warning(wording.failed, extra={"fields": {**fields, "error": str(err)}})
            continue
        except Exception as err:
            entry.error = f"{wording.internal} claim {ref.namespace}/{ref.name}: {err}"
            results.labels(result="error").inc()
            log.exception(wording.unexpected, extra={"fields": fields})
            continue
        logged = answer(entry, outcome)
        results.labels(result="success").inc()
        log.info(wording.done, extra={"fields": {**fields, **logged}})


def add_dra_servicer(server: grpc.Server, servicer: DRAServicer) -> None:
    """Register the one servicer under both k8s.io.kubelet.pkg.apis.dra.{v1,v1beta1}.DRAPlugin."""
    v1_grpc.add_DRAPluginServicer_to_server(servicer, server)
    v1beta1_grpc.add_DRAPluginServicer_to_server(servicer, server)
