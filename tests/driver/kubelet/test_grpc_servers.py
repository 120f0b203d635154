"""Registration and DRA services over real unix-socket gRPC, called like kubelet calls them."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest
from vke_gpu_dra.kubelet.dra_service import DRAServicer, add_dra_servicer, check_claim, request_names
from vke_gpu_dra.kubelet.registration import (
    RegistrationServicer,
    RegistrationStatus,
    add_registration_servicer,
    registration_socket_name,
)
from vke_gpu_dra.kubelet.resource_health import (
    DeviceHealthBoard,
    ResourceHealthServicer,
    add_resource_health_servicer,
)
from vke_gpu_dra.kubelet.sockets import MAX_SOCKET_PATH_BYTES, SocketError, prepare_socket_path, unix_server
from vke_gpu_dra.metrics import Metrics
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, Device, PreparedDevice
from vke_gpu_dra_testing.kubelet_client import TIMEOUT as KUBELET_TIMEOUT
from vke_gpu_dra_testing.kubelet_client import Kubelet

NODE = "node-a"


def allocated_claim(ns: str, name: str, uid: str, *results: tuple[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": ns, "name": name, "uid": uid},
        "spec": {"devices": {"requests": []}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": req, "driver": facts.DRIVER_NAME, "pool": NODE, "device": dev}
                        for req, dev in results
                    ]
                }
            }
        },
    }


class DictClaims:
    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}

    def add(self, claim: dict[str, Any]) -> None:
        md = claim["metadata"]
        self.claims[(md["namespace"], md["name"])] = claim

    def get_resource_claim(
        self, namespace: str, name: str, timeout: float | None = None
    ) -> dict[str, Any] | None:
        return self.claims.get((namespace, name))


class RecordingState:
    """Test double of DeviceState: knows devices gpu-0..gpu-7, records prepared claims."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.prepared: dict[str, list[PreparedDevice]] = {}
        self.barrier: threading.Barrier | None = None
        self.explode_on: set[str] = set()
        self.unprepare_errors: dict[str, Exception] = {}  # claim name -> what unprepare raises
        self.deadlines: list[float | None] = []  # the deadline of each call, as time.monotonic() values

    def prepare(
        self, ref: ClaimRef, claim: Mapping[str, Any], *, deadline: float | None = None
    ) -> list[PreparedDevice]:
        self.deadlines.append(deadline)
        if ref.name in self.explode_on:
            raise RuntimeError("boom")
        if self.barrier is not None:
            self.barrier.wait(timeout=10)
        out = []
        for r in claim["status"]["allocation"]["devices"]["results"]:
            if r["device"] not in {f"gpu-{i}" for i in range(8)}:
                raise ClaimError(f"device {r['device']} is not on this node")
            cdi = (f"{facts.CDI_VENDOR}/{facts.CDI_CLASS_DEVICE}={r['device']}",)
            out.append(PreparedDevice((r["request"],), r["pool"], r["device"], cdi))
        with self.lock:
            self.prepared[ref.uid] = out
        return out

    def unprepare(self, ref: ClaimRef, *, deadline: float | None = None) -> None:
        self.deadlines.append(deadline)
        if ref.name in self.unprepare_errors:
            raise self.unprepare_errors[ref.name]
        with self.lock:
            self.prepared.pop(ref.uid, None)


class Servers:
    def __init__(self, root: Path) -> None:
        self.claims = DictClaims()
        self.state = RecordingState()
        self.metrics = Metrics()
        self.status = RegistrationStatus()
        self.dra_socket = root / "plugins" / facts.DRIVER_NAME / "dra.sock"
        self.reg_socket = root / "registry" / registration_socket_name(facts.DRIVER_NAME)
        dev = Device(name="gpu-0", device_type="gpu", uuid="GPU-0", attributes={}, capacity={})
        self.board = DeviceHealthBoard(NODE, [dev])
        self.dra = unix_server(self.dra_socket, max_workers=16, name="dra")
        add_dra_servicer(self.dra, DRAServicer(claims=self.claims, state=self.state, metrics=self.metrics))
        add_resource_health_servicer(self.dra, ResourceHealthServicer(self.board, resend_interval=30))
        self.reg = unix_server(self.reg_socket, max_workers=2, name="reg")
        add_registration_servicer(
            self.reg,
            RegistrationServicer(
                driver_name=facts.DRIVER_NAME, dra_endpoint=self.dra_socket, status=self.status
            ),
        )
        self.dra.start()
        self.reg.start()

    def stop(self) -> None:
        self.board.close()
        self.reg.stop(0).wait()
        self.dra.stop(0).wait()


