"""Claim reconciliation and held devices: ghosts judged, confirmed by a quorum read, cleaned as an unprepare.

Against the fake API server through the real client; rounds are run by the test (`run_round`) or
triggered (`trigger`, `wait_rounds`), never waited for by the clock.
"""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from vke_gpu_dra import cdi
from vke_gpu_dra.allocation import allocated_devices
from vke_gpu_dra.allocation.guard import find_holders, held_error, shares_overlap
from vke_gpu_dra.claims.checkpoint import CHECKPOINT_FILE, CheckpointStore, ClaimEntry, ClaimState
from vke_gpu_dra.ghosts import Reason, judge
from vke_gpu_dra.kubeapi import KubeAPI
from vke_gpu_dra.kubelet.pod_resources import PodResourcesClient
from vke_gpu_dra.metrics import Metrics
from vke_gpu_dra.plugin import Plugin
from vke_gpu_dra.reconcile import Reconciler
from vke_gpu_dra.sharing.mps import daemon_id
from vke_gpu_dra.state import DeviceState
from vke_gpu_dra.takeover.node_claims import NodeClaimLookup, pod_claims
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, PreparedDevice
from vke_gpu_dra_core.discovery.simulated import SimulatedSource
from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer
from vke_gpu_dra_testing.fake_pod_resources import FakePodResources, UsedClaim
from vke_gpu_dra_testing.kubelet_client import Kubelet
from vke_gpu_dra_testing.plugin_env import NODE, checkpoint_document, plugin_args, plugin_config, wait_until

from tests.driver.claim_objects import claim, gpu_config, opaque, result
from tests.driver.plugin.test_plugin_process import REG_SOCKET, launch
from tests.driver.sharing.test_sharing import DEVICES as SHARING_DEVICES
from tests.driver.sharing.test_sharing import LONG, MPS_EXAMPLE, TS, U0, make_state, mps_state
from tests.driver.sharing_env import FakeDriverRoot
from tests.driver.takeover.test_takeover import (
    GPU2,
    GPU3,
    MPS_DAEMON,
    MPS_ID,
    NS,
    UID_FULL,
    UID_MIG,
    UID_MPS,
    UID_STARTED,
    UID_TS,
    make_takeover,
    nvidia_node,
)
from tests.driver.takeover.test_takeover import POOL as TAKEOVER_POOL
from tests.driver.takeover.test_takeover import ledger as takeover_ledger
from tests.driver.takeover.test_takeover import make_state as make_takeover_state

POOL = NODE
DEVICES = SimulatedSource(4, "NVIDIA A30", POOL).discover().devices


def ref(uid: str, name: str) -> ClaimRef:
    return ClaimRef("default", name, uid)


def api_claim(uid: str, name: str, *devices: str, **kwargs) -> dict:
    return claim(uid, *(result(d) for d in devices), name=name, **kwargs)


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "cdi", tmp_path / "plugin"


@pytest.fixture
def state(dirs: tuple[Path, Path]) -> DeviceState:
    return DeviceState(
        driver_name=facts.DRIVER_NAME,
        pool_name=POOL,
        devices=DEVICES,
        cdi_root=dirs[0],
        plugin_data_dir=dirs[1],
    )


@pytest.fixture
def reconciler(state: DeviceState, kube: KubeAPI) -> Iterator[Reconciler]:
    rec = Reconciler(
        state, kube, driver_name=facts.DRIVER_NAME, pool_name=POOL, metrics=Metrics(), read_timeout=2
    )
    state.holder_check = rec.check_holders
    yield rec
    rec.stop()


def prepared(fake_api: FakeAPIServer, state: DeviceState, uid: str, name: str, *devices: str, **kw) -> None:
    """A claim in the API, prepared on the node (as kubelet's call would)."""
    obj = api_claim(uid, name, *devices, **kw)
    fake_api.add_claim(obj)
    state.prepare(ref(uid, name), obj)


def counted(rec: Reconciler, metric: str, reason: str) -> float:
    value = rec._metrics.registry.get_sample_value(f"vke_gpu_dra_{metric}_total", {"reason": reason})
    return value or 0.0


# --- the pure judgement ---


def entry(uid: str = "u1", name: str = "c", state: ClaimState = ClaimState.PREPARE_COMPLETED) -> ClaimEntry:
    return ClaimEntry(uid, "default", name, state)


@pytest.mark.parametrize(
    ("claim_json", "expected"),
    [
        (None, Reason.GONE),
        (api_claim("u2", "c", "gpu-0"), Reason.REPLACED),
        (api_claim("u1", "c", allocated=False), Reason.DEALLOCATED),
        (claim("u1", result("gpu-0", pool="node-b"), name="c"), Reason.DEALLOCATED),
        (claim("u1", result("gpu-0", driver="other.example.com"), name="c"), Reason.DEALLOCATED),
        (api_claim("u1", "c", "gpu-0"), None),
    ],
    ids=["404", "other-uid", "not-allocated", "other-pool", "other-driver", "live"],
)
def test_judge(claim_json: dict | None, expected: Reason | None) -> None:
    assert judge(entry(), claim_json, driver_name=facts.DRIVER_NAME, pool_name=POOL) is expected


def test_pod_claims_names_the_claims_pods_reference_in_their_namespace() -> None:
    def pod(name: str, refs: list[dict], statuses: list[dict] | None = None) -> dict:
        return {
            "metadata": {"namespace": "team", "name": name},
            "spec": {"resourceClaims": refs},
            "status": {} if statuses is None else {"resourceClaimStatuses": statuses},
        }

    got = pod_claims(
        [
            pod("direct", [{"name": "gpu", "resourceClaimName": "shared"}]),
            pod(
                "templated",
                [
                    {"name": "gpu", "resourceClaimTemplateName": "t"},
                    {"name": "opt", "resourceClaimTemplateName": "t"},
                ],
                [
                    {"name": "gpu", "resourceClaimName": "templated-gpu-abcde"},
                    {"name": "opt"},
                ],  # opt: none needed
            ),
            pod("pending", [{"name": "gpu", "resourceClaimTemplateName": "t"}]),  # not generated yet
        ]
    )
    assert got.names == {("team", "shared"), ("team", "templated-gpu-abcde")}
    assert got.unresolved == ("team/pending",)


def test_find_holders_allows_admin_access_and_sharing_only() -> None:
    by_name = {d.name: d for d in DEVICES}
    holder = ClaimEntry(
        "old", "default", "old", ClaimState.PREPARE_COMPLETED, tuple(_prepared_devices("old", "gpu-0"))
    )
    new = ref("new", "new")
    plain = allocated_devices(
        new,
        api_claim("new", "new", "gpu-0", "gpu-1"),
        driver_name=facts.DRIVER_NAME,
        pool_name=POOL,
        devices=by_name,
    )
    [found] = find_holders(new, plain, [holder])
    assert (found.entry, found.devices) == (holder, ("gpu-0",))
    assert find_holders(new, plain, [holder], admin={"gpu-0"}) == []
    assert find_holders(new, plain, [holder], tolerated=frozenset({"old"})) == []


