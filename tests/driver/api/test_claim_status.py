"""Prepared claims' `status.devices` (KEP-4817): the entries computed from a prepare (`claim_status`), the
background publisher that applies them (`status_publisher`), and the plugin writing them through the fake
API server when kubelet prepares and unprepares a claim."""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from vke_gpu_dra import claim_status
from vke_gpu_dra.claim_status import (
    DATA_GPU_UUID,
    DATA_MIG_UUID,
    DATA_SHARING,
    FIELD_MANAGER,
    DeviceFacts,
    apply_body,
    device_facts,
    sharing_strategies,
    status_entries,
)
from vke_gpu_dra.kubeapi import KubeAPI, KubeError
from vke_gpu_dra.metrics import Metrics
from vke_gpu_dra.plugin import Plugin
from vke_gpu_dra.state import PreparedClaim
from vke_gpu_dra.status_publisher import ClaimStatusPublisher, StatusReporting
from vke_gpu_dra_core import facts, featuregates
from vke_gpu_dra_core.device_model import ClaimRef, PreparedDevice
from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer
from vke_gpu_dra_testing.kubelet_client import Kubelet
from vke_gpu_dra_testing.plugin_env import NODE, claim, plugin_config

from tests.driver.devices import full_gpu, mig_device

from .k8s_protobuf import CONFIG, body, claim_message, device_status, devices_json, parse

AT = datetime(2026, 12, 2, 10, 30, 15, 999, tzinfo=UTC)
GPU0 = full_gpu(0, "GPU-0000", {facts.ATTR_PRODUCT_NAME: "NVIDIA A10"})
MIG = mig_device(1, "MIG-1111", {facts.ATTR_PARENT_UUID: "GPU-1111"})
REF = ClaimRef(namespace="default", name="c1", uid="uid-1")


def prepared(
    device: str, *, share: str | None = None, requests: tuple[str, ...] = ("gpu",)
) -> PreparedDevice:
    return PreparedDevice(requests, NODE, device, (f"k8s.gpu.nvidia.com/claim=uid-1-{device}",), share)


def shared_claim(strategy: str) -> dict[str, Any]:
    obj = claim("c1", "uid-1", "gpu-0")
    params = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": strategy},
    }
    obj["status"]["allocation"]["devices"]["config"] = [
        {
            "source": "FromClaim",
            "requests": ["gpu"],
            "opaque": {"driver": facts.DRIVER_NAME, "parameters": params},
        }
    ]
    return obj


# --- the entries (pure) ---


def test_a_prepared_gpu_gets_ready_and_names_its_physical_gpu() -> None:
    facts_: dict[tuple[str, str | None], DeviceFacts] = {
        ("gpu-0", None): device_facts(GPU0, sharing="TimeSlicing")
    }
    [entry] = status_entries(facts.DRIVER_NAME, [prepared("gpu-0")], facts_, at=AT, generation=3)
    assert {k: entry[k] for k in ("driver", "pool", "device")} == {
        "driver": facts.DRIVER_NAME,
        "pool": NODE,
        "device": "gpu-0",
    }
    assert "shareID" not in entry
    assert entry["conditions"] == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Prepared",
            "message": "prepared on the node: CDI devices ready for the claim's containers",
            "lastTransitionTime": "2026-12-02T10:30:15Z",
            "observedGeneration": 3,
        }
    ]
    assert entry["data"] == {
        "type": "gpu",
        "gpuUUID": "GPU-0000",
        "productName": "NVIDIA A10",
        "sharingStrategy": "TimeSlicing",
        "requests": ["gpu"],
    }


def test_a_mig_device_names_its_parent_gpu_and_its_own_uuid() -> None:
    data = claim_status.data_of(device_facts(MIG), ["gpu"])
    assert data[DATA_GPU_UUID] == "GPU-1111" and data[DATA_MIG_UUID] == "MIG-1111"
    assert data["type"] == facts.DEVICE_TYPE_MIG and DATA_SHARING not in data
    # a dynamic MIG placement is published without a UUID: prepare's MIG device names it
    placement = mig_device(1, "", {facts.ATTR_PARENT_UUID: "GPU-1111"})
    assert DATA_MIG_UUID not in claim_status.data_of(device_facts(placement), [])
    assert device_facts(placement, mig_uuid="MIG-new").mig_uuid == "MIG-new"