@pytest.fixture
def servers(short_tmp: Path) -> Iterator[Servers]:
    s = Servers(short_tmp)
    yield s
    s.stop()


@pytest.fixture
def kubelet(servers: Servers) -> Iterator[Kubelet]:
    k = Kubelet(servers.reg_socket)
    yield k
    k.close()


def test_registration_handshake_advertises_dra_plugin(servers: Servers, kubelet: Kubelet) -> None:
    info = kubelet.register()
    assert info.type == "DRAPlugin"
    assert info.name == facts.DRIVER_NAME
    assert info.endpoint == str(servers.dra_socket)
    assert Path(info.endpoint).is_absolute()
    # as the Go helper (k8s.io/dynamic-resource-allocation 0.37) lists them: DRA, then health, newest first
    assert list(info.supported_versions) == [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    ]
    assert kubelet.version == "v1"
    snap = servers.status.snapshot()
    assert snap.registered is True and snap.error == ""


def test_failed_registration_is_answered_with_an_error(servers: Servers, kubelet: Kubelet) -> None:
    kubelet.register(accept=False)
    assert servers.status.snapshot().registered is None
    with pytest.raises(grpc.RpcError) as err:
        kubelet.notify(False, "no handler registered for plugin type")
    assert err.value.code() == grpc.StatusCode.UNKNOWN
    assert "no handler registered" in err.value.details()
    snap = servers.status.snapshot()
    assert snap.registered is False and "no handler" in snap.error


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_prepare_and_unprepare_over_both_versions(servers: Servers, kubelet: Kubelet, version: str) -> None:
    kubelet.register()
    servers.claims.add(allocated_claim("ns", "c1", "uid-1", ("gpu", "gpu-0"), ("fa/sub", "gpu-1")))
    result = kubelet.prepare([("ns", "c1", "uid-1")], version=version)
    assert result == {
        "uid-1": {
            "error": "",
            "devices": [
                {
                    "request_names": ["gpu"],
                    "pool_name": NODE,
                    "device_name": "gpu-0",
                    "cdi_device_ids": [f"{facts.CDI_VENDOR}/{facts.CDI_CLASS_DEVICE}=gpu-0"],
                },
                {
                    "request_names": ["fa"],
                    "pool_name": NODE,
                    "device_name": "gpu-1",
                    "cdi_device_ids": [f"{facts.CDI_VENDOR}/{facts.CDI_CLASS_DEVICE}=gpu-1"],
                },
            ],
        }
    }
    assert "uid-1" in servers.state.prepared
    assert kubelet.unprepare([("ns", "c1", "uid-1")], version=version) == {"uid-1": ""}
    assert servers.state.prepared == {}
    # Unknown claims unprepare successfully; every requested claim gets an entry.
    assert kubelet.unprepare([("ns", "gone", "uid-x"), ("ns", "c1", "uid-1")], version=version) == {
        "uid-x": "",
        "uid-1": "",
    }


def test_bad_claims_fail_alone_while_others_succeed(servers: Servers, kubelet: Kubelet) -> None:
    kubelet.register()
    servers.claims.add(allocated_claim("ns", "good", "uid-good", ("gpu", "gpu-2")))
    servers.claims.add(allocated_claim("ns", "elsewhere", "uid-else", ("gpu", "gpu-99")))
    servers.claims.add(allocated_claim("ns", "explodes", "uid-boom", ("gpu", "gpu-4")))
    servers.state.explode_on.add("explodes")
    result = kubelet.prepare(
        [
            ("ns", "good", "uid-good"),
            ("ns", "missing", "uid-missing"),
            ("ns", "elsewhere", "uid-else"),
            ("ns", "explodes", "uid-boom"),
        ]
    )
    # UID and allocation checks belong to the device state (tests/driver/plugin/test_plugin.py covers them).
    assert set(result) == {"uid-good", "uid-missing", "uid-else", "uid-boom"}
    assert result["uid-good"]["error"] == ""
    assert [d["device_name"] for d in result["uid-good"]["devices"]] == ["gpu-2"]
    assert result["uid-missing"]["error"] == "claim ns/missing not found"
    assert result["uid-else"]["error"] == "device gpu-99 is not on this node"
    assert "internal error" in result["uid-boom"]["error"] and "boom" in result["uid-boom"]["error"]
    # The process survived and keeps serving.
    assert kubelet.prepare([("ns", "good", "uid-good")])["uid-good"]["error"] == ""
    registry = servers.metrics.registry
    errors = registry.get_sample_value("vke_gpu_dra_prepare_claims_total", {"result": "error"})
    assert errors == 3


