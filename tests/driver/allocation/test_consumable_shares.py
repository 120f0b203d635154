"""Kubernetes 1.36 per cluster: which ResourceSlice fields the API server keeps (the fake API server enforces
each version's rules, as the real 1.34 and 1.36 servers of tests/integration do), and consumable GPU shares
(the gate ConsumableShares: published where kept, two shares of one device prepared and unprepared apart)."""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vke_gpu_dra import cdi, cluster_features
from vke_gpu_dra.config import parse_config
from vke_gpu_dra.kubeapi import KubeAPI
from vke_gpu_dra.metrics import Metrics
from vke_gpu_dra.opaque_config import DeviceConfig, OpaqueConfigError, resolve_sharing
from vke_gpu_dra.plugin import Plugin
from vke_gpu_dra_core import consumable_shares, facts, featuregates
from vke_gpu_dra_core.device_model import Device, PreparedDevice
from vke_gpu_dra_planner import inventory
from vke_gpu_dra_testing.fake_apiserver import TOKEN, FakeAPIServer
from vke_gpu_dra_testing.kubelet_client import Kubelet
from vke_gpu_dra_testing.plugin_env import NODE, claim, plugin_args

DRIVER = facts.DRIVER_NAME
GIB = 2**30


# --- the fake API server's field rules per version ---


def _slice(devices: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "driver": DRIVER,
        "nodeName": NODE,
        "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
        **spec,
    }
    if devices is not None:
        body["devices"] = devices
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": "s-"},
        "spec": body,
    }


def _stored_device(kube: KubeAPI) -> dict[str, Any]:
    probe = cluster_features.device_probe(DRIVER, NODE)
    return dict(kube.create_slice(probe, dry_run=True)["spec"]["devices"][0])


GATED = ("taints", "allowMultipleAllocations", "bindsToNode", "bindingConditions", "bindingFailureConditions")


@pytest.mark.parametrize(("version", "gates", "kept"), [("1.34.0", set(), False), ("1.36.0", set(), True)])
def test_each_gated_device_field_is_dropped_on_1_34_and_kept_on_1_36(
    fake_api: FakeAPIServer, kube: KubeAPI, version: str, gates: set[str], kept: bool
) -> None:
    fake_api.k8s_version, fake_api.feature_gates = version, gates
    device = _stored_device(kube)
    assert {f: f in device for f in GATED} == dict.fromkeys(GATED, kept)
    assert ("requestPolicy" in device["capacity"]["memory"]) is kept
    assert device["capacity"]["memory"]["value"] == "1Gi"  # the capacity itself stays


def test_a_gate_turned_on_before_1_36_keeps_its_fields_only(fake_api: FakeAPIServer, kube: KubeAPI) -> None:
    fake_api.k8s_version, fake_api.feature_gates = "1.34.0", {"DRAConsumableCapacity"}
    device = _stored_device(kube)
    assert device["allowMultipleAllocations"] is True and "requestPolicy" in device["capacity"]["memory"]
    assert not {"taints", "bindsToNode", "bindingConditions"} & set(device)


def test_shared_counters_change_shape_after_1_34(fake_api: FakeAPIServer, kube: KubeAPI) -> None:
    fake_api.k8s_version = "1.34.0"
    beside = cluster_features.counters_probe(DRIVER, NODE, "beside-devices")
    assert "sharedCounters" not in kube.create_slice(beside, dry_run=True)["spec"]  # alpha, off: dropped
    fake_api.feature_gates = {"DRAPartitionableDevices"}
    stored = kube.create_slice(cluster_features.counters_probe(DRIVER, NODE, "beside-devices"), dry_run=True)
    assert stored["spec"]["sharedCounters"] and stored["spec"]["devices"][0]["consumesCounters"]
    fake_api.k8s_version, fake_api.feature_gates = "1.36.0", set()
    with pytest.raises(Exception, match="only one of `sharedCounters` or `devices` is allowed"):
        kube.create_slice(cluster_features.counters_probe(DRIVER, NODE, "beside-devices"), dry_run=True)
    own = kube.create_slice(cluster_features.counters_probe(DRIVER, NODE, "own-slice"), dry_run=True)
    assert own["spec"]["sharedCounters"][0]["name"] == cluster_features.PROBE_COUNTER_SET