def test_a_consumable_share_is_keyed_by_its_share_id_and_repeats_are_written_once() -> None:
    share = "6f1c2e1e-5a43-4c1b-9c1e-111111111111"
    devices = [prepared("gpu-0", share=share), prepared("gpu-0", share=share), prepared("gpu-1")]
    entries = status_entries(facts.DRIVER_NAME, devices, {}, at=AT)
    assert [(e["device"], e.get("shareID")) for e in entries] == [("gpu-0", share), ("gpu-1", None)]
    assert all("data" not in e for e in entries), "a device without facts gets only the condition"
    assert all("observedGeneration" not in e["conditions"][0] for e in entries)


def test_data_larger_than_the_api_allows_is_refused_naming_the_device() -> None:
    big = DeviceFacts("gpu", gpu_uuid="GPU-0", product="x" * (11 * 1024))
    with pytest.raises(ValueError, match=r"data of device gpu-0 is \d+ bytes; the API allows at most 10240"):
        status_entries(facts.DRIVER_NAME, [prepared("gpu-0")], {("gpu-0", None): big}, at=AT)


def test_the_apply_body_names_the_claim_with_its_uid_and_only_our_entries() -> None:
    body = apply_body(REF, [{"driver": facts.DRIVER_NAME, "pool": NODE, "device": "gpu-0"}])
    assert body["apiVersion"] == "resource.k8s.io/v1" and body["kind"] == "ResourceClaim"
    assert body["metadata"] == {"namespace": "default", "name": "c1", "uid": "uid-1"}
    assert [e["device"] for e in body["status"]["devices"]] == ["gpu-0"]
    assert apply_body(REF, [])["status"] == {"devices": []}


def test_sharing_strategy_comes_from_the_claims_config_as_prepare_reads_it() -> None:
    gates = featuregates.parse("TimeSlicingSettings=true,MPSSupport=true")
    devices = {"gpu-0": GPU0}
    kwargs: dict[str, Any] = {"driver_name": facts.DRIVER_NAME, "pool_name": NODE, "devices": devices}
    assert sharing_strategies(REF, shared_claim("MPS"), gates=gates, **kwargs) == {("gpu-0", None): "MPS"}
    off = featuregates.FeatureGates()
    assert sharing_strategies(REF, claim("c1", "uid-1", "gpu-0"), gates=off, **kwargs) == {}
    # a claim prepare would refuse (MPS with its gate off) names no strategy rather than failing
    assert sharing_strategies(REF, shared_claim("MPS"), gates=off, **kwargs) == {}


# --- the publisher (a recording writer, no HTTP) ---


class Writer:
    """Records applies; answers with the claim as a server that keeps (or drops) the entries would."""

    def __init__(self, *, keeps: bool = True, error: KubeError | None = None) -> None:
        self.calls: list[tuple[str, str, dict[str, Any], str, float]] = []
        self.keeps = keeps
        self.error = error
        self.gate = threading.Event()
        self.gate.set()
        #: The claim a protobuf read answers (None: gone), and the reads and updates made.
        self.stored: bytes | None = None
        self.reads: list[tuple[str, str]] = []
        self.updates: list[tuple[str, bytes, str]] = []

    def apply_claim_status(
        self, namespace: str, name: str, body: dict[str, Any], *, field_manager: str, timeout: float
    ) -> dict[str, Any]:
        self.gate.wait(10)
        self.calls.append((namespace, name, body, field_manager, timeout))
        if self.error is not None:
            raise self.error
        stored = claim(name, body["metadata"]["uid"], "gpu-0")
        if self.keeps:
            stored["status"]["devices"] = body["status"]["devices"]
        return stored

    def get_resource_claim_wire(self, namespace: str, name: str, timeout: float) -> bytes | None:
        self.reads.append((namespace, name))
        return self.stored

    def update_claim_status_wire(
        self, namespace: str, name: str, body: bytes, *, field_manager: str, timeout: float
    ) -> dict[str, Any]:
        self.updates.append((name, body, field_manager))
        updated = claim(name, "uid-1", "gpu-0")
        updated["status"]["devices"] = devices_json(parse(body))
        return updated