UNUSABLE = [
    (("ns", "c", ""), r"^claim uid '' is not usable: a claim's uid is 1-128 letters, digits and '-'"),
    (("ns", "c", "."), r"^claim uid '\.' is not usable: "),
    (("ns", "c", ".."), r"^claim uid '\.\.' is not usable: "),
    (("ns", "c", "a/b"), r"^claim uid 'a/b' is not usable: "),
    (
        ("", "c", "uid-1"),
        r"^claim namespace '' \(claim uid uid-1\) is not usable: a namespace is a DNS label",
    ),
    (("Bad_NS", "c", "uid-2"), r"^claim namespace 'Bad_NS' \(claim uid uid-2\) is not usable: "),
    (
        ("ns", "", "uid-3"),
        r"^claim name '' \(claim uid uid-3\) is not usable: a claim's name is a DNS subdomain",
    ),
    (("ns", "..", "uid-4"), r"^claim name '\.\.' \(claim uid uid-4\) is not usable: "),
]


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_an_unusable_claim_reference_gets_one_clear_error_in_both_calls_and_reaches_nothing(
    servers: Servers, kubelet: Kubelet, version: str, caplog: pytest.LogCaptureFixture
) -> None:
    kubelet.register()
    servers.claims.add(allocated_claim("ns", "good", "uid-good", ("gpu", "gpu-2")))
    claims = [ref for ref, _ in UNUSABLE]
    prepared = kubelet.prepare([*claims, ("ns", "good", "uid-good")], version=version)
    unprepared = kubelet.unprepare(claims, version=version)
    for (_, _, uid), message in UNUSABLE:
        assert re.search(message, prepared[uid]["error"]), prepared[uid]["error"]
        assert unprepared[uid] == prepared[uid]["error"]
    assert prepared["uid-good"]["error"] == ""
    assert len(servers.state.deadlines) == 1  # the device state saw the usable claim only
    assert not [r for r in caplog.records if r.exc_info]  # no traceback
    registry = servers.metrics.registry
    for rpc in ("prepare", "unprepare"):
        errors = registry.get_sample_value(f"vke_gpu_dra_{rpc}_claims_total", {"result": "error"})
        assert errors == len(UNUSABLE)


def claim_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, int, str, str | None]]:
    """(message, level, claim, error field) of each per-claim line the DRA service logged."""
    return [
        (r.getMessage(), r.levelno, r.fields["claim"], r.fields.get("error"))  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name.startswith("vke_gpu_dra") and "claim" in getattr(r, "fields", {})
    ]


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_each_rpc_answers_and_logs_every_claim_by_itself(
    servers: Servers, kubelet: Kubelet, caplog: pytest.LogCaptureFixture, version: str
) -> None:
    """Both RPCs: a ClaimError is the answer as is, anything else an internal error naming the claim."""
    caplog.set_level(logging.INFO)
    kubelet.register()
    servers.claims.add(allocated_claim("ns", "good", "uid-good", ("gpu", "gpu-2")))
    servers.claims.add(allocated_claim("ns", "explodes", "uid-boom", ("gpu", "gpu-4")))
    servers.state.explode_on.add("explodes")
    prepared = kubelet.prepare(
        [("ns", "missing", "uid-missing"), ("ns", "explodes", "uid-boom"), ("ns", "good", "uid-good")],
        version=version,
    )
    assert {uid: entry["error"] for uid, entry in prepared.items()} == {
        "uid-missing": "claim ns/missing not found",
        "uid-boom": "internal error preparing claim ns/explodes: boom",
        "uid-good": "",
    }
    assert claim_lines(caplog) == [
        ("prepare failed", logging.WARNING, "ns/missing", "claim ns/missing not found"),
        ("unexpected error while preparing", logging.ERROR, "ns/explodes", None),
        ("prepared claim", logging.INFO, "ns/good", None),
    ]
    caplog.clear()
    servers.state.unprepare_errors = {
        "held": ClaimError("claim ns/held: busy"),
        "broken": OSError("disk gone"),
    }
    unprepared = kubelet.unprepare(
        [("ns", "held", "uid-held"), ("ns", "broken", "uid-broken"), ("ns", "good", "uid-good")],
        version=version,
    )
    assert unprepared == {
        "uid-held": "claim ns/held: busy",
        "uid-broken": "internal error unpreparing claim ns/broken: disk gone",
        "uid-good": "",
    }
    assert claim_lines(caplog) == [
        ("unprepare failed", logging.WARNING, "ns/held", "claim ns/held: busy"),
        ("unexpected error while unpreparing", logging.ERROR, "ns/broken", None),
        ("unprepared claim", logging.INFO, "ns/good", None),
    ]
    registry = servers.metrics.registry
    counts = {
        (family, result): registry.get_sample_value(f"vke_gpu_dra_{family}_claims_total", {"result": result})
        for family in ("prepare", "unprepare")
        for result in ("success", "error")
    }
    assert counts == {
        ("prepare", "success"): 1,
        ("prepare", "error"): 2,
        ("unprepare", "success"): 1,
        ("unprepare", "error"): 2,
    }


