"""Recovery of the claims a lost checkpoint dropped: which claims kubelet names, which of them the API server
says are allocated here, and when the recovery may not conclude."""

from __future__ import annotations

import time
from typing import Any

import pytest
from vke_gpu_dra.api_errors import KubeError
from vke_gpu_dra.claims.checkpoint import ClaimEntry, ClaimState
from vke_gpu_dra.recovery import LostClaimsRecovery, recovered_entry
from vke_gpu_dra.takeover.node_claims import NodeClaims, Undecided
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import PreparedDevice

POOL = "node-a"


def claim(name: str, uid: str, *results: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": uid},
        "status": {"allocation": {"devices": {"results": list(results)}}},
    }


def result(device: str, request: str = "gpu", **extra: Any) -> dict[str, Any]:
    return {"request": request, "driver": facts.DRIVER_NAME, "pool": POOL, "device": device, **extra}


def test_a_claim_is_recovered_with_the_devices_this_driver_has_in_this_pool() -> None:
    found = recovered_entry(
        claim(
            "a",
            "uid-a",
            result("gpu-0", "first"),
            result("gpu-0", "second"),
            result("gpu-1", shareID="s1"),
            {**result("nic-0"), "driver": "nic.example.com"},
            {**result("gpu-7"), "pool": "another-node"},
        ),
        driver_name=facts.DRIVER_NAME,
        pool_name=POOL,
    )
    assert found == ClaimEntry(
        "uid-a",
        "ns",
        "a",
        ClaimState.PREPARE_STARTED,
        (
            PreparedDevice(("first", "second"), POOL, "gpu-0", ()),
            PreparedDevice(("gpu",), POOL, "gpu-1", (), "s1"),
        ),
    )


@pytest.mark.parametrize(
    "other",
    [
        claim("a", "uid-a", {**result("gpu-0"), "pool": "another-node"}),
        claim("a", "uid-a"),
        {"metadata": {"namespace": "ns", "name": "a", "uid": "uid-a"}, "status": {}},
        claim("a", "", result("gpu-0")),
    ],
    ids=["another-pool", "no-results", "not-allocated", "no-uid"],
)
def test_a_claim_with_nothing_of_this_node_is_not_recovered(other: dict[str, Any]) -> None:
    assert recovered_entry(other, driver_name=facts.DRIVER_NAME, pool_name=POOL) is None


class State:
    def __init__(self, lost: str | None = "checkpoint journal damaged") -> None:
        self.lost = lost
        self.recovered: list[list[ClaimEntry]] = []

    def recover_lost(self, claims: list[ClaimEntry], *, deadline: float | None = None) -> list[ClaimEntry]:
        self.recovered.append(claims)
        self.lost = None
        return claims


class Claims:
    def __init__(self, *claims: dict[str, Any]) -> None:
        self.claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
        self.failing: KubeError | None = None
        self.reads: list[tuple[str, str]] = []

    def get_resource_claim(
        self, namespace: str, name: str, timeout: float | None = None, *, cached: bool = False
    ) -> dict[str, Any] | None:
        assert not cached, "recovery decides on quorum reads only"
        assert timeout is not None and timeout > 0
        self.reads.append((namespace, name))
        if self.failing is not None:
            raise self.failing
        return self.claims.get((namespace, name))


class Lookup:
    def __init__(self, view: NodeClaims) -> None:
        self.view = view
        self.calls = 0

    def look(self, timeout: float | None = None) -> NodeClaims:
        self.calls += 1
        return self.view


def recovery(state: State, api: Claims, view: NodeClaims) -> tuple[LostClaimsRecovery, Lookup]:
    lookup = Lookup(view)
    return LostClaimsRecovery(state, api, lookup, driver_name=facts.DRIVER_NAME, pool_name=POOL), lookup


def soon() -> float:
    return time.monotonic() + 5


def test_the_claims_kubelet_names_that_are_allocated_here_are_recovered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = State()
    api = Claims(claim("a", "uid-a", result("gpu-0")), claim("b", "uid-b", {**result("gpu-1"), "pool": "x"}))
    view = NodeClaims(frozenset({("ns", "a"), ("ns", "b"), ("ns", "gone")}), ("pod-resources",))
    recover, _ = recovery(state, api, view)
    assert recover(soon()) is None
    [found] = state.recovered
    assert [(e.uid, [d.device_name for d in e.devices]) for e in found] == [("uid-a", ["gpu-0"])]
    assert sorted(api.reads) == [("ns", "a"), ("ns", "b"), ("ns", "gone")]
    [line] = [r for r in caplog.records if r.getMessage().startswith("claim recovered after the checkpoint")]
    assert line.fields == {"claim": "ns/a", "uid": "uid-a", "devices": ["gpu-0"]}  # type: ignore[attr-defined]


def test_kubelet_answering_that_no_claim_is_used_recovers_none() -> None:
    state = State()
    named_none = Undecided("pod-resources-no-claims", "kubelet (1.34) names no claim in its PodResources API")
    recover, _ = recovery(state, Claims(), NodeClaims(frozenset(), ("pod-resources",), named_none))
    assert recover(soon()) is None
    assert state.recovered == [[]] and state.lost is None


@pytest.mark.parametrize(
    "undecided",
    [
        Undecided("pod-resources-unavailable", "kubelet's PodResources socket does not answer"),
        Undecided("forbidden", "listing the pods of this node is not granted"),
        Undecided("unresolved", "pods whose generated claim is not named yet: ns/p"),
    ],
    ids=lambda u: u.kind,
)
def test_an_incomplete_view_concludes_nothing(undecided: Undecided) -> None:
    state = State()
    api = Claims(claim("a", "uid-a", result("gpu-0")))
    recover, _ = recovery(state, api, NodeClaims(frozenset({("ns", "a")}), (), undecided))
    why = recover(soon())
    assert why == f"which claims the pods of this node use is not known ({undecided})"
    assert state.recovered == [] and state.lost is not None and api.reads == []


def test_a_failed_read_concludes_nothing() -> None:
    state = State()
    api = Claims(claim("a", "uid-a", result("gpu-0")))
    api.failing = KubeError(0, "Timeout", "timed out after 5 s")
    recover, _ = recovery(state, api, NodeClaims(frozenset({("ns", "a")}), ("pod-resources",)))
    assert recover(soon()) == "reading claim ns/a: timed out after 5 s"
    assert state.recovered == []


def test_nothing_is_looked_up_when_nothing_is_lost() -> None:
    state = State(lost=None)
    recover, lookup = recovery(state, Claims(), NodeClaims(frozenset(), ("pod-resources",)))
    assert recover(soon()) is None
    assert lookup.calls == 0 and recover.start() is None


def test_the_start_recovers_in_the_background() -> None:
    state = State()
    api = Claims(claim("a", "uid-a", result("gpu-0")))
    recover, _ = recovery(state, api, NodeClaims(frozenset({("ns", "a")}), ("pod-resources",)))
    thread = recover.start()
    assert thread is not None
    thread.join(timeout=10)
    assert state.lost is None and [e.uid for e in state.recovered[0]] == ["uid-a"]