def publisher(writer: Writer, metrics: Metrics | None = None, **kwargs: Any) -> ClaimStatusPublisher:
    kwargs.setdefault("settle", 0.0)  # written at once unless a test says otherwise
    pub = ClaimStatusPublisher(
        writer,
        driver_name=facts.DRIVER_NAME,
        pool_name=NODE,
        devices=[GPU0, full_gpu(1, "GPU-0001")],
        gates=featuregates.FeatureGates(),
        metrics=metrics,
        clock=lambda: AT,
        **kwargs,
    )
    pub.start()
    return pub


def counted(metrics: Metrics, result: str) -> float:
    value = metrics.registry.get_sample_value("vke_gpu_dra_claim_status_writes_total", {"result": result})
    return value or 0.0


def test_prepared_writes_ready_entries_in_the_background_with_a_timeout() -> None:
    writer, metrics = Writer(), Metrics()
    pub = publisher(writer, metrics, timeout=7.0)
    try:
        writer.gate.clear()  # the API server is slow: the caller does not wait for it
        pub.prepared(REF, claim("c1", "uid-1", "gpu-0"), [prepared("gpu-0")])
        assert not writer.calls
        writer.gate.set()
        assert pub.wait_idle(10)
    finally:
        pub.stop()
    [(namespace, name, body, manager, timeout)] = writer.calls
    assert (namespace, name, manager, timeout) == ("default", "c1", FIELD_MANAGER, 7.0)
    [entry] = body["status"]["devices"]
    assert entry["data"][DATA_GPU_UUID] == "GPU-0000" and entry["conditions"][0]["type"] == "Ready"
    assert pub.served is True and counted(metrics, "success") == 1


def test_a_claim_unprepared_before_its_entries_were_written_gets_no_write_at_all() -> None:
    writer, metrics = Writer(), Metrics()
    writer.gate.clear()
    pub = publisher(writer, metrics)
    try:
        other = ClaimRef(namespace="default", name="c0", uid="uid-0")
        pub.prepared(other, claim("c0", "uid-0", "gpu-1"), [prepared("gpu-1")])  # taken by the worker
        assert wait_for(lambda: pub._busy)
        pub.prepared(REF, claim("c1", "uid-1", "gpu-0"), [prepared("gpu-0")])
        pub.unprepared(REF)  # nothing of c1 was written: nothing to remove
        writer.gate.set()
        assert pub.wait_idle(10)
    finally:
        pub.stop()
    assert [c[1] for c in writer.calls] == ["c0"]
    assert counted(metrics, "cancelled") == 1


def test_entries_written_are_removed_at_unprepare_and_a_prepare_settles_first() -> None:
    writer, metrics = Writer(), Metrics()
    pub = publisher(writer, metrics, settle=0.3)
    try:
        pub.prepared(REF, claim("c1", "uid-1", "gpu-0"), [prepared("gpu-0")])
        time.sleep(0.1)
        assert writer.calls == []  # still settling
        assert pub.wait_idle(10)
        assert [len(c[2]["status"]["devices"]) for c in writer.calls] == [1]
        pub.unprepared(REF)  # its entries are on the server: removed
        assert pub.wait_idle(10)
        # a new process does not know what an earlier one wrote: its unprepare removes them too
        fresh = publisher(writer, metrics)
        try:
            fresh.unprepared(REF)
            assert fresh.wait_idle(10)
        finally:
            fresh.stop()
    finally:
        pub.stop()
    assert [len(c[2]["status"]["devices"]) for c in writer.calls] == [1, 0, 0]


def test_a_full_queue_drops_new_claims_and_counts_them() -> None:
    writer, metrics = Writer(), Metrics()
    writer.gate.clear()
    pub = publisher(writer, metrics, max_pending=1)
    try:
        refs = [ClaimRef(namespace="default", name=f"c{i}", uid=f"uid-{i}") for i in range(3)]
        pub.prepared(refs[0], claim("c0", "uid-0", "gpu-0"), [prepared("gpu-0")])
        assert wait_for(lambda: pub._busy)
        pub.prepared(refs[1], claim("c1", "uid-1", "gpu-0"), [prepared("gpu-0")])  # queued
        pub.prepared(refs[2], claim("c2", "uid-2", "gpu-0"), [prepared("gpu-0")])  # dropped
        pub.unprepared(refs[0])  # c0 is being written: its removal needs room, and there is none
        writer.gate.set()
        assert pub.wait_idle(10)
    finally:
        pub.stop()
    assert [c[1] for c in writer.calls] == ["c0", "c1"]
    assert all(c[2]["status"]["devices"] for c in writer.calls)
    assert counted(metrics, "dropped") == 2