def test_a_claim_named_twice_in_one_call_is_answered_once(servers: Servers, kubelet: Kubelet) -> None:
    kubelet.register()
    servers.claims.add(allocated_claim("ns", "c1", "uid-1", ("gpu", "gpu-0")))
    twice = [("ns", "c1", "uid-1"), ("ns", "c1", "uid-1")]
    result = kubelet.prepare(twice)
    assert list(result) == ["uid-1"]
    assert [d["device_name"] for d in result["uid-1"]["devices"]] == ["gpu-0"]
    assert (
        servers.metrics.registry.get_sample_value("vke_gpu_dra_prepare_claims_total", {"result": "success"})
        == 1
    )
    assert kubelet.unprepare(twice) == {"uid-1": ""}
    assert (
        servers.metrics.registry.get_sample_value("vke_gpu_dra_unprepare_claims_total", {"result": "success"})
        == 1
    )


def test_calls_for_different_pods_overlap(servers: Servers, kubelet: Kubelet) -> None:
    kubelet.register()
    n = 8
    servers.state.barrier = threading.Barrier(n)  # breaks unless all n calls run at the same time
    for i in range(n):
        servers.claims.add(allocated_claim("ns", f"c{i}", f"uid-{i}", ("gpu", f"gpu-{i}")))
    results: dict[int, dict] = {}

    def call(i: int) -> None:
        results[i] = kubelet.prepare([("ns", f"c{i}", f"uid-{i}")])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert all(results[i][f"uid-{i}"]["error"] == "" for i in range(n)), results
    assert len(servers.state.prepared) == n


def test_the_device_state_gets_the_calls_deadline(servers: Servers, kubelet: Kubelet) -> None:
    """The node lock's wait is bounded by kubelet's deadline: the state gets it with every claim."""
    kubelet.register()
    servers.claims.add(allocated_claim("ns", "c1", "uid-1", ("gpu", "gpu-0")))
    before = time.monotonic()
    assert kubelet.prepare([("ns", "c1", "uid-1")])["uid-1"]["error"] == ""
    assert kubelet.unprepare([("ns", "c1", "uid-1")]) == {"uid-1": ""}
    after = time.monotonic()
    assert len(servers.state.deadlines) == 2
    for deadline in servers.state.deadlines:  # the grpc-timeout header rounds up: allow 1 s
        assert deadline is not None and before + KUBELET_TIMEOUT / 2 < deadline <= after + KUBELET_TIMEOUT + 1


def test_empty_prepare_answers_without_touching_claims(servers: Servers, kubelet: Kubelet) -> None:
    kubelet.register()
    assert kubelet.prepare([], version="v1beta1") == {}


def test_health_stream_sends_full_list_and_changes(servers: Servers, kubelet: Kubelet) -> None:
    kubelet.register()
    stream = kubelet.watch_health()
    first = next(stream)
    got = [(d.device.pool_name, d.device.device_name, d.health) for d in first.devices]
    assert got == [(NODE, "gpu-0", 1)]
    assert first.devices[0].last_updated_time > 0
    assert servers.board.set_health("gpu-0", False)
    second = next(stream)
    assert [d.health for d in second.devices] == [2]
    stream.cancel()


