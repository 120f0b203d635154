"""kubelet's deadline bounds every API call made for a Prepare call (real gRPC, real client, fake API).

The fake API server can accept a request and never answer it (`hang`), answer late (`slow`) or
hold requests until the test releases them (`hold`); the answer must reach "kubelet" before its
deadline, with a per-claim error for each claim whose read did not finish.
"""

from __future__ import annotations

import logging
import shutil
import ssl
import subprocess
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from vke_gpu_dra.kubeapi import KubeAPI
from vke_gpu_dra.kubelet.dra_service import DRAServicer, add_dra_servicer
from vke_gpu_dra.kubelet.registration import (
    RegistrationServicer,
    RegistrationStatus,
    add_registration_servicer,
)
from vke_gpu_dra.kubelet.sockets import unix_server
from vke_gpu_dra.metrics import Metrics
from vke_gpu_dra_core import facts
from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer, Hold
from vke_gpu_dra_testing.kubelet_client import Kubelet
from vke_gpu_dra_testing.plugin_env import claim, free_port

from tests.driver.kubelet.test_grpc_servers import RecordingState

#: A kubelet deadline short enough for tests (kubelet's own is 45 s; the rules are the same).
DEADLINE = 2.0


class Plugin:
    """The DRA and registration services over unix sockets, reading claims through `api`."""

    def __init__(self, root: Path, api: KubeAPI) -> None:
        self.state = RecordingState()
        self.servicer = DRAServicer(claims=api, state=self.state, metrics=Metrics())
        self.dra_socket = root / "dra.sock"
        self.dra = unix_server(self.dra_socket, max_workers=8, name="dra")
        add_dra_servicer(self.dra, self.servicer)
        self.reg = unix_server(root / "reg.sock", max_workers=2, name="reg")
        add_registration_servicer(
            self.reg,
            RegistrationServicer(
                driver_name=facts.DRIVER_NAME, dra_endpoint=self.dra_socket, status=RegistrationStatus()
            ),
        )
        self.dra.start()
        self.reg.start()
        self.kubelet = Kubelet(root / "reg.sock")
        self.kubelet.register()

    def stop(self) -> None:
        self.kubelet.close()
        self.reg.stop(0).wait()
        self.dra.stop(0).wait()
        self.servicer.close()


@pytest.fixture
def plugin(short_tmp: Path, kube: KubeAPI) -> Iterator[Plugin]:
    p = Plugin(short_tmp, kube)
    yield p
    p.stop()


def add_claims(fake_api: FakeAPIServer, *names: str) -> list[tuple[str, str, str]]:
    for i, name in enumerate(names):
        fake_api.add_claim(claim(name, f"uid-{name}", f"gpu-{i}"))
    return [("default", name, f"uid-{name}") for name in names]


def driver_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("vke_gpu_dra")]


HOLDS: dict[str, Callable[[FakeAPIServer, str], Hold]] = {
    "hang": lambda api, path: api.hang("GET", path),
    "slow": lambda api, path: api.slow("GET", path, 60.0),
}