def test_a_server_that_drops_the_field_is_said_once_and_gets_no_more_writes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    writer, metrics = Writer(keeps=False), Metrics()
    pub = publisher(writer, metrics)
    try:
        pub.prepared(REF, claim("c1", "uid-1", "gpu-0"), [prepared("gpu-0")])
        assert pub.wait_idle(10)
        pub.prepared(REF, claim("c1", "uid-1", "gpu-0"), [prepared("gpu-0")])
        pub.unprepared(REF)
        assert pub.wait_idle(10)
    finally:
        pub.stop()
    assert len(writer.calls) == 1 and pub.served is False
    said = [r for r in caplog.records if "does not keep ResourceClaim status.devices" in r.getMessage()]
    assert len(said) == 1
    assert counted(metrics, "unsupported") == 1


@pytest.mark.parametrize(
    ("error", "result"),
    [
        (KubeError(404, "NotFound", "gone"), "gone"),
        (KubeError(422, "Invalid", 'metadata.uid: Invalid value: "u": field is immutable'), "gone"),
        (KubeError(409, "Conflict", "conflict"), "api-error"),
        (KubeError(403, "Forbidden", "denied"), "forbidden"),
        (KubeError(0, "Timeout", "no answer"), "timeout"),
        (KubeError(422, "Invalid", "must be an allocated device in the claim"), "api-error"),
    ],
)
def test_a_failed_write_is_counted_by_reason_and_not_retried(error: KubeError, result: str) -> None:
    writer, metrics = Writer(error=error), Metrics()
    pub = publisher(writer, metrics)
    try:
        pub.prepared(REF, claim("c1", "uid-1", "gpu-0"), [prepared("gpu-0")])
        assert pub.wait_idle(10)
    finally:
        pub.stop()
    assert len(writer.calls) == 1
    assert counted(metrics, result) == 1 and counted(metrics, "success") == 0


def test_the_same_failure_is_warned_about_once_until_a_write_succeeds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="vke_gpu_dra.status_publisher")
    writer = Writer(error=KubeError(403, "Forbidden", "denied"))
    pub = publisher(writer)
    try:
        for i in range(3):
            pub.prepared(
                ClaimRef(namespace="default", name=f"c{i}", uid=f"uid-{i}"),
                claim(f"c{i}", f"uid-{i}", "gpu-0"),
                [prepared("gpu-0")],
            )
            assert pub.wait_idle(10)
        writer.error = None
        pub.unprepared(REF)
        assert pub.wait_idle(10)
    finally:
        pub.stop()
    messages = [r.getMessage() for r in caplog.records if r.name == "vke_gpu_dra.status_publisher"]
    assert messages.count("cannot write claim status; it is not retried") == 1
    assert "claim status writes succeed again" in messages


def test_stop_lets_queued_writes_finish_within_its_grace() -> None:
    writer = Writer()
    pub = publisher(writer)
    pub.prepared(REF, claim("c1", "uid-1", "gpu-0"), [prepared("gpu-0")])
    pub.stop(grace=5)
    assert [c[1] for c in writer.calls] == ["c1"]