def _prepared_devices(uid: str, *names: str):
    return [PreparedDevice(("gpu",), POOL, n, (cdi.claim_device_id(uid, n),)) for n in names]


def _share_holder(*shares: tuple[str, str | None]) -> ClaimEntry:
    """A completed entry holding `(device, share id)` pairs (None: the device whole)."""
    devices = tuple(
        PreparedDevice(("gpu",), POOL, n, (cdi.claim_device_id("old", n, s),), s) for n, s in shares
    )
    return ClaimEntry("old", "default", "old", ClaimState.PREPARE_COMPLETED, devices)


def _allocated_shares(new: ClaimRef, *shares: tuple[str, str | None]):
    results = []
    for n, s in shares:
        r = result(n)
        if s is not None:
            r["shareID"] = s
        results.append(r)
    return allocated_devices(
        new,
        claim(new.uid, *results, name=new.name),
        driver_name=facts.DRIVER_NAME,
        pool_name=POOL,
        devices={d.name: d for d in DEVICES},
    )


@pytest.mark.parametrize(
    ("ours", "theirs", "allowed"),
    [
        (["b"], ["a"], True),
        (["b", "c"], ["a"], True),
        (["a"], ["a"], False),
        (["b"], ["a", "b"], False),
        ([None], ["a"], False),
        (["b"], [None], False),
        ([None], [None], False),
        (["b"], [], False),
        ([], ["a"], False),
    ],
    ids=[
        "distinct",
        "two-of-ours",
        "same",
        "one-same",
        "we-whole",
        "they-whole",
        "both-whole",
        "no-results",
        "none-of-ours",
    ],
)
def test_shares_overlap(ours: list[str | None], theirs: list[str | None], allowed: bool) -> None:
    assert shares_overlap(ours, theirs) is allowed


def test_distinct_shares_of_one_device_may_be_held_by_two_claims() -> None:
    new = ref("new", "new")
    holder = _share_holder(("gpu-0", "share-a"))
    assert find_holders(new, _allocated_shares(new, ("gpu-0", "share-b")), [holder]) == []
    two = _allocated_shares(new, ("gpu-0", "share-b"), ("gpu-0", "share-c"))
    assert find_holders(new, two, [holder]) == []


def test_a_share_next_to_a_whole_device_is_refused_either_way() -> None:
    new = ref("new", "new")
    [found] = find_holders(
        new, _allocated_shares(new, ("gpu-0", "share-b")), [_share_holder(("gpu-0", None))]
    )
    assert found.devices == ("gpu-0",)
    assert (
        found.conflict == "device gpu-0 is held whole by that claim; a share of it overlaps only other shares"
    )
    [found] = find_holders(
        new, _allocated_shares(new, ("gpu-0", None)), [_share_holder(("gpu-0", "share-a"))]
    )
    assert found.devices == ("gpu-0",)
    assert (
        found.conflict
        == "this claim is allocated device gpu-0 whole; it overlaps that claim's share(s) of it"
    )
    assert "distinct consumable shares allow it" in held_error(new, found)


def test_the_same_share_of_one_device_in_two_claims_is_refused() -> None:
    new = ref("new", "new")
    holder = _share_holder(("gpu-0", "share-a"), ("gpu-1", "share-x"))
    allocated = _allocated_shares(new, ("gpu-0", "share-a"), ("gpu-1", "share-y"))
    [found] = find_holders(new, allocated, [holder])
    assert found.devices == ("gpu-0",)  # gpu-1's shares are distinct
    assert found.conflict == "share(s) share-a of device gpu-0 are allocated to both claims"
    assert find_holders(new, allocated, [holder], admin={"gpu-0"}) == []


def test_shares_never_overlap_an_adopted_claim() -> None:
    new = ref("new", "new")
    holder = _share_holder(("gpu-0", None))
    [found] = find_holders(new, _allocated_shares(new, ("gpu-0", "share-b")), [holder], adopted={"old"})
    assert found.adopted and found.devices == ("gpu-0",)


# --- rounds against the API server ---


def test_a_claim_deleted_without_unprepare_is_cleaned_in_one_round(
    fake_api: FakeAPIServer, state: DeviceState, reconciler: Reconciler, dirs, caplog
) -> None:
    prepared(fake_api, state, "uid-gone", "gone", "gpu-0")
    prepared(fake_api, state, "uid-live", "live", "gpu-1")
    fake_api.delete_claim("default", "gone")
    with caplog.at_level(logging.WARNING, logger="vke_gpu_dra.reconcile"):
        got = reconciler.run_round()
    assert got.cleaned == {"uid-gone": Reason.GONE} and got.kept == {} and got.checked == 2
    assert sorted(state.entries()) == ["uid-live"]
    assert cdi.list_claim_specs(dirs[0]) == {}  # both were answered from the base spec
    assert counted(reconciler, "claim_ghosts_cleaned", "gone") == 1
    [line] = [r for r in caplog.records if r.getMessage() == "cleaned ghost claim"]
    assert line.fields == {
        "namespace": "default",
        "name": "gone",
        "uid": "uid-gone",
        "state": "PrepareCompleted",
        "reason": "gone",
        "why": Reason.GONE.description,
    }
    # one cheap cached GET per entry, one quorum read for the ghost, never a list
    claim_reads = [p for m, p in fake_api.requests if m == "GET" and "/resourceclaims" in p]
    assert sorted(claim_reads) == sorted(
        [
            "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/gone?resourceVersion=0",
            "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/gone",
            "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/live?resourceVersion=0",
        ]
    )
    state.unprepare(ref("uid-gone", "gone"))  # kubelet's late unprepare succeeds
    assert reconciler.run_round().cleaned == {}


def test_a_re_created_claim_cleans_the_old_uid(
    fake_api: FakeAPIServer, state: DeviceState, reconciler: Reconciler
) -> None:
    prepared(fake_api, state, "uid-old", "c", "gpu-0")
    fake_api.delete_claim("default", "c")
    fake_api.add_claim(api_claim("uid-new", "c", "gpu-0"))
    assert reconciler.run_round().cleaned == {"uid-old": Reason.REPLACED}
    assert state.entries() == {}
    state.prepare(ref("uid-new", "c"), api_claim("uid-new", "c", "gpu-0"))
    assert reconciler.run_round().cleaned == {} and sorted(state.entries()) == ["uid-new"]


def test_a_deallocated_claim_and_a_prepare_started_entry_are_cleaned(
    fake_api: FakeAPIServer, state: DeviceState, reconciler: Reconciler, dirs
) -> None:
    prepared(fake_api, state, "uid-1", "dealloc", "gpu-0")
    fake_api.add_claim(api_claim("uid-1", "dealloc", allocated=False))
    store = CheckpointStore(dirs[1])
    entries = store.load().entries
    entries["uid-2"] = ClaimEntry("uid-2", "default", "started", ClaimState.PREPARE_STARTED)
    store.save(entries)
    assert reconciler.run_round().cleaned == {"uid-1": Reason.DEALLOCATED, "uid-2": Reason.GONE}
    assert state.entries() == {}


