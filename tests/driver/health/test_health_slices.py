"""Device-taint support detection and the published slices on servers with and without device taints
(the fake API server enforces each version's field rules), through the wired plugin with simulated
GPUs made unhealthy by the health file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from vke_gpu_dra import cluster_features
from vke_gpu_dra.config import parse_config
from vke_gpu_dra.health import taint_support
from vke_gpu_dra.health.simulated import FILE_NAME, parse
from vke_gpu_dra.kubeapi import KubeAPI, KubeError
from vke_gpu_dra.plugin import Plugin
from vke_gpu_dra.slices import SyncPlan, new_slice, plan_sync, slice_spec
from vke_gpu_dra_core import facts
from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer
from vke_gpu_dra_testing.kubelet_client import Kubelet
from vke_gpu_dra_testing.plugin_env import NODE, claim, plugin_args, wait_until

DRIVER = facts.DRIVER_NAME
NOTE = f"{DRIVER}/device-health"


def tainted_slice(fake_api: FakeAPIServer, taints: list[dict], devices: int = 1) -> dict:
    node = fake_api.nodes.get(NODE) or fake_api.add_node(NODE)
    entries = [{"name": f"gpu-{i}", "taints": [dict(t) for t in taints]} for i in range(devices)]
    spec = slice_spec(driver=DRIVER, node_name=NODE, devices=entries, generation=1, slice_count=1)
    return new_slice(spec, driver=DRIVER, node_name=NODE, node_uid=node["metadata"]["uid"])


NO_SCHEDULE = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}


# --- the fake API server's rules per version ---


def test_before_1_36_without_the_gate_taints_are_dropped(fake_api: FakeAPIServer, kube: KubeAPI) -> None:
    for version in ("1.34.0", "1.35.0"):
        fake_api.k8s_version = version
        stored = kube.create_slice(tainted_slice(fake_api, [NO_SCHEDULE]))
        assert "taints" not in stored["spec"]["devices"][0]


def test_where_served_taints_are_kept_with_time_added(fake_api: FakeAPIServer, kube: KubeAPI) -> None:
    fake_api.k8s_version = "1.36.0"
    stored = kube.create_slice(tainted_slice(fake_api, [NO_SCHEDULE]))
    [taint] = stored["spec"]["devices"][0]["taints"]
    assert taint["key"] == "gpu.nvidia.com/xid" and taint["value"] == "79" and taint["effect"] == "NoSchedule"
    assert taint["timeAdded"].endswith("Z")
    fake_api.k8s_version, fake_api.feature_gates = "1.34.0", {"DRADeviceTaints"}
    assert kube.create_slice(tainted_slice(fake_api, [NO_SCHEDULE]))["spec"]["devices"][0]["taints"]


@pytest.mark.parametrize(
    "case",
    [
        ("1.34.0", [{"key": "a/b", "effect": "None"}], 1, 'supported values: "NoSchedule", "NoExecute"'),
        (
            "1.34.0",
            [{"key": f"a/k{i}", "effect": "NoSchedule"} for i in range(5)],
            1,
            "must have at most 4 items",
        ),
        (
            "1.36.0",
            [{"key": f"a/k{i}", "effect": "None"} for i in range(17)],
            1,
            "must have at most 16 items",
        ),
        ("1.36.0", [{"key": "a/b", "effect": "PreferNoSchedule"}], 1, "Unsupported value"),
        ("1.36.0", [{"key": "a/b", "value": "-bad-", "effect": "None"}], 1, "must be a valid label value"),
        ("1.36.0", [NO_SCHEDULE], 65, "must have at most 64 items when devices have taints"),
    ],
)
def test_taint_field_rules_per_version(
    fake_api: FakeAPIServer, kube: KubeAPI, case: tuple[str, list[dict], int, str]
) -> None:
    version, taints, devices, message = case
    fake_api.k8s_version, fake_api.feature_gates = version, {"DRADeviceTaints"}
    with pytest.raises(KubeError) as err:
        kube.create_slice(tainted_slice(fake_api, taints, devices))
    assert err.value.status == 422 and message in str(err.value)


@pytest.mark.parametrize(
    "key", ["gpu.nvidia.com/xid", "gpu.nvidia.com/gpu-lost", "gpu.nvidia.com/unmonitored"]
)
def test_nvidias_taint_keys_are_label_keys(fake_api: FakeAPIServer, kube: KubeAPI, key: str) -> None:
    fake_api.k8s_version = "1.36.0"
    stored = kube.create_slice(tainted_slice(fake_api, [{"key": key, "effect": "NoSchedule"}]))
    assert stored["spec"]["devices"][0]["taints"][0]["key"] == key


def test_a_taint_key_must_be_a_label_key(fake_api: FakeAPIServer, kube: KubeAPI) -> None:
    fake_api.k8s_version = "1.36.0"
    with pytest.raises(KubeError, match="must be a qualified name"):
        kube.create_slice(tainted_slice(fake_api, [{"key": "gpu.nvidia.com/-lost", "effect": "NoSchedule"}]))


def test_effect_none_is_valid_from_1_35(fake_api: FakeAPIServer, kube: KubeAPI) -> None:
    fake_api.k8s_version, fake_api.feature_gates = "1.35.0", {"DRADeviceTaints"}
    kube.create_slice(tainted_slice(fake_api, [{"key": "gpu.nvidia.com/unmonitored", "effect": "None"}]))


def test_a_dry_run_create_stores_nothing(fake_api: FakeAPIServer, kube: KubeAPI) -> None:
    fake_api.k8s_version = "1.36.0"
    answer = kube.create_slice(tainted_slice(fake_api, [NO_SCHEDULE]), dry_run=True)
    assert answer["spec"]["devices"][0]["taints"] and fake_api.slices_of(NODE) == []


# --- detection ---


@pytest.mark.parametrize(
    "case",
    [
        ("1.34.0", set(), False, False, 4),
        ("1.35.0", set(), False, True, 16),
        ("1.34.0", {"DRADeviceTaints"}, True, False, 4),
        ("1.35.0", {"DRADeviceTaints"}, True, True, 16),
        ("1.36.0", set(), True, True, 16),
        ("1.37.0", set(), True, True, 16),  # GA, on by default: no gate setting
    ],
)
def test_detection_by_version_and_dry_run(
    fake_api: FakeAPIServer, kube: KubeAPI, case: tuple[str, set[str], bool, bool, int]
) -> None:
    version, gates, taints, none_effect, max_taints = case
    fake_api.k8s_version, fake_api.feature_gates = version, gates
    fake_api.add_node(NODE)
    support = taint_support.detect(kube, driver=DRIVER, node_name=NODE)
    assert (support.taints, support.none_effect) == (taints, none_effect)
    if taints:
        assert support.max_taints == max_taints
    dry_runs = cluster_features.DRY_RUNS  # the taint probe is one of the cluster-feature probes
    assert fake_api.count("POST", "dryRun=All") == dry_runs and fake_api.slices_of(NODE) == []


def test_no_dry_run_on_a_server_older_than_the_field(fake_api: FakeAPIServer, kube: KubeAPI) -> None:
    fake_api.k8s_version = "1.32.0"
    assert not taint_support.detect(kube, driver=DRIVER, node_name=NODE).taints
    assert fake_api.count("POST") == 0


def test_a_failing_dry_run_means_no_taints(fake_api: FakeAPIServer, kube: KubeAPI) -> None:
    fake_api.k8s_version = "1.36.0"
    fake_api.inject_fault("POST", "dryRun=All", 403)
    assert not taint_support.detect(kube, driver=DRIVER, node_name=NODE).taints


def test_version_parsing() -> None:
    assert taint_support.parse_version({"gitVersion": "v1.36.2-vke.1"}) == (1, 36)
    assert taint_support.parse_version({"major": "1", "minor": "35+"}) == (1, 35)
    assert taint_support.parse_version({}) is None


# --- managed annotations in the slice plan ---


def test_plan_sets_updates_and_removes_managed_annotations() -> None:
    def plan(existing: list[dict], notes: dict[str, str]) -> SyncPlan:
        return plan_sync(
            existing, [{"name": "gpu-0"}], driver=DRIVER, node_name=NODE, node_uid="u",
            annotations=notes, managed_annotations=(NOTE,),
        )  # fmt: skip

    [created] = plan([], {NOTE: "[1]"}).creates
    assert created["metadata"]["annotations"] == {NOTE: "[1]"}
    stored = {
        **created,
        "metadata": {**created["metadata"], "name": "s", "annotations": {NOTE: "[1]", "x": "y"}},
    }
    assert plan([stored], {NOTE: "[1]"}).in_sync
    [changed] = plan([stored], {NOTE: "[2]"}).updates
    assert changed["metadata"]["annotations"] == {NOTE: "[2]", "x": "y"}  # foreign annotations kept
    [cleared] = plan([stored], {}).updates
    assert cleared["metadata"]["annotations"] == {"x": "y"}


# --- the simulated health file ---


def test_health_file_format() -> None:
    text = "gpu-0 xid 79\n# note\ngpu-1 lost  # demo\ngpu-2 unmonitored\ngpu-9 lost\ngpu-3 xid\n"
    found, problems = parse(text, ["gpu-0", "gpu-1", "gpu-2", "gpu-3"])
    assert found == {"gpu-0": ("xid", 79), "gpu-1": ("lost", None), "gpu-2": ("unmonitored", None)}
    assert [p.split(":")[0] for p in problems] == ["line 5 'gpu-9 lost'", "line 6 'gpu-3 xid'"]


# --- the wired plugin ---


@pytest.fixture
def start(short_tmp: Path, fake_api: FakeAPIServer) -> Iterator:
    plugins: list[Plugin] = []

    def run(version: str, window: int = 0) -> Plugin:
        fake_api.k8s_version = version
        fake_api.add_node(NODE)
        args = [*plugin_args(short_tmp, gpus=2), "--health-recovery-window", str(window)]
        plugin = Plugin(parse_config(args, environ={}), stop_grace=5)
        plugin.start()
        plugins.append(plugin)
        assert plugin.slices is not None and plugin.slices.wait_synced(10)
        return plugin

    yield run
    for plugin in plugins:
        plugin.stop()


def health_file(plugin: Plugin) -> Path:
    return plugin.config.plugin_data_dir / FILE_NAME


def published(fake_api: FakeAPIServer) -> dict[str, dict]:
    return {d["name"]: d for s in fake_api.slices_of(NODE) for d in s["spec"].get("devices", [])}


def test_on_1_36_a_fatal_xid_taints_the_device_and_recovery_lifts_it(start, fake_api: FakeAPIServer) -> None:
    plugin = start("1.36.0")
    assert plugin.health is not None and plugin.health.support.taints
    health_file(plugin).write_text("gpu-1 xid 79\n")
    assert wait_until(lambda: "taints" in published(fake_api).get("gpu-1", {}))
    [taint] = published(fake_api)["gpu-1"]["taints"]
    assert (taint["key"], taint["value"], taint["effect"]) == ("gpu.nvidia.com/xid", "79", "NoSchedule")
    assert "taints" not in published(fake_api)["gpu-0"]
    assert plugin.health_board is not None and plugin.health_board.entry("gpu-1").status == "unhealthy"
    health_file(plugin).write_text("")  # window 0: healthy at the next read
    assert wait_until(lambda: "taints" not in published(fake_api)["gpu-1"])
    assert plugin.health_board.entry("gpu-1").status == "healthy"
    health_file(plugin).write_text("gpu-0 lost\n")
    assert wait_until(lambda: "taints" in published(fake_api)["gpu-0"])
    assert [t["key"] for t in published(fake_api)["gpu-0"]["taints"]] == ["gpu.nvidia.com/gpu-lost"]


def test_on_1_34_an_unhealthy_device_is_left_out_and_prepared_claims_still_work(
    start, fake_api: FakeAPIServer
) -> None:
    plugin = start("1.34.0")
    assert plugin.health is not None and not plugin.health.support.taints
    fake_api.add_claim(claim("c1", "uid-1", "gpu-1"))
    kubelet = Kubelet(plugin.registration_socket)
    kubelet.register()
    try:
        first = kubelet.prepare([("default", "c1", "uid-1")])["uid-1"]
        assert first["error"] == ""
        health_file(plugin).write_text("gpu-1 lost\n")
        assert wait_until(lambda: sorted(published(fake_api)) == ["gpu-0"])
        [notes] = [json.loads(s["metadata"]["annotations"][NOTE]) for s in fake_api.slices_of(NODE)]
        assert [(n["device"], n["health"], n["problems"][0]["reason"]) for n in notes] == [
            ("gpu-1", "unhealthy", "gpu-lost")
        ]
        again = kubelet.prepare([("default", "c1", "uid-1")])["uid-1"]
        assert again == first  # the claim already prepared keeps its answer
        assert kubelet.unprepare([("default", "c1", "uid-1")])["uid-1"] == ""
        health_file(plugin).unlink()
        assert wait_until(lambda: sorted(published(fake_api)) == ["gpu-0", "gpu-1"])
        assert wait_until(
            lambda: all(
                NOTE not in (s["metadata"].get("annotations") or {}) for s in fake_api.slices_of(NODE)
            )
        )
    finally:
        kubelet.close()


def test_an_ignored_xid_in_the_health_file_changes_nothing(start, fake_api: FakeAPIServer) -> None:
    plugin = start("1.36.0", window=300)
    health_file(plugin).write_text("gpu-0 xid 13\ngpu-1 xid 79\n")
    assert wait_until(lambda: "taints" in published(fake_api).get("gpu-1", {}))
    assert "taints" not in published(fake_api)["gpu-0"]