def test_a_request_policy_needs_multiple_allocations(fake_api: FakeAPIServer, kube: KubeAPI) -> None:
    fake_api.k8s_version = "1.36.0"
    policy = {"default": "1Gi", "validRange": {"min": "1Mi", "max": "1Gi", "step": "1Mi"}}
    device = {"name": "gpu-0", "capacity": {"memory": {"value": "1Gi", "requestPolicy": policy}}}
    with pytest.raises(Exception, match=r"capacity\[memory\]\.requestPolicy: Forbidden"):
        kube.create_slice(_slice([device]), dry_run=True)


@pytest.mark.parametrize(("version", "kept"), [("1.34.0", False), ("1.35.0", False), ("1.36.0", True)])
def test_device_class_extended_resource_name_per_version(
    fake_api: FakeAPIServer, version: str, kept: bool
) -> None:
    fake_api.k8s_version = version
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": facts.DEVICE_CLASS_GPU.name},
        "spec": {"extendedResourceName": "nvidia.com/gpu"},
    }
    path = "/apis/resource.k8s.io/v1/deviceclasses"
    dry = _call(fake_api, "POST", f"{path}?dryRun=All", body)
    assert ("extendedResourceName" in dry["spec"]) is kept and fake_api.device_classes == {}
    _call(fake_api, "POST", path, body)
    stored = _call(fake_api, "GET", f"{path}/{facts.DEVICE_CLASS_GPU.name}")
    assert stored["spec"].get("extendedResourceName") == ("nvidia.com/gpu" if kept else None)