@pytest.mark.parametrize("code", [500, 401, 403])
def test_a_failed_read_keeps_the_entry_and_is_logged_once(
    fake_api: FakeAPIServer, state: DeviceState, reconciler: Reconciler, code: int, caplog
) -> None:
    prepared(fake_api, state, "uid-1", "c", "gpu-0")
    fake_api.delete_claim("default", "c")  # a ghost, but the API server cannot say so
    fake_api.inject_fault("GET", "/resourceclaims/c", code, times=2)
    caplog.set_level(logging.INFO, logger="vke_gpu_dra.reconcile")
    first, second = reconciler.run_round(), reconciler.run_round()
    kind = {500: "api-error", 401: "unauthorized", 403: "forbidden"}[code]
    assert first.cleaned == second.cleaned == {} and list(first.kept) == list(second.kept) == ["uid-1"]
    assert sorted(state.entries()) == ["uid-1"]
    assert counted(reconciler, "claim_reconcile_failures", kind) == 2
    warnings = [r for r in caplog.records if r.getMessage().startswith("cannot check claims")]
    assert len(warnings) == 1  # not once per round
    assert reconciler.run_round().cleaned == {"uid-1": Reason.GONE}  # the API answers again
    assert [r.getMessage() for r in caplog.records][-2:] == [
        "cleaned ghost claim",
        "claims can be checked against the API server again",
    ]


def test_a_read_that_times_out_keeps_the_entry(
    fake_api: FakeAPIServer, state: DeviceState, reconciler: Reconciler
) -> None:
    prepared(fake_api, state, "uid-1", "c", "gpu-0")
    fake_api.delete_claim("default", "c")
    fake_api.hang("GET", "/resourceclaims/c")
    got = reconciler.run_round()
    assert got.cleaned == {} and got.kept["uid-1"].startswith("timeout")
    assert sorted(state.entries()) == ["uid-1"]
    assert counted(reconciler, "claim_reconcile_failures", "timeout") == 1


def test_a_stale_cache_never_cleans_a_live_claim(
    fake_api: FakeAPIServer, state: DeviceState, reconciler: Reconciler
) -> None:
    fake_api.add_claim(api_claim("uid-old", "c", "gpu-0"))
    fake_api.freeze_claim_cache()  # the cache still has the claim's previous incarnation
    fake_api.delete_claim("default", "c")
    prepared(fake_api, state, "uid-new", "c", "gpu-0")
    prepared(fake_api, state, "uid-2", "fresh", "gpu-1")  # not in the cache at all: 404 there
    assert reconciler.run_round().cleaned == {}
    assert sorted(state.entries()) == ["uid-2", "uid-new"]
    assert fake_api.count("GET", "/resourceclaims/c?resourceVersion=0") == 1
    assert fake_api.count("GET", "/resourceclaims/fresh?resourceVersion=0") == 1
    quorum = [p for m, p in fake_api.requests if m == "GET" and p.endswith(("/resourceclaims/c", "/fresh"))]
    assert len(quorum) == 2  # each suspected ghost was read again, and found live


def test_a_deleted_claim_does_not_survive_two_rounds_of_a_lagging_cache(
    fake_api: FakeAPIServer, state: DeviceState, reconciler: Reconciler
) -> None:
    prepared(fake_api, state, "uid-1", "c", "gpu-0")
    fake_api.freeze_claim_cache()
    fake_api.delete_claim("default", "c")
    assert reconciler.run_round().cleaned == {}  # the cache still serves the claim
    fake_api.thaw_claim_cache()  # the watch cache catches up (milliseconds on a healthy apiserver)
    assert reconciler.run_round().cleaned == {"uid-1": Reason.GONE}
    assert state.entries() == {}


def test_an_entry_changed_since_it_was_judged_is_left_alone(
    fake_api: FakeAPIServer, state: DeviceState
) -> None:
    prepared(fake_api, state, "uid-1", "c", "gpu-0")
    judged = ClaimEntry(
        "uid-1", "default", "c", ClaimState.PREPARE_STARTED
    )  # read before the prepare completed
    assert state.clean_ghost(judged) is False
    assert sorted(state.entries()) == ["uid-1"]
    assert state.clean_ghost(state.entries()["uid-1"]) is True and state.entries() == {}


def test_a_ghost_is_cleaned_as_an_unprepare_time_slice_and_mps_undone(
    tmp_path: Path, fake_api: FakeAPIServer, kube: KubeAPI
) -> None:
    env = (FakeDriverRoot(tmp_path / "driver-root"), tmp_path / "cdi", tmp_path / "plugin")
    ts_state = make_state(env)
    ts = api_claim("uid-ts", "ts", "gpu-0", config=[opaque(LONG)])
    fake_api.add_claim(ts)
    ts_state.prepare(ref("uid-ts", "ts"), ts)
    mps = mps_state(env, kube, fake_api)
    mps_claim = api_claim("uid-mps", "mps", "gpu-1", config=[opaque(MPS_EXAMPLE)])
    fake_api.add_claim(mps_claim)
    mps.prepare(ref("uid-mps", "mps"), mps_claim)
    assert len(fake_api.deployments) == 1
    fake_api.delete_claim("default", "ts")
    fake_api.delete_claim("default", "mps")
    env[0].clear()
    rec = Reconciler(mps, kube, driver_name=facts.DRIVER_NAME, pool_name=POOL, metrics=Metrics())
    try:
        assert rec.run_round().cleaned == {"uid-ts": Reason.GONE, "uid-mps": Reason.GONE}
    finally:
        rec.stop()
    assert fake_api.deployments == {}  # the MPS control daemon is deleted
    u1 = SHARING_DEVICES[1].uuid
    assert sorted(env[0].calls()) == sorted(
        [f"-i {U0} -c DEFAULT", f"compute-policy -i {U0} --set-timeslice 0", f"-i {u1} -c DEFAULT"]
    )
    assert mps.entries() == {} and cdi.list_claim_specs(env[1]) == {}
    assert not (env[2] / "mps" / daemon_id("uid-mps", [u1])).exists()