def test_status_reporting_hands_over_only_what_the_state_answered() -> None:
    class State:
        def prepare(
            self, ref: ClaimRef, claim: Any, *, deadline: float | None = None
        ) -> list[PreparedDevice]:
            return self.prepare_claim(ref, claim, deadline=deadline).devices

        def prepare_claim(self, ref: ClaimRef, claim: Any, *, deadline: float | None = None) -> PreparedClaim:
            if ref.name == "bad":
                raise RuntimeError("refused")
            return PreparedClaim([prepared("gpu-0")], {})

        def unprepare(self, ref: ClaimRef, *, deadline: float | None = None) -> None:
            return None

    writer = Writer()
    pub = publisher(writer)
    reporting = StatusReporting(State(), pub)
    try:
        assert reporting.prepare(REF, claim("c1", "uid-1", "gpu-0")) == [prepared("gpu-0")]
        with pytest.raises(RuntimeError):
            reporting.prepare(ClaimRef(namespace="default", name="bad", uid="u"), {})
        assert pub.wait_idle(10)
        reporting.unprepare(REF)
        assert pub.wait_idle(10)
    finally:
        pub.stop()
    assert [(c[1], len(c[2]["status"]["devices"])) for c in writer.calls] == [("c1", 1), ("c1", 0)]


def test_max_pending_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_pending must be at least 1, got 0"):
        ClaimStatusPublisher(
            Writer(),
            driver_name="d",
            pool_name="p",
            devices=[],
            gates=featuregates.FeatureGates(),
            max_pending=0,
        )


def wait_for(predicate: Any, timeout: float = 10.0) -> bool:
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return True
        done.wait(0.01)
    return bool(predicate())


# --- through the fake API server ---


def test_the_kube_api_applies_status_by_key_beside_another_drivers_entries(
    fake_api: FakeAPIServer, kube: KubeAPI
) -> None:
    obj = claim("c1", "uid-1", "gpu-0")
    obj["status"]["allocation"]["devices"]["results"].append(
        {"request": "nic", "driver": "nic.example.com", "pool": NODE, "device": "eth0"}
    )
    fake_api.add_claim(obj)
    theirs = {"driver": "nic.example.com", "pool": NODE, "device": "eth0", "data": {"mac": "x"}}
    kube.apply_claim_status(
        "default", "c1", apply_body(REF, [theirs]), field_manager="nic.example.com", timeout=5
    )
    ours = status_entries(facts.DRIVER_NAME, [prepared("gpu-0")], {}, at=AT)
    stored = kube.apply_claim_status(
        "default", "c1", apply_body(REF, ours), field_manager=FIELD_MANAGER, timeout=5
    )
    assert {e["driver"] for e in stored["status"]["devices"]} == {"nic.example.com", facts.DRIVER_NAME}
    stored = kube.apply_claim_status(
        "default", "c1", apply_body(REF, []), field_manager=FIELD_MANAGER, timeout=5
    )
    assert stored["status"]["devices"] == [theirs]
    # a claim re-created under the name is not written
    with pytest.raises(KubeError) as replaced:
        kube.apply_claim_status(
            "default",
            "c1",
            apply_body(ClaimRef(namespace="default", name="c1", uid="uid-old"), ours),
            field_manager=FIELD_MANAGER,
            timeout=5,
        )
    assert replaced.value.status == 422 and "metadata.uid" in replaced.value.message
    method, url = fake_api.requests[-1]
    assert method == "PATCH"
    assert url == (
        "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c1/status"
        f"?fieldManager={FIELD_MANAGER}&force=true"
    )


@pytest.mark.parametrize("stored", ["compact", "as-a-python-client-sent-it"])
def test_the_plugin_reports_a_prepared_claims_devices_and_removes_them_at_unprepare(
    short_tmp: Path, fake_api: FakeAPIServer, stored: str
) -> None:
    """Also for a claim whose device config was stored with whitespace: the apply is refused, and the entries
    are written and removed by updates of the claim in protobuf form, its config's bytes kept."""
    fake_api.add_node(NODE)
    c1 = claim("c1", "uid-1", "gpu-1")
    parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}
    c1["status"]["allocation"]["devices"]["config"] = [
        {
            "source": "FromClaim",
            "requests": ["gpu"],
            "opaque": {"driver": facts.DRIVER_NAME, "parameters": parameters},
        }
    ]
    config_bytes = [json.dumps(parameters).encode()] if stored != "compact" else None
    fake_api.add_claim(c1, config_bytes=config_bytes)
    plugin = Plugin(plugin_config(short_tmp, gpus=2), stop_grace=5)
    plugin.start()
    kubelet = Kubelet(plugin.registration_socket)
    try:
        kubelet.register()
        assert kubelet.prepare([("default", "c1", "uid-1")])["uid-1"]["error"] == ""
        assert plugin.claim_status is not None and plugin.claim_status.wait_idle(10)
        [entry] = fake_api.claims[("default", "c1")]["status"]["devices"]
        gpu1 = next(d for d in plugin.devices if d.name == "gpu-1")
        assert (entry["driver"], entry["pool"], entry["device"]) == (facts.DRIVER_NAME, NODE, "gpu-1")
        assert entry["data"][DATA_GPU_UUID] == gpu1.uuid
        assert entry["conditions"][0]["status"] == "True"
        assert kubelet.unprepare([("default", "c1", "uid-1")]) == {"uid-1": ""}
        assert plugin.claim_status.wait_idle(10)
        assert "devices" not in fake_api.claims[("default", "c1")]["status"]
        assert fake_api.count("PUT", "/resourceclaims/c1/status") == (0 if config_bytes is None else 2)
        assert fake_api.claim_config_bytes.get(("default", "c1")) == config_bytes
    finally:
        kubelet.close()
        plugin.stop()