@pytest.mark.parametrize("mode", sorted(HOLDS))
def test_an_api_server_that_does_not_answer_gets_a_per_claim_error_in_time(
    fake_api: FakeAPIServer, plugin: Plugin, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    caplog.set_level(logging.INFO)
    claims = add_claims(fake_api, "ok", "stuck")
    hold = HOLDS[mode](fake_api, "/resourceclaims/stuck")
    result = plugin.kubelet.prepare(claims, timeout=DEADLINE)  # DEADLINE_EXCEEDED would raise here
    assert result["uid-ok"]["error"] == ""
    assert [d["device_name"] for d in result["uid-ok"]["devices"]] == ["gpu-0"]
    assert result["uid-stuck"]["devices"] == []
    assert result["uid-stuck"]["error"] == (
        "claim default/stuck: the API server did not answer in time (kubelet's deadline); kubelet retries"
    )
    assert hold.seen == 1  # one attempt: no hidden retry
    assert "uid-stuck" not in plugin.state.prepared
    [failed] = [r for r in driver_records(caplog) if r.getMessage() == "prepare failed"]
    assert failed.levelno == logging.WARNING and failed.exc_info is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    # The next call, with the server answering again, prepares the claim.
    fake_api.unhold()
    assert plugin.kubelet.prepare(claims[1:], timeout=DEADLINE)["uid-stuck"]["error"] == ""


def test_the_claims_of_one_call_are_read_concurrently(fake_api: FakeAPIServer, plugin: Plugin) -> None:
    names = [f"c{i}" for i in range(4)]
    claims = add_claims(fake_api, *names)
    release = threading.Event()
    hold = fake_api.hold("GET", "/resourceclaims/", release)

    def release_when_all_are_in_flight() -> None:
        fake_api.wait_for(lambda: hold.waiting == len(names), timeout=10)
        release.set()

    releaser = threading.Thread(target=release_when_all_are_in_flight)
    releaser.start()
    try:
        result = plugin.kubelet.prepare(claims, timeout=5.0)
    finally:
        release.set()
        releaser.join(10)
    assert hold.seen == len(names)
    assert {uid: r["error"] for uid, r in result.items()} == {f"uid-{n}": "" for n in names}


def test_an_unreachable_api_server_is_reported_as_such(
    short_tmp: Path, fake_api: FakeAPIServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    kubeconfig = short_tmp / "down-kubeconfig"
    fake_api.write_kubeconfig(kubeconfig)
    kubeconfig.write_text(kubeconfig.read_text().replace(fake_api.url, f"http://127.0.0.1:{free_port()}"))
    api = KubeAPI.from_kubeconfig(kubeconfig)
    p = Plugin(short_tmp, api)
    try:
        result = p.kubelet.prepare([("default", "c1", "uid-1")], timeout=DEADLINE)
    finally:
        p.stop()
        api.close()
    error = result["uid-1"]["error"]
    assert error.startswith("claim default/c1: cannot reach the API server: ")
    assert "Connection refused" in error and "internal error" not in error
    [failed] = [r for r in driver_records(caplog) if r.getMessage() == "prepare failed"]
    assert failed.levelno == logging.WARNING and failed.exc_info is None
    assert not [r for r in caplog.records if r.name.startswith("urllib3") and r.levelno >= logging.WARNING]


def test_the_deadline_holds_when_reads_queue_behind_other_calls(
    fake_api: FakeAPIServer, plugin: Plugin
) -> None:
    # Two calls at once against a server that never answers: both answer by their deadline.
    claims = add_claims(fake_api, "a", "b")
    fake_api.hang("GET", "/resourceclaims/")
    results: dict[str, dict] = {}
    errors: list[BaseException] = []

    def call(c: tuple[str, str, str]) -> None:
        try:
            results.update(plugin.kubelet.prepare([c], timeout=DEADLINE))
        except grpc.RpcError as err:  # DEADLINE_EXCEEDED: the answer came too late
            errors.append(err)

    threads = [threading.Thread(target=call, args=(c,)) for c in claims]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert errors == []
    assert all("did not answer in time" in r["error"] for r in results.values()) and len(results) == 2


def test_64_concurrent_reads_fit_the_connection_pool(
    fake_api: FakeAPIServer, kube: KubeAPI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    n = 64
    add_claims(fake_api, "c")
    release = threading.Event()
    hold = fake_api.hold("GET", "/resourceclaims/c", release)
    results: list[object] = []

    def read() -> None:
        results.append(kube.get_resource_claim("default", "c"))

    threads = [threading.Thread(target=read) for _ in range(n)]
    for t in threads:
        t.start()
    all_in_flight = fake_api.wait_for(lambda: hold.waiting == n, timeout=20)
    release.set()
    for t in threads:
        t.join(20)
    assert all_in_flight and len(results) == n and all(r is not None for r in results)
    # A second round reuses the pooled connections.
    for t in (threads := [threading.Thread(target=read) for _ in range(n)]):
        t.start()
    for t in threads:
        t.join(20)
    full = [r for r in caplog.records if "pool is full" in r.getMessage()]
    assert full == []


@pytest.mark.skipif(
    shutil.which("openssl") is None, reason="needs the openssl CLI for a self-signed certificate"
)
def test_skipped_tls_verification_is_said_once_not_per_request(
    short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-keyout", str(short_tmp / "key.pem"), "-out", str(short_tmp / "cert.pem")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(short_tmp / "cert.pem", short_tmp / "key.pem")
    caplog.set_level(logging.INFO)
    with FakeAPIServer(ssl_context=context) as server, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        server.add_node("n1")
        kubeconfig = server.write_kubeconfig(short_tmp / "insecure-kubeconfig", insecure=True)
        api = KubeAPI.from_kubeconfig(kubeconfig)
        try:
            for _ in range(3):
                assert api.get_node("n1")["metadata"]["name"] == "n1"
        finally:
            api.close()
    assert [str(w.category.__name__) for w in seen] == []
    said = [r for r in caplog.records if "TLS verification of the API server is off" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