def test_a_ghost_adopted_from_nvidia_is_released_as_its_unprepare_would(
    tmp_path: Path, fake_api: FakeAPIServer, kube: KubeAPI
) -> None:
    node = nvidia_node(tmp_path)
    driver_root, cdi_root, _ = node
    state = make_takeover_state(node, kube)
    ts = claim(UID_TS, result("gpu-2", "ts", pool=TAKEOVER_POOL), name="ts")
    fake_api.add_claim(ts)
    state.prepare(ref(UID_TS, "ts"), ts)  # NVIDIA completed it: adopted, its time-slice left in force
    assert driver_root.calls() == [] and takeover_ledger(node)[UID_TS] is False
    fake_api.delete_claim("default", "ts")
    rec = Reconciler(state, kube, driver_name=facts.DRIVER_NAME, pool_name=TAKEOVER_POOL, metrics=Metrics())
    try:
        assert rec.run_round().cleaned == {UID_TS: Reason.GONE}
    finally:
        rec.stop()
    # NVIDIA's leftovers undone first, then our spec and entry, as kubelet's unprepare does
    assert driver_root.calls() == [f"-i {GPU2} -c DEFAULT", f"compute-policy -i {GPU2} --set-timeslice 0"]
    assert takeover_ledger(node)[UID_TS] is True
    assert UID_TS not in state.entries() and UID_TS not in cdi.list_claim_specs(cdi_root)


# --- claims adopted from NVIDIA that kubelet never prepares here again (known only to the ledger) ---


def adopted_node(
    tmp_path: Path,
    fake_api: FakeAPIServer,
    kube: KubeAPI,
    *named: tuple[str, str],
    pods: bool = False,
    pod_resources: FakePodResources | None = None,
):
    """NVIDIA's node taken over, nothing prepared by kubelet since; `named` (uid, name) adopted claims
    got their namespace/name as kubelet's prepare records it (NVIDIA 25.8.1 records none); the unnamed
    ones are looked for through kubelet's `pod_resources` API and, with `pods`, the pod list."""
    node = nvidia_node(tmp_path)
    fake_api.deployments[(NS, MPS_DAEMON)] = {"metadata": {"name": MPS_DAEMON, "namespace": NS}}
    state = make_takeover_state(node, kube)
    for uid, name in named:
        make_takeover(node).name(uid, "default", name)
    rec = Reconciler(
        state,
        kube,
        driver_name=facts.DRIVER_NAME,
        pool_name=TAKEOVER_POOL,
        metrics=Metrics(),
        lookup=NodeClaimLookup(
            driver_name=facts.DRIVER_NAME,
            node_name=TAKEOVER_POOL,
            pod_resources=PodResourcesClient(pod_resources.socket) if pod_resources else None,
            nodes=kube,
            pods=kube if pods else None,
        )
        if pods or pod_resources
        else None,
    )
    state.holder_check = rec.check_holders
    return node, state, rec


def adopted_claim(uid: str, name: str, device: str, request: str) -> dict:
    return claim(uid, result(device, request, pool=TAKEOVER_POOL), name=name)


def test_an_adopted_claim_deleted_without_unprepare_is_released_within_one_round(
    tmp_path: Path, fake_api: FakeAPIServer, kube: KubeAPI, caplog
) -> None:
    named = ((UID_TS, "ts"), (UID_MPS, "mps"), (UID_FULL, "full"))
    node, state, rec = adopted_node(tmp_path, fake_api, kube, *named)
    driver_root, cdi_root, data = node
    fake_api.add_claim(adopted_claim(UID_FULL, "full", "gpu-0", "gpu"))  # live: never touched
    caplog.set_level(logging.INFO, logger="vke_gpu_dra.reconcile")
    try:
        first = rec.run_round()
        second = rec.run_round()
    finally:
        rec.stop()
    # the pods of ts and mps were force-deleted during the move: their claims are gone
    assert first.cleaned == {UID_TS: Reason.GONE, UID_MPS: Reason.GONE}
    assert first.adopted == 3 and first.unnamed_adopted == (UID_MIG, UID_STARTED)
    assert second.cleaned == {} and second.adopted == 1
    # released as kubelet's unprepare of an adopted claim: NVIDIA's spec, MPS daemon, GPU settings
    assert sorted(driver_root.calls()) == sorted(
        [
            f"-i {GPU2} -c DEFAULT",
            f"compute-policy -i {GPU2} --set-timeslice 0",
            f"-i {GPU3} -c DEFAULT",
            f"compute-policy -i {GPU3} --set-timeslice 0",
        ]
    )
    assert fake_api.deployments == {}
    assert not (data / "mps" / MPS_ID).exists()
    assert not (cdi_root / f"k8s.gpu.nvidia.com-claim_{UID_MPS}.yaml").exists()
    assert takeover_ledger(node) == {
        UID_TS: True,
        UID_MPS: True,
        UID_FULL: False,
        UID_MIG: False,
        UID_STARTED: False,
    }
    assert counted(rec, "claim_ghosts_cleaned", "gone") == 2
    # the adopted claims without a name: one line, not one per round
    unnamed = [r for r in caplog.records if "have no namespace/name" in r.getMessage()]
    assert len(unnamed) == 1 and unnamed[0].fields["uids"] == [UID_MIG, UID_STARTED]
    # kubelet's late unprepare of a released claim is a success that does nothing more
    driver_root.clear()
    state.unprepare(ref(UID_TS, "ts"))
    assert driver_root.calls() == []


def test_an_adopted_claim_whose_read_fails_is_kept(
    tmp_path: Path, fake_api: FakeAPIServer, kube: KubeAPI
) -> None:
    node, _, rec = adopted_node(tmp_path, fake_api, kube, (UID_TS, "ts"))
    fake_api.inject_fault("GET", "/resourceclaims/ts", 503, times=2)
    try:
        got = rec.run_round()
    finally:
        rec.stop()
    assert got.cleaned == {} and got.kept[UID_TS].startswith("api-error")
    assert node[0].calls() == [] and takeover_ledger(node)[UID_TS] is False
    assert counted(rec, "claim_reconcile_failures", "api-error") == 1


# --- adopted claims without a name (NVIDIA 25.8.1), looked for through the pods of the node ---

ALL_ADOPTED = (UID_FULL, UID_MIG, UID_MPS, UID_STARTED, UID_TS)
POD_LIST = f"/api/v1/pods?fieldSelector=spec.nodeName%3D{TAKEOVER_POOL}"


def ledger_names(node) -> dict[str, str]:
    claims = json.loads((node[2] / "vke-gpu-dra-takeover.json").read_text())["claims"]
    return {c["uid"]: f"{c['namespace']}/{c['name']}" for c in claims if "name" in c}


def pod_lists(fake_api: FakeAPIServer) -> list[str]:
    return [p for m, p in fake_api.requests if m == "GET" and p.startswith("/api/v1/pods")]


