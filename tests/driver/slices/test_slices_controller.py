"""The slice controller against the fake API server: publish, restore, repair, clean up, stop."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from vke_gpu_dra.kubeapi import KubeAPI, KubeError
from vke_gpu_dra.metrics import Metrics
from vke_gpu_dra.slice_controller import CONTESTED_FREE_ROUNDS, SliceController
from vke_gpu_dra.slices import new_slice, slice_spec
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.discovery.simulated import SimulatedSource
from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer

DRIVER = facts.DRIVER_NAME
NODE = "node-a"


def make_controller(kube: KubeAPI, entries: list[dict], **kwargs) -> SliceController:
    kwargs = {"backoff_initial": 0.05, "backoff_max": 0.2, **kwargs}
    return SliceController(kube, driver=DRIVER, node_name=NODE, entries=entries, metrics=Metrics(), **kwargs)


@pytest.fixture
def node(fake_api: FakeAPIServer) -> dict:
    return fake_api.add_node(NODE)


@pytest.fixture
def gpus() -> list[dict]:
    return [
        d.slice_entry()
        for d in SimulatedSource(count=8, product="NVIDIA A30", node_name=NODE).discover().devices
    ]


@pytest.fixture
def running(kube: KubeAPI, node: dict, gpus: list[dict]) -> Iterator[SliceController]:
    controller = make_controller(kube, gpus)
    controller.start()
    assert controller.wait_synced(10)
    yield controller
    controller.stop()


def pool_state(fake_api: FakeAPIServer) -> list[tuple[int, int, int]]:
    return [
        (pool["generation"], pool["resourceSliceCount"], len(s["spec"].get("devices", [])))
        for s in fake_api.slices_of(NODE)
        for pool in [s["spec"]["pool"]]
    ]


def test_publishes_one_owned_slice(fake_api: FakeAPIServer, running: SliceController, node: dict) -> None:
    [published] = fake_api.slices_of(NODE)
    assert published["metadata"]["name"].startswith(f"{NODE}-{DRIVER}-")
    assert published["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node["metadata"]["uid"], "controller": True}
    ]
    assert published["spec"]["nodeName"] == NODE and published["spec"]["driver"] == DRIVER
    assert published["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in published["spec"]["devices"]] == [f"gpu-{i}" for i in range(8)]


def test_restores_deleted_slices(fake_api: FakeAPIServer, running: SliceController) -> None:
    [published] = fake_api.slices_of(NODE)
    fake_api.delete_slice(published["metadata"]["name"])  # what kubelet does at start
    assert fake_api.wait_for(lambda: pool_state(fake_api) == [(2, 1, 8)], timeout=5)


def test_repairs_edited_slices(fake_api: FakeAPIServer, running: SliceController) -> None:
    [published] = fake_api.slices_of(NODE)
    fake_api.edit_slice(
        published["metadata"]["name"], lambda s: s["spec"].update(devices=s["spec"]["devices"][:2])
    )
    assert fake_api.wait_for(lambda: pool_state(fake_api) == [(2, 1, 8)], timeout=5)
    [repaired] = fake_api.slices_of(NODE)
    assert repaired["metadata"]["name"] == published["metadata"]["name"]


def test_stale_slices_are_removed_at_start(
    fake_api: FakeAPIServer, kube: KubeAPI, node: dict, gpus: list
) -> None:
    for generation in (3, 4):
        spec = slice_spec(
            driver=DRIVER, node_name=NODE, devices=[{"name": "gone-0"}], generation=generation, slice_count=2
        )
        fake_api.create_slice(new_slice(spec, driver=DRIVER, node_name=NODE, node_uid="old-uid"))
    other = slice_spec(driver=DRIVER, node_name="node-b", devices=[], generation=1, slice_count=1)
    fake_api.create_slice(new_slice(other, driver=DRIVER, node_name="node-b", node_uid="b"))
    controller = make_controller(kube, gpus)
    controller.start()
    try:
        assert controller.wait_synced(10)
        assert pool_state(fake_api) == [(5, 1, 8)]
        assert fake_api.slices_of(NODE)[0]["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
        assert len(fake_api.slices_of("node-b")) == 1  # never touches other nodes' slices
    finally:
        controller.stop()


def test_splits_more_than_128_devices(fake_api: FakeAPIServer, kube: KubeAPI, node: dict) -> None:
    controller = make_controller(kube, [{"name": f"dev-{i}"} for i in range(300)])
    controller.start()
    try:
        assert controller.wait_synced(10)
        assert sorted(pool_state(fake_api)) == [(1, 3, 44), (1, 3, 128), (1, 3, 128)]
        names = [d["name"] for s in fake_api.slices_of(NODE) for d in s["spec"]["devices"]]
        assert sorted(names) == sorted(f"dev-{i}" for i in range(300))
    finally:
        controller.stop()


def test_empty_device_list_publishes_an_empty_slice(
    fake_api: FakeAPIServer, kube: KubeAPI, node: dict
) -> None:
    controller = make_controller(kube, [])
    controller.start()
    try:
        assert controller.wait_synced(10)
        assert pool_state(fake_api) == [(1, 1, 0)]
    finally:
        controller.stop()


def test_retries_after_errors_and_conflicts(
    fake_api: FakeAPIServer, kube: KubeAPI, node: dict, gpus: list
) -> None:
    fake_api.inject_fault("POST", "/resourceslices", 500, times=2)
    controller = make_controller(kube, gpus)
    controller.start()
    try:
        assert controller.wait_synced(10)
        assert pool_state(fake_api) == [(1, 1, 8)]
        assert fake_api.count("POST", "/resourceslices") == 3
        # A conflicting writer: our update hits 409 once and is retried after re-listing.
        fake_api.inject_fault("PUT", "/resourceslices/", 409, times=1)
        [published] = fake_api.slices_of(NODE)
        fake_api.edit_slice(published["metadata"]["name"], lambda s: s["spec"].update(devices=[]))
        assert fake_api.wait_for(lambda: pool_state(fake_api) == [(2, 1, 8)], timeout=5)
        assert fake_api.count("PUT", "/resourceslices/") == 2
    finally:
        controller.stop()


def test_watch_expiry_relists(fake_api: FakeAPIServer, running: SliceController) -> None:
    fake_api.compact()  # the open watch gets 410 Gone and starts over
    [published] = fake_api.slices_of(NODE)
    fake_api.delete_slice(published["metadata"]["name"])
    assert fake_api.wait_for(lambda: pool_state(fake_api) == [(2, 1, 8)], timeout=5)


def test_stop_is_prompt_and_leaves_slices(
    fake_api: FakeAPIServer, kube: KubeAPI, node: dict, gpus: list
) -> None:
    controller = make_controller(kube, gpus)
    controller.start()
    assert controller.wait_synced(10)
    controller.stop(timeout=5)
    assert not any(t.is_alive() for t in controller._threads)
    assert pool_state(fake_api) == [(1, 1, 8)]


def test_recreated_node_gets_its_slices_back(
    fake_api: FakeAPIServer, kube: KubeAPI, node: dict, gpus: list
) -> None:
    fake_api.start_garbage_collector()
    controller = make_controller(kube, gpus)
    controller.start()
    try:
        assert controller.wait_synced(10)
        new_uid = fake_api.recreate_node(NODE)["metadata"]["uid"]  # the old slices are now orphans

        def owned_by_new_node() -> bool:
            slices = fake_api.slices_of(NODE)
            return len(slices) == 1 and slices[0]["metadata"]["ownerReferences"][0]["uid"] == new_uid

        assert fake_api.wait_for(owned_by_new_node, timeout=5)
        [published] = fake_api.slices_of(NODE)
        assert len(published["spec"]["devices"]) == 8
    finally:
        controller.stop()


def test_missing_node_is_waited_for(
    fake_api: FakeAPIServer, kube: KubeAPI, gpus: list, caplog: pytest.LogCaptureFixture
) -> None:
    controller = make_controller(kube, gpus)
    controller.start()
    try:
        assert fake_api.wait_for(lambda: fake_api.count("GET", f"/api/v1/nodes/{NODE}") >= 2, timeout=5)
        assert not fake_api.slices_of(NODE)
        assert any(f'node "{NODE}" not found' in r.getMessage() for r in caplog.records)
        uid = fake_api.add_node(NODE)["metadata"]["uid"]
        assert controller.wait_synced(10)
        assert fake_api.slices_of(NODE)[0]["metadata"]["ownerReferences"][0]["uid"] == uid
    finally:
        controller.stop()


def test_slices_of_another_pool_are_replaced_not_updated(
    fake_api: FakeAPIServer, kube: KubeAPI, node: dict, gpus: list
) -> None:
    # spec.pool.name is immutable (the apiserver rejects changing it), so such a slice cannot be reused.
    spec = slice_spec(driver=DRIVER, node_name=NODE, devices=[], generation=7, slice_count=1)
    spec["pool"]["name"] = "legacy-pool"
    foreign = fake_api.create_slice(
        new_slice(spec, driver=DRIVER, node_name=NODE, node_uid=node["metadata"]["uid"])
    )
    controller = make_controller(kube, gpus)
    controller.start()
    try:
        assert controller.wait_synced(5)
        [published] = fake_api.slices_of(NODE)
        assert published["metadata"]["name"] != foreign["metadata"]["name"]
        assert published["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
        assert fake_api.count("PUT", "/resourceslices/") == 0
    finally:
        controller.stop()


def test_slices_deleted_before_the_watch_starts_are_restored(
    fake_api: FakeAPIServer, kube: KubeAPI, node: dict, gpus: list
) -> None:
    gate = threading.Event()
    fake_api.watch_gate = gate  # the watch starts only after the first publication and a wipe
    controller = make_controller(kube, gpus, resync_interval=3600)
    controller.start()
    try:
        assert controller.wait_synced(10)
        for published in fake_api.slices_of(NODE):
            fake_api.delete_slice(published["metadata"]["name"])  # kubelet's wipe at its start
        gate.set()
        assert fake_api.wait_for(lambda: pool_state(fake_api) == [(2, 1, 8)], timeout=5)
    finally:
        gate.set()
        controller.stop()


@pytest.mark.parametrize("reaction_s", [0.0, 0.05], ids=["at-once", "after-50ms"])
def test_no_hot_loop_against_a_writer_that_keeps_deleting(
    fake_api: FakeAPIServer, kube: KubeAPI, node: dict, gpus: list, reaction_s: float
) -> None:
    """Also against a writer slower than the plugin's own watch events: the round that sees its own new
    slice still there (in sync) does not make the next writes free again."""
    stop = threading.Event()
    deleted: list[float] = []

    def wiper() -> None:  # deletes the node's slices `reaction_s` after they appear, and never stops
        while not stop.is_set():
            with fake_api.cond:
                names = [n for n, s in fake_api.slices.items() if s["spec"].get("nodeName") == NODE]
            if names and reaction_s:
                time.sleep(reaction_s)
            with fake_api.cond:
                for name in names:
                    if name in fake_api.slices:
                        fake_api._delete_slice(name, None)
                        deleted.append(time.monotonic())
                fake_api.cond.wait(0.01)

    thread = threading.Thread(target=wiper, daemon=True)
    thread.start()
    controller = make_controller(kube, gpus, resync_interval=3600, backoff_max=0.4)
    controller.start()
    try:
        free = CONTESTED_FREE_ROUNDS
        assert fake_api.wait_for(lambda: len(deleted) >= free + 6, timeout=10)
        # The first publication is the plugin's own; each deletion's restore counts. After the free
        # rounds, pauses of 0.05 + 0.1 + 0.2 + 0.4 s at least between these five deletions.
        assert deleted[free + 5] - deleted[free + 1] >= 0.5
        stop.set()
        thread.join(5)
        assert fake_api.wait_for(lambda: len(pool_state(fake_api)) == 1, timeout=5)  # back once alone
    finally:
        stop.set()
        controller.stop()


def test_its_own_changes_are_never_slowed_down(
    fake_api: FakeAPIServer, running: SliceController, gpus: list, caplog: pytest.LogCaptureFixture
) -> None:
    """A GPU whose health flaps changes the slice many times in a row: each change is the plugin's own, so
    none counts as a writer undoing its slices."""

    def published(devices: int) -> Callable[[], bool]:
        return lambda: [count for _, _, count in pool_state(fake_api)] == [devices]

    for n in range(2 * CONTESTED_FREE_ROUNDS):
        devices = len(gpus) - 1 - n % 2  # one GPU out of the slice, then back, ...
        running.set_entries(gpus[:devices])
        assert fake_api.wait_for(published(devices), timeout=5)
    assert not [r for r in caplog.records if "keep changing under the plugin" in r.getMessage()]
    assert pool_state(fake_api)[0][0] == 2 * CONTESTED_FREE_ROUNDS + 1  # one generation per change


def test_restart_with_no_devices_keeps_the_published_slice(
    fake_api: FakeAPIServer, kube: KubeAPI, node: dict
) -> None:
    for _ in range(2):
        controller = make_controller(kube, [])
        controller.start()
        try:
            assert controller.wait_synced(10)
        finally:
            controller.stop()
    assert pool_state(fake_api) == [(1, 1, 0)]  # the second start found it in sync
    assert fake_api.count("PUT", "/resourceslices/") == 0


def watch_requests(fake_api: FakeAPIServer) -> list[dict[str, str]]:
    with fake_api.cond:
        paths = [p for m, p in fake_api.requests if m == "GET" and "watch=true" in p]
    return [{k: v[-1] for k, v in parse_qs(urlsplit(p).query).items()} for p in paths]


def slice_lists(fake_api: FakeAPIServer) -> int:
    with fake_api.cond:
        return sum(
            1 for m, p in fake_api.requests if m == "GET" and "/resourceslices?" in p and "watch" not in p
        )


# Back-off and resync far beyond the waits below: only the watch can restore a slice in time.
SLOW_RETRIES = {"resync_interval": 3600, "backoff_initial": 30.0, "backoff_max": 30.0}


def test_watch_list_streams_the_slices_and_restores_a_deleted_one(
    fake_api: FakeAPIServer, kube: KubeAPI, node: dict, gpus: list
) -> None:
    controller = make_controller(kube, gpus, **SLOW_RETRIES)
    controller.start()
    try:
        assert controller.wait_synced(10)
        assert fake_api.wait_for(lambda: fake_api.watching == 1)
        [request] = watch_requests(fake_api)
        assert request["sendInitialEvents"] == "true" and request["resourceVersionMatch"] == "NotOlderThan"
        assert request["allowWatchBookmarks"] == "true" and "resourceVersion" not in request
        [published] = fake_api.slices_of(NODE)
        fake_api.delete_slice(published["metadata"]["name"])
        assert fake_api.wait_for(lambda: pool_state(fake_api) == [(2, 1, 8)], timeout=5)
        assert len(watch_requests(fake_api)) == 1  # the same stream saw the deletion
    finally:
        controller.stop()


def test_refused_watch_list_falls_back_to_list_then_watch(
    fake_api: FakeAPIServer, kube: KubeAPI, node: dict, gpus: list, caplog: pytest.LogCaptureFixture
) -> None:
    fake_api.watch_list = False  # an API server without the WatchList feature
    controller = make_controller(kube, gpus, **SLOW_RETRIES)
    controller.start()
    try:
        assert controller.wait_synced(10)
        assert fake_api.wait_for(lambda: fake_api.watching == 1)
        refused, plain = watch_requests(fake_api)
        assert refused["sendInitialEvents"] == "true"
        assert "sendInitialEvents" not in plain and "resourceVersionMatch" not in plain
        # The watch starts from the resourceVersion of a list, not from "now".
        assert int(plain["resourceVersion"]) > 0
        [published] = fake_api.slices_of(NODE)
        fake_api.delete_slice(published["metadata"]["name"])
        assert fake_api.wait_for(lambda: pool_state(fake_api) == [(2, 1, 8)], timeout=5)
        # After an expired watch it lists and watches again, without asking for watch-list again.
        lists = slice_lists(fake_api)
        fake_api.compact()
        # (>= 3: a loaded machine may see a watch end and start again in between)
        assert fake_api.wait_for(lambda: len(watch_requests(fake_api)) >= 3 and fake_api.watching == 1)
        assert slice_lists(fake_api) > lists
        for later in watch_requests(fake_api)[2:]:
            assert "sendInitialEvents" not in later
            assert int(later["resourceVersion"]) >= int(plain["resourceVersion"])
        [published] = fake_api.slices_of(NODE)
        fake_api.delete_slice(published["metadata"]["name"])
        assert fake_api.wait_for(lambda: pool_state(fake_api) == [(3, 1, 8)], timeout=5)
    finally:
        controller.stop()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_fake_refuses_watch_list_like_an_apiserver_without_the_feature(
    fake_api: FakeAPIServer, kube: KubeAPI
) -> None:
    fake_api.watch_list = False
    with pytest.raises(KubeError) as err:
        kube.watch_slices(DRIVER, NODE, "", 5, send_initial_events=True)
    assert err.value.status == 422 and err.value.reason == "Invalid"
    assert err.value.message == (
        'ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: '
        "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
    )