def test_the_plugin_prepares_as_before_where_the_server_drops_the_field(
    short_tmp: Path, fake_api: FakeAPIServer
) -> None:
    fake_api.claim_device_status = False
    fake_api.add_node(NODE)
    fake_api.add_claim(claim("c1", "uid-1", "gpu-0"))
    fake_api.add_claim(claim("c2", "uid-2", "gpu-1"))
    plugin = Plugin(plugin_config(short_tmp, gpus=2), stop_grace=5)
    plugin.start()
    kubelet = Kubelet(plugin.registration_socket)
    try:
        kubelet.register()
        assert kubelet.prepare([("default", "c1", "uid-1")])["uid-1"]["error"] == ""
        assert plugin.claim_status is not None and plugin.claim_status.wait_idle(10)
        assert kubelet.prepare([("default", "c2", "uid-2")])["uid-2"]["error"] == ""
        assert plugin.claim_status.wait_idle(10)
    finally:
        kubelet.close()
        plugin.stop()
    assert plugin.claim_status.served is False
    assert fake_api.count("PATCH") == 1, "one write shows the field is dropped; no more are made"
    assert "devices" not in fake_api.claims[("default", "c2")]["status"]
    assert json.dumps(fake_api.claims[("default", "c1")]["status"]).count("Ready") == 0


# --- the update in protobuf form where the API server refuses the apply for the stored device config ---

#: The real API server's refusal (1.37) of an apply that would rewrite the allocation.
REWRITTEN = KubeError(
    422,
    "Invalid",
    'ResourceClaim.resource.k8s.io "c1" is invalid: [status.allocation: Forbidden: changing '
    'status.allocation or status.reservedFor requires resource="resourceclaims/binding", verb="patch" '
    "permission, "
    "status.allocation: Invalid value: null: field cannot be modified once set]",
)
THEIRS = device_status("nic.example.com", NODE, "eth0")


def held(*entries: Any, uid: str = "uid-1") -> bytes:
    message = claim_message(devices=list(entries))
    message.metadata.uid = uid
    return body(message)


def test_an_apply_refused_for_the_stored_device_config_is_written_as_an_update_of_the_claim_read() -> None:
    writer, metrics = Writer(error=REWRITTEN), Metrics()
    writer.stored = held(THEIRS)
    pub = publisher(writer, metrics)
    try:
        pub.prepared(REF, claim("c1", "uid-1", "gpu-0"), [prepared("gpu-0")])
        assert pub.wait_idle(10)
        [(name, sent, manager)] = writer.updates
        assert (name, manager, writer.reads) == ("c1", FIELD_MANAGER, [("default", "c1")])
        update = parse(sent)
        assert (update.metadata.uid, update.metadata.resourceVersion) == ("uid-1", "42")  # the claim read
        [config] = update.status.allocation.devices.config
        assert config.deviceConfiguration.opaque.parameters.raw == CONFIG
        theirs, ours = devices_json(update)
        assert (theirs["driver"], ours["device"], ours["conditions"][0]["type"]) == (
            "nic.example.com",
            "gpu-0",
            "Ready",
        )
        assert ours["data"][DATA_GPU_UUID] == "GPU-0000"
        assert counted(metrics, "success") == 1 and counted(metrics, "api-error") == 0
        # the claim now holds our entry: an update removes it, with no apply first (it would be refused)
        writer.stored = sent
        pub.unprepared(REF)
        assert pub.wait_idle(10)
        assert [d["driver"] for d in devices_json(parse(writer.updates[-1][1]))] == ["nic.example.com"]
        assert counted(metrics, "success") == 2 and len(writer.calls) == 1
    finally:
        pub.stop()