def test_an_unnamed_adopted_claim_is_found_through_its_pod_and_then_checked_by_name(
    tmp_path: Path, fake_api: FakeAPIServer, kube: KubeAPI, caplog
) -> None:
    node, _, rec = adopted_node(tmp_path, fake_api, kube, pods=True)
    # the pod of UID_FULL names its claim; UID_MIG's claim was generated for its pod and is deallocated
    fake_api.add_claim(adopted_claim(UID_FULL, "full", "gpu-0", "gpu"))
    fake_api.add_claim(claim(UID_MIG, name="train-gpu-x7k2p", allocated=False))
    fake_api.add_claim(adopted_claim("uid-other", "other", "gpu-4", "gpu"))
    fake_api.add_pod("default", "full-pod", TAKEOVER_POOL, claims={"gpu": "full"})
    fake_api.add_pod("default", "train", TAKEOVER_POOL, generated={"gpu": "train-gpu-x7k2p"})
    fake_api.add_pod("default", "elsewhere", "node-b", claims={"gpu": "elsewhere"})  # another node
    caplog.set_level(logging.INFO, logger="vke_gpu_dra.reconcile")
    try:
        first = rec.run_round()
        second = rec.run_round()
    finally:
        rec.stop()
    assert first.named_by_pods == {UID_FULL: "default/full", UID_MIG: "default/train-gpu-x7k2p"}
    # found, then handled as a named claim in the same round: the deallocated one is released
    assert first.cleaned == {UID_MIG: Reason.DEALLOCATED} and first.adopted == 2
    assert first.unnamed_adopted == (UID_TS, UID_MPS, UID_STARTED)
    assert first.unreferenced == {UID_MPS: 1, UID_STARTED: 1, UID_TS: 1}
    assert ledger_names(node) == {UID_FULL: "default/full", UID_MIG: "default/train-gpu-x7k2p"}
    assert takeover_ledger(node)[UID_FULL] is False and takeover_ledger(node)[UID_MIG] is True
    # from then on UID_FULL is read by its name (a cache read each round), as any named claim: live, kept
    assert UID_FULL not in second.cleaned and UID_FULL not in second.named_by_pods
    assert fake_api.count("GET", "/resourceclaims/full?resourceVersion=0") == 2
    # one quorum list of this node's pods per round, quorum reads of the claims they reference only
    assert pod_lists(fake_api) == [POD_LIST, POD_LIST]
    assert fake_api.count("GET", "/resourceclaims/elsewhere") == 0
    assert fake_api.count("GET", "/resourceclaims/other") == 0
    train = [p for m, p in fake_api.requests if "/resourceclaims/train" in p]
    assert train[0].endswith("/resourceclaims/train-gpu-x7k2p")  # found by a quorum read, then checked
    [found] = [r for r in caplog.records if r.getMessage().startswith("found the names")]
    assert found.fields == {"claims": {UID_FULL: "default/full", UID_MIG: "default/train-gpu-x7k2p"}}


def test_an_unnamed_adopted_claim_no_pod_references_is_released_after_two_rounds(
    tmp_path: Path, fake_api: FakeAPIServer, kube: KubeAPI, caplog
) -> None:
    node, state, rec = adopted_node(tmp_path, fake_api, kube, pods=True)
    driver_root, cdi_root, data = node
    caplog.set_level(logging.INFO, logger="vke_gpu_dra.reconcile")
    try:
        first = rec.run_round()  # every pod NVIDIA prepared for was force-deleted during the move
        assert first.cleaned == {} and first.unreferenced == dict.fromkeys(ALL_ADOPTED, 1)
        assert driver_root.calls() == [] and set(takeover_ledger(node).values()) == {False}
        # a pod created between the rounds (its claim UID_TS, shared) keeps that claim
        fake_api.add_claim(adopted_claim(UID_TS, "ts", "gpu-2", "ts"))
        fake_api.add_pod("default", "late", TAKEOVER_POOL, claims={"ts": "ts"})
        second = rec.run_round()
        third = rec.run_round()
    finally:
        rec.stop()
    released = (UID_FULL, UID_MIG, UID_MPS, UID_STARTED)
    assert second.cleaned == dict.fromkeys(released, Reason.UNREFERENCED)
    assert second.named_by_pods == {UID_TS: "default/ts"} and second.unnamed_adopted == ()
    assert third.cleaned == {} and third.adopted == 1
    assert takeover_ledger(node) == {**dict.fromkeys(released, True), UID_TS: False}
    # released as kubelet's unprepare would: NVIDIA's MPS daemon, its spec and GPU settings undone
    assert sorted(driver_root.calls()) == [
        f"-i {GPU3} -c DEFAULT",
        f"compute-policy -i {GPU3} --set-timeslice 0",
    ]
    assert fake_api.deployments == {} and not (data / "mps" / MPS_ID).exists()
    assert not (cdi_root / f"k8s.gpu.nvidia.com-claim_{UID_MPS}.yaml").exists()
    assert counted(rec, "claim_ghosts_cleaned", "unreferenced") == 4
    lines = [r.fields for r in caplog.records if r.getMessage() == "cleaned ghost claim"]
    assert sorted(f["uid"] for f in lines) == sorted(released)
    assert {f["reason"] for f in lines} == {"unreferenced"} and lines[0]["namespace"] == lines[0][
        "name"
    ] == ""
    # no unnamed claim is left: the third round lists no pods
    assert pod_lists(fake_api) == [POD_LIST, POD_LIST]
    state.unprepare(ref(UID_MPS, "mps"))  # kubelet's late unprepare is a success that does nothing more
    assert sorted(driver_root.calls()) == [
        f"-i {GPU3} -c DEFAULT",
        f"compute-policy -i {GPU3} --set-timeslice 0",
    ]


def test_a_failed_pod_lookup_cleans_nothing_and_starts_the_count_again(
    tmp_path: Path, fake_api: FakeAPIServer, kube: KubeAPI, caplog
) -> None:
    node, _, rec = adopted_node(tmp_path, fake_api, kube, pods=True)
    caplog.set_level(logging.INFO, logger="vke_gpu_dra.reconcile")
    try:
        assert rec.run_round().unreferenced == dict.fromkeys(ALL_ADOPTED, 1)
        fake_api.inject_fault("GET", "/api/v1/pods", 403, times=2)  # e.g. RBAC without list on pods
        failed = [rec.run_round(), rec.run_round()]
        assert [r.pods_undecided and r.pods_undecided.split(":")[0] for r in failed] == ["forbidden"] * 2
        assert all(r.cleaned == {} and r.unreferenced == {} for r in failed)
        assert rec.run_round().unreferenced == dict.fromkeys(ALL_ADOPTED, 1)  # counted from one again
        # a claim a pod references that cannot be read might be any of them: nothing concluded
        fake_api.add_pod("default", "p", TAKEOVER_POOL, claims={"gpu": "unreadable"})
        fake_api.inject_fault("GET", "/resourceclaims/unreadable", 500)
        undecided = rec.run_round()
        assert undecided.cleaned == {} and undecided.pods_undecided is not None
        assert undecided.pods_undecided.startswith("api-error: reading claim default/unreadable")
        # a pod whose claim is generated from a template but not named in its status yet: the same
        fake_api.delete_pod("default", "p")
        fake_api.add_pod("default", "new", TAKEOVER_POOL, generated={"gpu": ""})
        assert rec.run_round().unreferenced == {}
        assert rec.run_round().cleaned == {}
    finally:
        rec.stop()
    assert set(takeover_ledger(node).values()) == {False} and node[0].calls() == []
    # no grant to list pods is how the default chart runs: no failure, said once
    assert counted(rec, "claim_reconcile_failures", "forbidden") == 0
    assert counted(rec, "claim_reconcile_failures", "api-error") == 1
    warned = [r for r in caplog.records if r.getMessage().startswith("cannot look for the adopted claims")]
    assert len(warned) == 2  # once while forbidden, once for the failed claim read; not once per round