def _call(fake_api: FakeAPIServer, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(fake_api.url + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {TOKEN}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


# --- one detection of the cluster's features ---


@pytest.mark.parametrize(
    "case",
    [
        ("1.34.0", set(), set(), None),
        ("1.35.0", set(), set(), None),
        (
            "1.34.0",
            {"DRAPartitionableDevices", "DRADeviceTaints"},
            {"taints", "sharedCounters"},
            "beside-devices",
        ),
        ("1.35.0", {"DRAPartitionableDevices"}, {"sharedCounters"}, "own-slice"),
        ("1.36.0", set(), set(cluster_features.FIELDS), "own-slice"),
    ],
)
def test_detection_per_version(
    fake_api: FakeAPIServer, kube: KubeAPI, case: tuple[str, set[str], set[str], str | None]
) -> None:
    version, gates, kept, counters = case
    fake_api.k8s_version, fake_api.feature_gates = version, gates
    found = cluster_features.detect(kube, driver=DRIVER, node_name=NODE)
    assert {name for name, on in found.kept.items() if on} == kept
    assert found.shared_counters == counters
    assert found.version == tuple(int(p) for p in version.split(".")[:2])
    assert fake_api.count("POST", "dryRun=All") == cluster_features.DRY_RUNS
    assert fake_api.slices_of(NODE) == []  # dry-runs store nothing


def test_no_dry_run_before_the_fields_exist_and_none_kept_when_one_fails(
    fake_api: FakeAPIServer, kube: KubeAPI
) -> None:
    fake_api.k8s_version = "1.32.0"
    assert not any(cluster_features.detect(kube, driver=DRIVER, node_name=NODE).kept.values())
    assert fake_api.count("POST") == 0
    fake_api.k8s_version = "1.36.0"
    fake_api.inject_fault("POST", "dryRun=All", 403)
    found = cluster_features.detect(kube, driver=DRIVER, node_name=NODE)
    assert not found.taints and not found.multiple_allocations  # the device probe failed
    assert found.shared_counters == "own-slice"  # the counter probe answered


def test_the_set_is_logged_once_and_exported(caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    found = cluster_features.ClusterFeatures(version=(1, 36), taints=True, multiple_allocations=True)
    with caplog.at_level(logging.INFO, logger="vke_gpu_dra.cluster_features"):
        cluster_features.report(found, metrics)
    [record] = caplog.records
    fields = record.fields  # type: ignore[attr-defined]
    assert fields["kept"] == ["taints", "allowMultipleAllocations"]
    assert fields["dropped"] == ["bindingConditions", "sharedCounters"]
    value = metrics.registry.get_sample_value
    assert value("vke_gpu_dra_cluster_slice_field", {"field": "allowMultipleAllocations"}) == 1
    assert value("vke_gpu_dra_cluster_slice_field", {"field": "sharedCounters"}) == 0


# --- the one shape of consumable shares ---


def _gpu(memory: int) -> Device:
    return Device(
        name="gpu-0",
        device_type=facts.DEVICE_TYPE_GPU,
        uuid="GPU-0",
        attributes={},
        capacity={facts.CAPACITY_MEMORY: memory},
    )


def test_the_planner_and_the_driver_share_one_definition() -> None:
    assert inventory.memory_shares is consumable_shares.memory_shares
    assert inventory.slice_device is consumable_shares.slice_device


@pytest.mark.parametrize(
    ("mode", "memory_policy", "shares"),
    [
        ("memory", {"default": "80Gi", "validRange": {"min": "1Mi", "max": "80Gi", "step": "1Mi"}}, None),
        ("unlimited", {"default": "0", "validRange": {"min": "0", "max": "80Gi", "step": "1Mi"}}, None),
        (
            "4",
            {"default": "0", "validRange": {"min": "0", "max": "80Gi", "step": "1Mi"}},
            {
                "value": "4",
                "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": "4", "step": "1"}},
            },
        ),
    ],
)
def test_nvidia_modes(mode: str, memory_policy: dict[str, Any], shares: dict[str, Any] | None) -> None:
    entry = consumable_shares.slice_device(
        _gpu(80 * GIB + 12345), consumable_shares.shares_of(_gpu(80 * GIB + 12345), mode)
    )
    assert entry["allowMultipleAllocations"] is True
    assert entry["capacity"]["memory"] == {
        "value": "80Gi",
        "requestPolicy": memory_policy,
    }  # rounded to a MiB
    assert entry["capacity"].get("shares") == shares


def test_an_unknown_mode_is_refused_by_name() -> None:
    with pytest.raises(
        consumable_shares.ModeError, match="'half' is not allowed: must be 'memory', 'unlimited'"
    ):
        consumable_shares.shares_of(_gpu(GIB), "half")


# --- the gate combinations, as NVIDIA refuses them ---


def test_mps_is_refused_per_claim_while_consumable_shares_is_on() -> None:
    both = featuregates.parse("MPSSupport=true,ConsumableShares=true")
    config = DeviceConfig("GpuConfig", "FromClaim", (), {"strategy": "MPS"}, "claim config 0")
    with pytest.raises(
        OpaqueConfigError, match="MPS sharing is not supported when consumable shares is enabled"
    ):
        resolve_sharing(config, facts.DEVICE_TYPE_GPU, both)
    assert (
        resolve_sharing(config, facts.DEVICE_TYPE_GPU, featuregates.parse("MPSSupport=true")).strategy
        == "MPS"
    )
    assert featuregates.conflicts(both.values) is not None  # the stack config refuses the pair outright


# --- the wired plugin ---


@pytest.fixture
def start(short_tmp: Path, fake_api: FakeAPIServer) -> Iterator:
    plugins: list[Plugin] = []

    def run(version: str, gates: str = "ConsumableShares=true") -> Plugin:
        fake_api.k8s_version = version
        fake_api.add_node(NODE)
        args = [*plugin_args(short_tmp, gpus=2), "--feature-gates", gates]
        plugin = Plugin(parse_config(args, environ={}), stop_grace=5)
        plugin.start()
        plugins.append(plugin)
        assert plugin.slices is not None and plugin.slices.wait_synced(10)
        return plugin

    yield run
    for plugin in plugins:
        plugin.stop()


def published(fake_api: FakeAPIServer) -> dict[str, dict]:
    return {d["name"]: d for s in fake_api.slices_of(NODE) for d in s["spec"].get("devices", [])}


def test_on_1_36_devices_are_published_as_consumable_shares(start, fake_api: FakeAPIServer) -> None:
    plugin = start("1.36.0")
    assert plugin.cluster.multiple_allocations
    gpu = published(fake_api)["gpu-0"]
    assert gpu == consumable_shares.shared_entry(plugin.devices[0])
    assert gpu["allowMultipleAllocations"] is True and gpu["capacity"]["memory"]["requestPolicy"]["default"]


def test_on_1_34_devices_are_published_as_before_with_a_log_line(
    start, fake_api: FakeAPIServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="vke_gpu_dra.plugin"):
        plugin = start("1.34.0")
    assert published(fake_api)["gpu-0"] == plugin.devices[0].slice_entry()
    assert any("drops allowMultipleAllocations" in r.getMessage() for r in caplog.records)


def test_without_the_gate_a_1_36_server_gets_whole_devices(start, fake_api: FakeAPIServer) -> None:
    plugin = start("1.36.0", gates="")
    assert published(fake_api)["gpu-0"] == plugin.devices[0].slice_entry()


def shared_claim(name: str, uid: str, *shares: tuple[str, str]) -> dict:
    """A claim as the 1.36 scheduler allocates shares: each result with shareID and consumedCapacity."""
    body = claim(name, uid)
    body["status"]["allocation"]["devices"]["results"] = [
        {
            "request": f"gpu{i}" if len(shares) > 1 else "gpu",
            "driver": DRIVER,
            "pool": NODE,
            "device": device,
            "shareID": share,
            "consumedCapacity": {"memory": "1Gi"},
        }
        for i, (device, share) in enumerate(shares)
    ]
    return body


def test_two_shares_of_one_device_prepare_and_unprepare_independently(start, fake_api: FakeAPIServer) -> None:
    plugin = start("1.36.0")
    fake_api.add_claim(shared_claim("a", "uid-a", ("gpu-0", "share-a")))
    fake_api.add_claim(shared_claim("b", "uid-b", ("gpu-0", "share-b")))
    kubelet = Kubelet(plugin.registration_socket)
    kubelet.register()
    try:
        answers = kubelet.prepare([("default", "a", "uid-a"), ("default", "b", "uid-b")])
        for uid, share in (("uid-a", "share-a"), ("uid-b", "share-b")):
            [device] = answers[uid]["devices"]
            assert answers[uid]["error"] == "" and device["share_id"] == share
            assert device["cdi_device_ids"] == [cdi.claim_device_id(uid, "gpu-0", share)]
        assert plugin.state is not None
        entries = plugin.state.entries()
        assert [(d.device_name, d.share_id) for d in entries["uid-a"].devices] == [("gpu-0", "share-a")]
        assert [(d.device_name, d.share_id) for d in entries["uid-b"].devices] == [("gpu-0", "share-b")]
        spec_b = cdi.claim_spec_path(plugin.config.cdi_root, "uid-b")
        assert [d["name"] for d in cdi.load_spec(spec_b)["devices"]] == [
            cdi.claim_device_name("uid-b", "gpu-0", "share-b")
        ]
        assert kubelet.unprepare([("default", "a", "uid-a")])["uid-a"] == ""
        assert set(plugin.state.entries()) == {"uid-b"} and spec_b.exists()
        assert not cdi.claim_spec_path(plugin.config.cdi_root, "uid-a").exists()
        again = kubelet.prepare([("default", "b", "uid-b")])["uid-b"]
        assert again == answers["uid-b"]  # the other share is untouched
        # v1beta1 has no share_id: the same devices, without it
        beta = kubelet.prepare([("default", "b", "uid-b")], version="v1beta1")["uid-b"]
        assert [d.get("share_id") for d in beta["devices"]] == [None]
        assert kubelet.unprepare([("default", "b", "uid-b")])["uid-b"] == ""
        assert plugin.state.entries() == {}
    finally:
        kubelet.close()


def test_two_shares_of_one_device_in_one_claim_get_a_cdi_device_each(start, fake_api: FakeAPIServer) -> None:
    plugin = start("1.36.0")
    fake_api.add_claim(shared_claim("c", "uid-c", ("gpu-1", "s1"), ("gpu-1", "s2")))
    kubelet = Kubelet(plugin.registration_socket)
    kubelet.register()
    try:
        answer = kubelet.prepare([("default", "c", "uid-c")])["uid-c"]
        assert answer["error"] == ""
        assert [(d["request_names"], d["share_id"]) for d in answer["devices"]] == [
            (["gpu0"], "s1"),
            (["gpu1"], "s2"),
        ]
        spec = cdi.load_spec(cdi.claim_spec_path(plugin.config.cdi_root, "uid-c"))
        assert [d["name"] for d in spec["devices"]] == [
            cdi.claim_device_name("uid-c", "gpu-1", "s1"),
            cdi.claim_device_name("uid-c", "gpu-1", "s2"),
        ]
    finally:
        kubelet.close()


def test_a_prepared_share_survives_the_checkpoint_round_trip() -> None:
    device = PreparedDevice(("gpu",), NODE, "gpu-0", ("k8s.gpu.nvidia.com/claim=u-gpu-0-share-s",), "s")
    assert PreparedDevice.from_json(device.to_json()) == device
    whole = PreparedDevice(("gpu",), NODE, "gpu-0", ("x",))
    assert "shareID" not in whole.to_json() and PreparedDevice.from_json(whole.to_json()) == whole
    with pytest.raises(ValueError, match="'shareID' must be a non-empty string"):
        PreparedDevice.from_json({**whole.to_json(), "shareID": 7})
