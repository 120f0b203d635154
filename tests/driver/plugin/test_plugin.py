"""The wired plugin in-process: real SimulatedSource, DeviceState, gRPC sockets and the fake API."""

from __future__ import annotations

import fcntl
import os
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from vke_gpu_dra.claims.checkpoint import CHECKPOINT_FILE, CheckpointStore, read_boot_id
from vke_gpu_dra.config import parse_config
from vke_gpu_dra.kubeapi import KubeAPI, load_api_client
from vke_gpu_dra.nodelock import LOCK_FILE
from vke_gpu_dra.plugin import Plugin, StartupError
from vke_gpu_dra.sharing.step import SharingStep
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.kubeconfig import KubeconfigError
from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer
from vke_gpu_dra_testing.kubelet_client import Kubelet
from vke_gpu_dra_testing.plugin_env import NODE, claim, free_port, plugin_args, plugin_config, wait_until


@pytest.fixture
def node(fake_api: FakeAPIServer) -> dict:
    return fake_api.add_node(NODE)


@pytest.fixture
def plugin(short_tmp: Path, fake_api: FakeAPIServer, node: dict) -> Iterator[Plugin]:
    p = Plugin(plugin_config(short_tmp, health_port=free_port(), metrics_port=free_port()), stop_grace=5)
    p.start()
    yield p
    p.stop()


@pytest.fixture
def kubelet(plugin: Plugin) -> Iterator[Kubelet]:
    k = Kubelet(plugin.registration_socket)
    k.register()
    yield k
    k.close()


def health(port: int, service: str = "") -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status


def test_sockets_and_registration(plugin: Plugin, kubelet: Kubelet, short_tmp: Path) -> None:
    assert plugin.registration_socket == short_tmp / "registry" / f"{facts.DRIVER_NAME}-reg.sock"
    assert kubelet.info is not None
    assert kubelet.info.endpoint == str(short_tmp / "plugins" / facts.DRIVER_NAME / "dra.sock")
    assert plugin.registration.snapshot().registered is True


def test_prepare_unprepare_with_real_state(plugin: Plugin, kubelet: Kubelet, fake_api: FakeAPIServer) -> None:
    fake_api.add_claim(claim("c1", "uid-1", "gpu-0", "gpu-1"))
    for version in ("v1", "v1beta1"):
        result = kubelet.prepare([("default", "c1", "uid-1")], version=version)
        assert result["uid-1"]["error"] == ""
        devices = result["uid-1"]["devices"]
        assert [(d["pool_name"], d["device_name"]) for d in devices] == [(NODE, "gpu-0"), (NODE, "gpu-1")]
        assert all(d["request_names"] == ["gpu"] and d["cdi_device_ids"] for d in devices)
    assert plugin.state is not None and "uid-1" in plugin.state.prepared()
    assert kubelet.unprepare([("default", "c1", "uid-1")]) == {"uid-1": ""}
    assert plugin.state.prepared() == {}