def test_a_stale_cache_never_cleans_an_unnamed_adopted_claim(
    tmp_path: Path, fake_api: FakeAPIServer, kube: KubeAPI
) -> None:
    node, _, rec = adopted_node(tmp_path, fake_api, kube, pods=True)
    fake_api.freeze_pod_cache()  # a cache that has not seen the pod yet
    fake_api.freeze_claim_cache()  # nor its claim
    fake_api.add_claim(adopted_claim(UID_TS, "ts", "gpu-2", "ts"))
    fake_api.add_pod("default", "ts-pod", TAKEOVER_POOL, claims={"ts": "ts"})
    try:
        rounds = [rec.run_round() for _ in range(3)]
    finally:
        rec.stop()
    assert rounds[0].named_by_pods == {UID_TS: "default/ts"}
    assert all(UID_TS not in r.cleaned for r in rounds) and takeover_ledger(node)[UID_TS] is False
    # pods are never listed from the cache (the others, unreferenced, went in the second round, so the
    # third lists none); the claim was found by a quorum read, and the cache's 404 for it never decided
    assert pod_lists(fake_api) == [POD_LIST] * 2
    assert rounds[1].cleaned == dict.fromkeys((UID_FULL, UID_MIG, UID_MPS, UID_STARTED), Reason.UNREFERENCED)
    ts_reads = [
        p for m, p in fake_api.requests if p.endswith(("/resourceclaims/ts", "/ts?resourceVersion=0"))
    ]
    assert ts_reads[0].endswith("/resourceclaims/ts") and ts_reads.count(ts_reads[1]) == 3


# --- the same, through kubelet's PodResources API on the node (no pod list, no API grant) ---


def kubelet_at(fake_api: FakeAPIServer, version: str) -> None:
    fake_api.add_node(TAKEOVER_POOL)
    with fake_api.cond:
        fake_api.nodes[TAKEOVER_POOL]["status"] = {"nodeInfo": {"kubeletVersion": version}}


def test_an_unnamed_adopted_claim_is_found_through_kubelets_pod_resources_without_a_pod_list(
    tmp_path: Path, fake_api: FakeAPIServer, kube: KubeAPI, pod_resources: FakePodResources
) -> None:
    # the pod list would be granted: kubelet's answer names claims, so it is never needed
    node, _, rec = adopted_node(tmp_path, fake_api, kube, pods=True, pod_resources=pod_resources)
    fake_api.add_claim(adopted_claim(UID_FULL, "full", "gpu-0", "gpu"))
    fake_api.add_claim(claim(UID_MIG, name="train-gpu-x7k2p", allocated=False))
    pod_resources.add_pod("default", "full-pod", main=[UsedClaim("full", [(TAKEOVER_POOL, "gpu-0")])])
    pod_resources.add_pod(
        "default",
        "train",
        main=[UsedClaim("train-gpu-x7k2p", [(TAKEOVER_POOL, "gpu-1-mig-1g.10gb-0")])],
        nic=[UsedClaim("nic", [("rack", "eth0")], driver="nic.example.com")],  # another driver's
    )
    try:
        first = rec.run_round()
        second = rec.run_round()
    finally:
        rec.stop()
    assert first.named_by_pods == {UID_FULL: "default/full", UID_MIG: "default/train-gpu-x7k2p"}
    assert first.pods_sources == ("pod-resources",) and first.pods_undecided is None
    assert first.cleaned == {UID_MIG: Reason.DEALLOCATED}
    assert ledger_names(node) == {UID_FULL: "default/full", UID_MIG: "default/train-gpu-x7k2p"}
    # kubelet names every claim its containers use: the three no container uses go after two rounds
    assert first.unreferenced == {UID_MPS: 1, UID_STARTED: 1, UID_TS: 1}
    assert second.cleaned == dict.fromkeys((UID_MPS, UID_STARTED, UID_TS), Reason.UNREFERENCED)
    assert pod_lists(fake_api) == [] and pod_resources.calls == 2
    assert fake_api.count("GET", "/resourceclaims/nic") == 0
    assert takeover_ledger(node)[UID_FULL] is False


def test_a_kubelet_that_locks_its_claims_on_rules_even_when_no_container_uses_a_claim(
    tmp_path: Path, fake_api: FakeAPIServer, kube: KubeAPI, pod_resources: FakePodResources
) -> None:
    kubelet_at(fake_api, "v1.36.2")
    node, _, rec = adopted_node(tmp_path, fake_api, kube, pod_resources=pod_resources)
    try:
        rounds = [rec.run_round(), rec.run_round()]
    finally:
        rec.stop()
    assert rounds[0].unreferenced == dict.fromkeys(ALL_ADOPTED, 1)
    assert rounds[1].cleaned == dict.fromkeys(ALL_ADOPTED, Reason.UNREFERENCED)
    assert set(takeover_ledger(node).values()) == {True} and pod_lists(fake_api) == []


def test_without_a_pod_list_grant_a_kubelet_that_cannot_tell_keeps_them_and_says_so_once(
    tmp_path: Path, fake_api: FakeAPIServer, kube: KubeAPI, pod_resources: FakePodResources, caplog
) -> None:
    """A 1.34 kubelet naming no claim (its gate may be off) and the default chart (no `list` on pods):
    nothing is released, one warning, no failure counted; once a container's claim shows the gate is on,
    the count starts."""
    kubelet_at(fake_api, "v1.34.4")
    node, _, rec = adopted_node(tmp_path, fake_api, kube, pods=True, pod_resources=pod_resources)
    fake_api.inject_fault("GET", "/api/v1/pods", 403, times=3)
    caplog.set_level(logging.INFO, logger="vke_gpu_dra.reconcile")
    try:
        kept = [rec.run_round() for _ in range(3)]
        fake_api.add_claim(adopted_claim("uid-new", "new", "gpu-4", "gpu"))
        pod_resources.add_pod("default", "new", main=[UsedClaim("new", [(TAKEOVER_POOL, "gpu-4")])])
        ruled = rec.run_round()
    finally:
        rec.stop()
    assert all(r.cleaned == {} and r.unreferenced == {} for r in kept)
    assert kept[0].pods_undecided is not None and kept[0].pods_undecided.startswith(
        "forbidden: kubelet (1.34)"
    )
    assert set(takeover_ledger(node).values()) == {False} and node[0].calls() == []
    assert counted(rec, "claim_reconcile_failures", "forbidden") == 0
    warned = [r for r in caplog.records if r.getMessage().startswith("cannot look for the adopted claims")]
    assert len(warned) == 1 and "is not granted" in warned[0].fields["error"]
    assert ruled.pods_undecided is None and ruled.unreferenced == dict.fromkeys(ALL_ADOPTED, 1)
    assert pod_lists(fake_api) == [POD_LIST] * 3  # the fourth round needed none