def test_health_stream_reports_an_unmonitored_device_as_unknown(servers: Servers, kubelet: Kubelet) -> None:
    kubelet.register()
    stream = kubelet.watch_health()
    next(stream)
    assert servers.board.set_status("gpu-0", "unknown", "unmonitored")
    assert not servers.board.set_status("gpu-0", "unknown", "unmonitored")  # no change, no message
    assert [d.health for d in next(stream).devices] == [0]  # UNKNOWN
    entry = servers.board.entry("gpu-0")
    assert entry is not None and entry.healthy and entry.reason == "unmonitored"
    stream.cancel()


def test_request_names_strip_subrequests() -> None:
    assert request_names(["a/x", "b", "a/y"]) == ("a", "b")


def test_check_claim_messages() -> None:
    ref = ClaimRef("ns", "c", "u1")
    with pytest.raises(ClaimError, match="claim ns/c not found"):
        check_claim(ref, None)
    claim = allocated_claim("ns", "c", "u1", ("r", "gpu-0"))
    assert check_claim(ref, claim) is claim


def test_prepare_socket_path_refuses_non_sockets_and_long_paths(short_tmp: Path) -> None:
    regular = short_tmp / "file.sock"
    regular.write_text("not a socket")
    with pytest.raises(SocketError, match="not a socket"):
        prepare_socket_path(regular)
    assert regular.exists()
    with pytest.raises(SocketError, match="longer than"):
        prepare_socket_path(short_tmp / ("x" * 120))


def test_a_socket_path_of_the_longest_length_binds_and_serves(short_tmp: Path) -> None:
    path = short_tmp / ("s" * (MAX_SOCKET_PATH_BYTES - len(str(short_tmp)) - 1))
    assert len(str(path)) == MAX_SOCKET_PATH_BYTES
    server = unix_server(path, max_workers=1, name="t")
    add_registration_servicer(
        server,
        RegistrationServicer(
            driver_name=facts.DRIVER_NAME, dra_endpoint=short_tmp / "dra.sock", status=RegistrationStatus()
        ),
    )
    server.start()
    kubelet = Kubelet(path)
    try:
        assert kubelet.register(accept=False).name == facts.DRIVER_NAME
    finally:
        kubelet.close()
        server.stop(0).wait()


def test_one_server_serves_several_sockets_made_in_order(short_tmp: Path) -> None:
    """The plugin's one server for kubelet: each socket answers, and the first path is bound first (the DRA
    socket exists before kubelet sees the registration socket)."""
    first, second = short_tmp / "dra.sock", short_tmp / "reg.sock"
    server = unix_server(first, second, max_workers=2, name="t")
    assert first.stat().st_ctime_ns <= second.stat().st_ctime_ns
    add_registration_servicer(
        server,
        RegistrationServicer(driver_name=facts.DRIVER_NAME, dra_endpoint=first, status=RegistrationStatus()),
    )
    server.start()
    try:
        for path in (first, second):
            kubelet = Kubelet(path)
            try:
                assert kubelet.register(accept=False).name == facts.DRIVER_NAME
            finally:
                kubelet.close()
    finally:
        server.stop(0).wait()
    with pytest.raises(SocketError, match="at least one unix socket path"):
        unix_server(max_workers=1, name="t")


def test_stale_socket_is_replaced(short_tmp: Path) -> None:
    path = short_tmp / "a" / "dra.sock"
    first = unix_server(path, max_workers=1, name="t")
    first.start()
    first.stop(0).wait()
    import socket

    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))  # a stale socket file left behind by a crashed process
    s.close()
    assert path.exists()
    second = unix_server(path, max_workers=1, name="t")
    second.start()
    assert path.exists()
    second.stop(0).wait()


class _StreamContext:
    def __init__(self) -> None:
        self.active = True
        self.callbacks: list = []

    def is_active(self) -> bool:
        return self.active

    def add_callback(self, callback) -> bool:
        self.callbacks.append(callback)
        return True


def test_health_stream_resends_periodically_and_ends_on_close() -> None:
    dev = Device(name="gpu-0", device_type="gpu", uuid="GPU-0", attributes={}, capacity={}, healthy=False)
    board = DeviceHealthBoard(NODE, [dev])
    servicer = ResourceHealthServicer(board, resend_interval=0.01)
    stream = servicer.NodeWatchResources(None, _StreamContext())  # type: ignore[arg-type]
    first, second = next(stream), next(stream)  # the second one without any change: the periodic resend
    assert first == second and [d.health for d in first.devices] == [2]
    board.close()
    assert list(stream) == []