def test_a_held_node_lock_is_a_claim_error_before_kubelets_deadline(
    plugin: Plugin, kubelet: Kubelet, fake_api: FakeAPIServer, short_tmp: Path
) -> None:
    """Another plugin process holds the node lock: the claim's error comes back, not DEADLINE_EXCEEDED."""
    fake_api.add_claim(claim("c1", "uid-1", "gpu-0"))
    fd = os.open(plugin.config.plugin_data_dir / LOCK_FILE, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        result = kubelet.prepare([("default", "c1", "uid-1")], timeout=3)
    finally:
        os.close(fd)
    assert result["uid-1"]["devices"] == []
    assert "timed out waiting for the node's prepare/unprepare lock" in result["uid-1"]["error"]
    assert kubelet.prepare([("default", "c1", "uid-1")])["uid-1"]["error"] == ""  # free again


def test_bad_claims_get_per_claim_errors(plugin: Plugin, kubelet: Kubelet, fake_api: FakeAPIServer) -> None:
    fake_api.add_claim(claim("good", "uid-good", "gpu-2"))
    fake_api.add_claim(claim("replaced", "uid-new", "gpu-3"))
    pending = claim("pending", "uid-pending")
    pending["status"] = {}
    fake_api.add_claim(pending)
    fake_api.add_claim(claim("elsewhere", "uid-else", "gpu-42"))
    result = kubelet.prepare([
        ("default", "good", "uid-good"),
        ("default", "missing", "uid-missing"),
        ("default", "replaced", "uid-old"),
        ("default", "pending", "uid-pending"),
        ("default", "elsewhere", "uid-else"),
    ])  # fmt: skip
    assert result["uid-good"]["error"] == ""
    assert result["uid-missing"]["error"] == "claim default/missing not found"
    assert "got replaced" in result["uid-old"]["error"]
    assert result["uid-pending"]["error"] == "claim default/pending is not allocated"
    assert "gpu-42" in result["uid-else"]["error"]
    assert all(not r["devices"] for uid, r in result.items() if uid != "uid-good")


def test_many_overlapping_calls(plugin: Plugin, kubelet: Kubelet, fake_api: FakeAPIServer) -> None:
    for i in range(8):
        fake_api.add_claim(claim(f"c{i}", f"uid-{i}", f"gpu-{i}"))
    errors: list[str] = []

    def pod(i: int) -> None:
        for _ in range(3):
            r = kubelet.prepare([("default", f"c{i}", f"uid-{i}")])
            errors.append(r[f"uid-{i}"]["error"])
            errors.append(kubelet.unprepare([("default", f"c{i}", f"uid-{i}")])[f"uid-{i}"])
        errors.append(kubelet.prepare([("default", f"c{i}", f"uid-{i}")])[f"uid-{i}"]["error"])

    threads = [threading.Thread(target=pod, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == [""] * len(errors) and len(errors) == 8 * 7
    assert plugin.state is not None and sorted(plugin.state.prepared()) == sorted(
        f"uid-{i}" for i in range(8)
    )


def test_state_survives_a_restart(short_tmp: Path, fake_api: FakeAPIServer, node: dict) -> None:
    fake_api.add_claim(claim("c1", "uid-1", "gpu-5"))
    config = plugin_config(short_tmp)
    first = Plugin(config, stop_grace=5)
    first.start()
    k = Kubelet(first.registration_socket)
    k.register()
    prepared = k.prepare([("default", "c1", "uid-1")])
    k.close()
    first.stop()
    assert not first.registration_socket.exists() and not first.dra_socket.exists()
    second = Plugin(config, stop_grace=5)
    second.start()
    try:
        assert second.state is not None and list(second.state.prepared()) == ["uid-1"]
        k = Kubelet(second.registration_socket)
        k.register()
        assert k.prepare([("default", "c1", "uid-1")]) == prepared  # idempotent across restarts
        fake_api.claims.clear()  # the claim is gone from the API: unprepare works from local state
        assert k.unprepare([("default", "c1", "uid-1")]) == {"uid-1": ""}
        assert second.state.prepared() == {}
        k.close()
    finally:
        second.stop()


def test_slices_published_and_kept(plugin: Plugin, fake_api: FakeAPIServer, node: dict) -> None:
    assert plugin.slices is not None and plugin.slices.wait_synced(10)
    [published] = fake_api.slices_of(NODE)
    assert [d["name"] for d in published["spec"]["devices"]] == [f"gpu-{i}" for i in range(8)]
    assert published["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
    fake_api.delete_slice(published["metadata"]["name"])
    assert fake_api.wait_for(lambda: len(fake_api.slices_of(NODE)) == 1, timeout=5)
    plugin.stop()
    assert len(fake_api.slices_of(NODE)) == 1  # stopping does not delete slices


def test_health_follows_the_sockets(plugin: Plugin, kubelet: Kubelet) -> None:
    serving = health_pb2.HealthCheckResponse.SERVING
    assert health(plugin.health_port) == serving
    assert health(plugin.health_port, "liveness") == serving
    with pytest.raises(grpc.RpcError) as err:
        health(plugin.health_port, "readiness")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    plugin.endpoints.registration_socket.unlink()  # registration socket gone: no longer serving
    assert health(plugin.health_port, "liveness") == health_pb2.HealthCheckResponse.NOT_SERVING


def test_metrics_endpoint(plugin: Plugin, kubelet: Kubelet, fake_api: FakeAPIServer) -> None:
    fake_api.add_claim(claim("c1", "uid-1", "gpu-0"))
    kubelet.prepare([("default", "c1", "uid-1"), ("default", "nope", "uid-2")])
    kubelet.unprepare([("default", "c1", "uid-1")])
    assert plugin.slices is not None and plugin.slices.wait_synced(10)
    with urllib.request.urlopen(f"http://127.0.0.1:{plugin.metrics_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    for line in (
        'vke_gpu_dra_prepare_claims_total{result="success"} 1.0',
        'vke_gpu_dra_prepare_claims_total{result="error"} 1.0',
        'vke_gpu_dra_unprepare_claims_total{result="success"} 1.0',
        "vke_gpu_dra_prepare_duration_seconds_count 1.0",
        "vke_gpu_dra_devices_published 8.0",
        "vke_gpu_dra_kubelet_registered 1.0",
        "vke_gpu_dra_pool_generation 1.0",
    ):
        assert line in text, line


def test_resource_health_stream_reports_simulated_devices_healthy(plugin: Plugin, kubelet: Kubelet) -> None:
    stream = kubelet.watch_health()
    first = next(stream)
    assert [(d.device.pool_name, d.device.device_name) for d in first.devices] == [
        (NODE, f"gpu-{i}") for i in range(8)
    ]
    assert {d.health for d in first.devices} == {1}
    stream.cancel()


def test_start_waits_for_nothing_when_the_api_is_down(short_tmp: Path, fake_api: FakeAPIServer) -> None:
    # No Node object yet: slices cannot be owned, but the sockets serve and slices follow later.
    p = Plugin(plugin_config(short_tmp), stop_grace=5)
    p.start()
    try:
        assert p.registration_socket.exists() and p.dra_socket.exists()
        assert p.slices is not None and not p.slices.wait_synced(0.3)
        fake_api.add_node(NODE)
        assert wait_until(lambda: len(fake_api.slices_of(NODE)) == 1, timeout=10)
    finally:
        p.stop()


class GatedAPI(KubeAPI):
    """Holds every ResourceClaim GET until released, to keep a Prepare call in flight."""

    def __init__(self, kubeconfig: Path) -> None:
        super().__init__(load_api_client(kubeconfig))
        self.entered = threading.Event()
        self.release = threading.Event()

    def get_resource_claim(
        self, namespace: str, name: str, timeout: float | None = None, *, cached: bool = False
    ) -> dict | None:
        self.entered.set()
        assert self.release.wait(20)
        return super().get_resource_claim(namespace, name, timeout, cached=cached)


def test_stop_lets_in_flight_calls_finish(short_tmp: Path, fake_api: FakeAPIServer, node: dict) -> None:
    fake_api.add_claim(claim("c1", "uid-1", "gpu-0"))
    api = GatedAPI(short_tmp / "kubeconfig")
    p = Plugin(plugin_config(short_tmp), api=api, stop_grace=15)
    p.start()
    k = Kubelet(p.registration_socket)
    k.register()
    results: list[dict] = []
    call = threading.Thread(target=lambda: results.append(k.prepare([("default", "c1", "uid-1")])))
    call.start()
    stopper = threading.Thread(target=p.stop)
    try:
        assert api.entered.wait(10)
        stopper.start()
        # Registration goes first: kubelet stops sending new work while the call is still running.
        assert wait_until(lambda: not p.registration_socket.exists(), timeout=10)
        assert stopper.is_alive() and call.is_alive()
    finally:
        api.release.set()
        call.join(20)
        if stopper.ident is not None:
            stopper.join(20)
        k.close()
        api.close()
    assert results and results[0]["uid-1"]["error"] == ""
    assert not stopper.is_alive() and not p.dra_socket.exists()


def claim_readers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("claim-read")}


def test_stop_shuts_the_claim_reader_pool_down(short_tmp: Path, fake_api: FakeAPIServer, node: dict) -> None:
    fake_api.add_claim(claim("c1", "uid-1", "gpu-0"))
    fake_api.add_claim(claim("c2", "uid-2", "gpu-1"))
    before = claim_readers()
    p = Plugin(plugin_config(short_tmp), stop_grace=5)
    p.start()
    k = Kubelet(p.registration_socket)
    try:
        k.register()
        answers = k.prepare([("default", "c1", "uid-1"), ("default", "c2", "uid-2")])
        assert [a["error"] for a in answers.values()] == ["", ""]
        started = claim_readers() - before
        assert started  # the call read its two claims side by side on the pool (one is read in the call)
    finally:
        k.close()
        p.stop()
    for thread in started:
        thread.join(20)
    assert not any(t.is_alive() for t in started)


def test_kubeconfig_from_environment_when_not_in_a_cluster(
    short_tmp: Path, fake_api: FakeAPIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(short_tmp / "kubeconfig"))
    fake_api.add_node("n1")
    api = KubeAPI(load_api_client(None))
    try:
        assert api.get_node("n1")["metadata"]["name"] == "n1"
    finally:
        api.close()


def test_registration_socket_appears_only_once_the_dra_socket_serves(
    short_tmp: Path, fake_api: FakeAPIServer, node: dict
) -> None:
    # kubelet's plugin watcher registers a plugin as soon as its socket shows up in the registrar
    # directory, and then calls the endpoint it got from GetInfo.
    p = Plugin(plugin_config(short_tmp), stop_grace=1)
    starter = threading.Thread(target=p.start)
    starter.start()
    try:
        assert wait_until(p.registration_socket.exists, timeout=10, interval=0.001)
        # Created (bound) in this order: the DRA socket first.
        assert p.dra_socket.stat().st_ctime_ns <= p.registration_socket.stat().st_ctime_ns
        kubelet = Kubelet(p.registration_socket)
        try:
            kubelet.register()
            assert kubelet.prepare([]) == {}
        finally:
            kubelet.close()
    finally:
        starter.join(10)
        p.stop()


def test_the_api_is_opened_before_the_devices_and_the_claims(short_tmp: Path) -> None:
    p = Plugin(plugin_config(short_tmp), stop_grace=1)  # no kubeconfig was written
    with pytest.raises(KubeconfigError):
        p.start()
    assert p.devices == [] and p.state is None
    assert not (short_tmp / "plugins" / facts.DRIVER_NAME / LOCK_FILE).exists()


def test_the_sharing_manager_gets_the_api_when_it_is_built(plugin: Plugin) -> None:
    assert plugin.state is not None
    [sharing] = [s for s in plugin.state._lifecycle.steps if isinstance(s, SharingStep)]
    assert sharing.manager is not None and sharing.manager.api is plugin._api is not None


def test_an_unreadable_boot_id_stops_the_start_before_the_claims_and_names_the_flag(
    short_tmp: Path, fake_api: FakeAPIServer, node: dict
) -> None:
    missing = short_tmp / "no-boot-id"
    config = parse_config([*plugin_args(short_tmp), "--boot-id-path", str(missing)], environ={})
    p = Plugin(config, stop_grace=1)
    with pytest.raises(
        StartupError,
        match=rf"^cannot read the node's boot id from {missing}: .* \(--boot-id-path, env BOOT_ID_PATH\)$",
    ):
        p.start()
    assert p.state is None and not p.registration_socket.exists()
    assert not (short_tmp / "plugins" / facts.DRIVER_NAME / CHECKPOINT_FILE).exists()


def test_the_start_keeps_the_nodes_boot_id_with_the_checkpoint(plugin: Plugin, short_tmp: Path) -> None:
    kept = CheckpointStore(short_tmp / "plugins" / facts.DRIVER_NAME).load_boot_id()
    assert kept == read_boot_id(plugin.config.boot_id_path) and plugin.state is not None
    assert plugin.state.reboot is None