def test_a_device_an_adopted_claim_holds_is_guarded(
    tmp_path: Path, fake_api: FakeAPIServer, kube: KubeAPI
) -> None:
    node, state, rec = adopted_node(tmp_path, fake_api, kube, (UID_TS, "ts"))
    driver_root = node[0]
    fake_api.add_claim(adopted_claim(UID_TS, "ts", "gpu-2", "ts"))
    try:
        # a live adopted holder: the per-claim error names both claims
        new = adopted_claim("uid-new", "new", "gpu-2", "gpu")
        fake_api.add_claim(new)
        with pytest.raises(ClaimError) as err:
            state.prepare(ref("uid-new", "new"), new)
        assert str(err.value).startswith(
            "claim default/new (uid uid-new): device(s) gpu-2 are prepared on this node by NVIDIA's plugin "
            f"(adopted) for claim default/ts (uid {UID_TS}), which still exists and is allocated them"
        )
        # an adopted holder without a name cannot be checked: the prepare fails, nothing is touched
        other = adopted_claim("uid-other", "other", "gpu-0", "gpu")
        fake_api.add_claim(other)
        with pytest.raises(ClaimError, match=r"for claim <unnamed> .*could not be checked"):
            state.prepare(ref("uid-other", "other"), other)
        assert driver_root.calls() == [] and takeover_ledger(node)[UID_TS] is False
        # once the adopted claim is gone, the prepare releases it first and goes on
        fake_api.delete_claim("default", "ts")
        [got] = state.prepare(ref("uid-new", "new"), new)
    finally:
        rec.stop()
    assert got.device_name == "gpu-2" and sorted(state.entries()) == ["uid-new"]
    assert driver_root.calls() == [f"-i {GPU2} -c DEFAULT", f"compute-policy -i {GPU2} --set-timeslice 0"]
    assert takeover_ledger(node)[UID_TS] is True


def test_a_sharing_strategy_never_allows_an_overlap_with_an_adopted_claim() -> None:
    by_name = {d.name: d for d in DEVICES}
    holder = ClaimEntry(
        "old", "default", "old", ClaimState.PREPARE_COMPLETED, tuple(_prepared_devices("old", "gpu-0"))
    )
    new = ref("new", "new")
    shared = allocated_devices(
        new,
        api_claim("new", "new", "gpu-0", config=[opaque(LONG)]),
        driver_name=facts.DRIVER_NAME,
        pool_name=POOL,
        devices=by_name,
        gates=TS,
    )
    assert find_holders(new, shared, [holder]) == []  # our own holder without settings: shared
    [found] = find_holders(new, shared, [holder], adopted={"old"})
    assert found.adopted and found.devices == ("gpu-0",)
    assert found.conflict == "NVIDIA's plugin prepared it with sharing settings this driver does not share"
    assert find_holders(new, shared, [holder], adopted={"old"}, admin={"gpu-0"}) == []


def test_a_claim_prepared_between_the_read_and_the_clean_is_left_alone(
    fake_api: FakeAPIServer, state: DeviceState, kube: KubeAPI
) -> None:
    """The quorum read says deallocated; before the clean, kubelet prepares the claim (allocated
    again, same UID): its entry is unchanged on disk, yet the cleanup must not remove it."""
    obj = api_claim("uid-1", "c", "gpu-0")
    prepared(fake_api, state, "uid-1", "c", "gpu-0")

    class PrepareDuringRead:
        def get_resource_claim(
            self, namespace: str, name: str, timeout: float | None = None, *, cached: bool = False
        ) -> dict | None:
            if cached:
                return api_claim("uid-1", "c", allocated=False)
            answer = api_claim("uid-1", "c", allocated=False)  # what the quorum read saw...
            state.prepare(ref("uid-1", "c"), obj)  # ...while kubelet's prepare answered
            return answer

    rec = Reconciler(
        state, PrepareDuringRead(), driver_name=facts.DRIVER_NAME, pool_name=POOL, metrics=Metrics()
    )
    try:
        assert rec.run_round().cleaned == {}
    finally:
        rec.stop()
    assert sorted(state.entries()) == ["uid-1"] and cdi.base_spec_path(state_cdi(state)).exists()


def state_cdi(state: DeviceState) -> Path:
    return state._cdi_root


# --- a prepare that meets another claim's entry on its device ---


def test_a_prepare_that_meets_a_ghost_cleans_it_and_succeeds(
    fake_api: FakeAPIServer, state: DeviceState, reconciler: Reconciler
) -> None:
    prepared(fake_api, state, "uid-old", "old", "gpu-0")
    fake_api.delete_claim("default", "old")
    new = api_claim("uid-new", "new", "gpu-0")
    fake_api.add_claim(new)
    [got] = state.prepare(ref("uid-new", "new"), new)
    assert got.device_name == "gpu-0" and sorted(state.entries()) == ["uid-new"]
    assert counted(reconciler, "claim_ghosts_cleaned", "gone") == 1
    assert fake_api.count("GET", "/resourceclaims/old") == 1  # one quorum read, at once


def test_a_prepare_that_meets_a_live_holder_fails_naming_both_claims(
    fake_api: FakeAPIServer, state: DeviceState, reconciler: Reconciler
) -> None:
    prepared(fake_api, state, "uid-old", "old", "gpu-0")
    new = api_claim("uid-new", "new", "gpu-0")
    fake_api.add_claim(new)
    with pytest.raises(ClaimError) as err:
        state.prepare(ref("uid-new", "new"), new)
    assert str(err.value).startswith(
        "claim default/new (uid uid-new): device(s) gpu-0 are prepared on this node for claim default/old "
        "(uid uid-old), which still exists and is allocated them"
    )
    assert sorted(state.entries()) == ["uid-old"]


def test_a_holder_whose_read_fails_is_kept_and_the_prepare_fails(
    fake_api: FakeAPIServer, state: DeviceState, reconciler: Reconciler
) -> None:
    prepared(fake_api, state, "uid-old", "old", "gpu-0")
    fake_api.delete_claim("default", "old")
    fake_api.inject_fault("GET", "/resourceclaims/old", 503)
    new = api_claim("uid-new", "new", "gpu-0")
    fake_api.add_claim(new)
    with pytest.raises(
        ClaimError,
        match=r"which could not be checked against the API server \(503 InternalError: injected fault\)",
    ):
        state.prepare(ref("uid-new", "new"), new)
    assert sorted(state.entries()) == ["uid-old"]
    state.prepare(ref("uid-new", "new"), new)  # kubelet's retry: the API answers, the ghost goes
    assert sorted(state.entries()) == ["uid-new"]


