"""Recovery of the claims a lost checkpoint dropped, from kubelet and the API server.

When neither the checkpoint file nor its copy can be read, or its journal was damaged, claims prepared
on this node may be missing from it (`DeviceState.lost`), and their GPUs could be handed to a new claim
while their pods still run. Until they are found, the state admits no new claim (every device counts as
held). `LostClaimsRecovery` finds them:

1. the claims the pods of this node use, from kubelet's PodResources API (`takeover.node_claims`, the pods
   of the node through the API server only where that grant exists). Its view must be complete, or be
   kubelet's own answer naming no claim (from Kubernetes 1.34 its DRA fields are on by default: no
   claim named is no claim used);
2. each of them read from the API server (a quorum GET within the deadline): one allocated to this node's
   pool by this driver is recovered with the devices of its allocation results.

`DeviceState.recover_lost` then makes them PrepareStarted entries holding those devices (an entry the
checkpoint kept is left as it is; one recovered from a CDI spec without a name gets its name), and the
loss ends. Each recovered claim is one log line with its UID and devices. From then on the held-devices
guard refuses another claim on them, kubelet's next prepare of one prepares it again, its unprepare
removes it, and reconciliation removes it once the API server says the claim is gone (`reconcile`).

It runs once at start (in the background) and again at each prepare of a new claim while the loss
lasts, within that call's deadline; one that cannot finish (kubelet or the API server unreachable) fails
that prepare with why, and kubelet's retry tries again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

from vke_gpu_dra_core.device_model import PreparedDevice
from vke_gpu_dra_core.objects import lookup

from .claims.checkpoint import ClaimEntry, ClaimState
from .kubeapi import ClaimSource, KubeError
from .nodelock import StateLockTimeout
from .takeover.node_claims import ClaimLookup

log = logging.getLogger(__name__)

#: The one undecided view accepted: kubelet answered and named no claim (its DRA fields are on by
#: default from 1.34, the oldest release this driver supports).
KUBELET_NAMED_NONE = "pod-resources-no-claims"


class LostState(Protocol):
    """What recovery needs of the device state (`state.DeviceState`)."""

    @property
    def lost(self) -> str | None: ...

    def recover_lost(
        self, claims: list[ClaimEntry], *, deadline: float | None = None
    ) -> list[ClaimEntry]: ...


def recovered_entry(claim: Mapping[str, Any], *, driver_name: str, pool_name: str) -> ClaimEntry | None:
    """The claim as a PrepareStarted entry holding the devices its allocation gives this driver in this
    pool (request names, consumable shares); None when it gives none or the claim has no UID."""
    uid = lookup(claim, "metadata", "uid")
    namespace = lookup(claim, "metadata", "namespace")
    name = lookup(claim, "metadata", "name")
    results = lookup(claim, "status", "allocation", "devices", "results")
    if not (isinstance(uid, str) and uid and isinstance(results, list)):
        return None
    devices: dict[tuple[str, str | None], list[str]] = {}
    for result in results:
        if not isinstance(result, Mapping) or result.get("driver") != driver_name:
            continue
        if result.get("pool") != pool_name or not isinstance(result.get("device"), str):
            continue
        share = result.get("shareID") if isinstance(result.get("shareID"), str) else None
        devices.setdefault((result["device"], share), []).append(str(result.get("request", "")))
    if not devices:
        return None
    prepared = tuple(
        PreparedDevice(tuple(requests), pool_name, device, (), share)
        for (device, share), requests in devices.items()
    )
    return ClaimEntry(uid, str(namespace or ""), str(name or ""), ClaimState.PREPARE_STARTED, prepared)


class LostClaimsRecovery:
    """Recovers the claims of `state` that its checkpoint lost; see the module docs."""

    def __init__(
        self,
        state: LostState,
        api: ClaimSource,
        claims: ClaimLookup,
        *,
        driver_name: str,
        pool_name: str,
        read_timeout: float = 10.0,
    ) -> None:
        self._state = state
        self._api = api
        self._claims = claims
        self._driver_name = driver_name
        self._pool_name = pool_name
        self._read_timeout = read_timeout
        self._running = threading.Lock()  # one recovery at a time; the others wait for its outcome

    def __call__(self, deadline: float) -> str | None:
        """Recover by `deadline` (time.monotonic()); None when nothing is lost (any more), else why not."""
        if not self._running.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return "another recovery is still running"
        try:
            if self._state.lost is None:
                return None
            return self._recover(deadline)
        finally:
            self._running.release()

    def start(self, deadline_seconds: float = 60.0) -> threading.Thread | None:
        """One recovery in the background when claims are lost (None: nothing to do)."""
        if self._state.lost is None:
            return None

        def run() -> None:
            why = self(time.monotonic() + deadline_seconds)
            if why is not None:
                log.warning(
                    "the claims the checkpoint lost are not recovered yet: new claims wait for them",
                    extra={"fields": {"why": why}},
                )

        thread = threading.Thread(target=run, name="recover-lost-claims", daemon=True)
        thread.start()
        return thread

    def _left(self, deadline: float) -> float:
        return max(0.05, min(self._read_timeout, deadline - time.monotonic()))

    def _recover(self, deadline: float) -> str | None:
        view = self._claims.look(self._left(deadline))
        if view.undecided is not None and view.undecided.kind != KUBELET_NAMED_NONE:
            return f"which claims the pods of this node use is not known ({view.undecided})"
        found: list[ClaimEntry] = []
        for namespace, name in sorted(view.names):
            if time.monotonic() >= deadline:
                return "the deadline passed while reading the claims the pods of this node use"
            try:
                claim = self._api.get_resource_claim(namespace, name, self._left(deadline))
            except KubeError as err:
                return f"reading claim {namespace}/{name}: {err}"
            if claim is None:
                continue  # gone: nothing of it is used any more
            entry = recovered_entry(claim, driver_name=self._driver_name, pool_name=self._pool_name)
            if entry is not None:
                found.append(entry)
        lost = self._state.lost
        try:
            added = self._state.recover_lost(found, deadline=deadline)
        except StateLockTimeout as err:
            return str(err)
        except OSError as err:
            return f"writing the recovered claims: {err}"
        for entry in added:
            log.warning(
                "claim recovered after the checkpoint lost it: its devices stay held until kubelet "
                "unprepares it or the API server says it is gone",
                extra={
                    "fields": {
                        "claim": f"{entry.namespace}/{entry.name}",
                        "uid": entry.uid,
                        "devices": [d.device_name for d in entry.devices],
                    }
                },
            )
        log.warning(
            "the claims the checkpoint lost are recovered: new claims are prepared again",
            extra={"fields": {"lost": lost, "recovered": len(added), "sources": list(view.sources)}},
        )
        return None