def test_entries_an_earlier_update_wrote_are_removed_by_one_even_when_the_apply_succeeds() -> None:
    """The update's manager owns what it wrote, so an apply without entries leaves them."""
    writer = Writer(keeps=False)
    ours = device_status(facts.DRIVER_NAME, NODE, "gpu-1")
    writer.stored = held(THEIRS, ours)
    answered = claim("c1", "uid-1", "gpu-0")
    answered["status"]["devices"] = devices_json(claim_message(devices=[THEIRS, ours]))
    writer.apply_claim_status = lambda *a, **k: answered  # type: ignore[method-assign]
    pub = publisher(writer)
    try:
        pub.unprepared(REF)
        assert pub.wait_idle(10)
        [(_, sent, _)] = writer.updates
        assert [d["driver"] for d in devices_json(parse(sent))] == ["nic.example.com"]
    finally:
        pub.stop()


def test_a_removal_with_nothing_of_ours_held_makes_no_update() -> None:
    writer, metrics = Writer(error=REWRITTEN), Metrics()
    writer.stored = held(THEIRS)
    pub = publisher(writer, metrics)
    try:
        pub._remember(REF.uid, written=True)  # an earlier process wrote them; the claim no longer holds them
        pub.unprepared(REF)
        assert pub.wait_idle(10)
        assert writer.reads == [("default", "c1")] and writer.updates == []
        assert counted(metrics, "success") == 1
    finally:
        pub.stop()


@pytest.mark.parametrize(("stored"), [None, held(uid="another")], ids=["deleted", "re-created"])
def test_a_claim_gone_before_its_update_is_not_written(stored: bytes | None) -> None:
    writer, metrics = Writer(error=REWRITTEN), Metrics()
    writer.stored = stored
    pub = publisher(writer, metrics)
    try:
        pub.prepared(REF, claim("c1", "uid-1", "gpu-0"), [prepared("gpu-0")])
        assert pub.wait_idle(10)
        assert writer.updates == [] and counted(metrics, "gone") == 1
    finally:
        pub.stop()


def test_a_failed_or_unreadable_update_is_counted_like_a_failed_apply_and_other_refusals_make_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    writer, metrics = Writer(error=REWRITTEN), Metrics()
    writer.stored = held()

    def conflict(*_: Any, **__: Any) -> dict[str, Any]:
        raise KubeError(
            409, "Conflict", "the object has been modified; please apply your changes to the latest version"
        )

    writer.update_claim_status_wire = conflict  # type: ignore[method-assign]
    pub = publisher(writer, metrics)
    try:
        pub.prepared(REF, claim("c1", "uid-1", "gpu-0"), [prepared("gpu-0")])
        assert pub.wait_idle(10)
        assert counted(metrics, "api-error") == 1
        writer.stored = b'{"kind":"ResourceClaim"}'  # not protobuf: said, counted, not written
        with caplog.at_level(logging.DEBUG, logger="vke_gpu_dra.status_publisher"):
            pub.prepared(REF, claim("c1", "uid-1", "gpu-0"), [prepared("gpu-0")])
            assert pub.wait_idle(10)
        assert counted(metrics, "api-error") == 2
        said = [getattr(r, "fields", {}).get("error", "") for r in caplog.records]
        assert any("read as protobuf: not a Kubernetes protobuf body" in e for e in said), said
    finally:
        pub.stop()
    other = Writer(error=KubeError(422, "Invalid", "status.devices[0]: must be an allocated device"))
    pub = publisher(other)
    try:
        pub.prepared(REF, claim("c1", "uid-1", "gpu-0"), [prepared("gpu-0")])
        assert pub.wait_idle(10)
        assert other.reads == [] and other.updates == []
    finally:
        pub.stop()