def test_admin_access_allows_the_overlap(
    fake_api: FakeAPIServer, state: DeviceState, reconciler: Reconciler
) -> None:
    prepared(fake_api, state, "uid-old", "old", "gpu-0")
    monitor = claim("uid-mon", {**result("gpu-0"), "adminAccess": True}, name="mon")
    fake_api.add_claim(monitor)
    state.prepare(ref("uid-mon", "mon"), monitor)
    # and the other way round: a holder with admin access, found live, lets a plain claim in
    admin_holder = claim("uid-a", {**result("gpu-1"), "adminAccess": True}, name="a")
    fake_api.add_claim(admin_holder)
    state.prepare(ref("uid-a", "a"), admin_holder)
    plain = api_claim("uid-p", "p", "gpu-1")
    fake_api.add_claim(plain)
    state.prepare(ref("uid-p", "p"), plain)
    assert sorted(state.entries()) == ["uid-a", "uid-mon", "uid-old", "uid-p"]


def test_time_slicing_allows_the_overlap_with_the_same_setting(
    tmp_path: Path, fake_api: FakeAPIServer, kube
) -> None:
    env = (FakeDriverRoot(tmp_path / "driver-root"), tmp_path / "cdi", tmp_path / "plugin")
    state = make_state(env)
    rec = Reconciler(state, kube, driver_name=facts.DRIVER_NAME, pool_name=POOL, metrics=Metrics())
    state.holder_check = rec.check_holders
    try:
        for uid in ("a", "b"):
            obj = api_claim(uid, uid, "gpu-0", config=[opaque(LONG)])
            fake_api.add_claim(obj)
            state.prepare(ref(uid, uid), obj)
        short = gpu_config(sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Short"}})
        other = api_claim("c", "c", "gpu-0", config=[opaque(short)])
        fake_api.add_claim(other)
        with pytest.raises(ClaimError, match=r"claim default/c .* for claim default/a .*time-slice 3"):
            state.prepare(ref("c", "c"), other)
    finally:
        rec.stop()
    assert sorted(state.entries()) == ["a", "b"]


# --- the plugin: a round at start, then on its trigger; kubelet's calls ---


def test_plugin_reconciles_at_start_and_each_round(short_tmp: Path, fake_api: FakeAPIServer) -> None:
    fake_api.add_node(NODE)
    plugin = Plugin(plugin_config(short_tmp, gpus=2), stop_grace=5)
    plugin.start()
    try:
        assert plugin.reconciler is not None and plugin.reconciler.wait_rounds(1, 10)
        kubelet = Kubelet(plugin.registration_socket)
        kubelet.register()
        for uid, name, device in (("uid-1", "c1", "gpu-0"), ("uid-2", "c2", "gpu-1")):
            fake_api.add_claim(api_claim(uid, name, device))
            assert kubelet.prepare([("default", name, uid)])[uid]["error"] == ""
        fake_api.delete_claim("default", "c1")
        done = plugin.reconciler.rounds
        plugin.reconciler.trigger()
        assert plugin.reconciler.wait_rounds(done + 1, 10)
        assert plugin.state is not None and sorted(plugin.state.entries()) == ["uid-2"]
        # a re-created c2 (new UID, same device) meets the old entry at prepare: it is cleaned first
        fake_api.delete_claim("default", "c2")
        fake_api.add_claim(api_claim("uid-3", "c2", "gpu-1"))
        assert kubelet.prepare([("default", "c2", "uid-3")])["uid-3"]["error"] == ""
        # a live holder: the second claim on gpu-1 gets the error naming both
        fake_api.add_claim(api_claim("uid-4", "c4", "gpu-1"))
        error = kubelet.prepare([("default", "c4", "uid-4")])["uid-4"]["error"]
        assert "claim default/c4 (uid uid-4)" in error and "claim default/c2 (uid uid-3)" in error
        assert kubelet.unprepare([("default", "c1", "uid-1")]) == {"uid-1": ""}  # cleaned earlier: a success
        kubelet.close()
    finally:
        plugin.stop()
    data = json.loads((short_tmp / "plugins" / facts.DRIVER_NAME / CHECKPOINT_FILE).read_text())
    assert [c["uid"] for c in data["claims"]] == ["uid-3"]
    samples = {
        s.labels["reason"]: s.value
        for metric in plugin.metrics.registry.collect()
        if metric.name == "vke_gpu_dra_claim_ghosts_cleaned"
        for s in metric.samples
        if s.name.endswith("_total")
    }
    assert samples == {"gone": 1.0, "replaced": 1.0}


# --- process level: killed, the claims deleted meanwhile, restarted ---


def test_ghosts_left_by_a_killed_plugin_are_cleaned_after_its_restart(
    short_tmp: Path, fake_api: FakeAPIServer
) -> None:
    fake_api.add_node(NODE)
    for uid, name, device in (
        ("uid-1", "gone", "gpu-0"),
        ("uid-2", "again", "gpu-1"),
        ("uid-3", "live", "gpu-2"),
    ):
        fake_api.add_claim(api_claim(uid, name, device))
    reg = short_tmp / "registry" / REG_SOCKET
    checkpoint = short_tmp / "plugins" / facts.DRIVER_NAME / CHECKPOINT_FILE

    def uids() -> list[str]:
        return sorted(c["uid"] for c in checkpoint_document(checkpoint.parent)["claims"])

    args = plugin_args(short_tmp, gpus=4)
    proc = launch(args, module=True)
    try:
        assert wait_until(lambda: reg.exists() or proc.poll() is not None, timeout=30), (
            "no registration socket"
        )
        kubelet = Kubelet(reg)
        kubelet.register()
        answers = kubelet.prepare(
            [("default", "gone", "uid-1"), ("default", "again", "uid-2"), ("default", "live", "uid-3")]
        )
        assert all(a["error"] == "" for a in answers.values())
        kubelet.close()
        proc.kill()  # SIGKILL: no unprepare, nothing flushed beyond the checkpoint
        proc.communicate()
        assert uids() == ["uid-1", "uid-2", "uid-3"]
        fake_api.delete_claim("default", "gone")
        fake_api.delete_claim("default", "again")
        fake_api.add_claim(api_claim("uid-4", "again", "gpu-1"))  # same name, new UID
        fake_api.requests.clear()
        proc = launch(args, module=True)
        assert wait_until(lambda: uids() == ["uid-3"] or proc.poll() is not None, timeout=30), uids()
        assert proc.poll() is None
        assert cdi.list_claim_specs(short_tmp / "cdi") == {}  # answered from the base spec
        assert not [
            p for m, p in fake_api.requests if m == "GET" and p.endswith("/resourceclaims")
        ]  # no list
        kubelet = Kubelet(reg)
        kubelet.register()
        assert kubelet.prepare([("default", "again", "uid-4")])["uid-4"]["error"] == ""
        assert kubelet.unprepare([("default", "gone", "uid-1")]) == {"uid-1": ""}
        kubelet.close()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    logs = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    cleaned = sorted((e["uid"], e["reason"]) for e in logs if e["msg"] == "cleaned ghost claim")
    assert cleaned == [("uid-1", "gone"), ("uid-2", "replaced")]
