"""Dynamic MIG (feature gate DynamicMIG): the published devices and counters against the MIG catalog, the
slice layout within KEP-4815's limits per server version, the shared-counters detection, and the wired
plugin with simulated GPUs (prepare creates, unprepare destroys, a restart cleans, a reboot re-creates)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vke_gpu_dra import cluster_features
from vke_gpu_dra.allocation import allocated_devices
from vke_gpu_dra.allocation.guard import find_holders
from vke_gpu_dra.cdi import claim_spec_path
from vke_gpu_dra.claims.checkpoint import ClaimEntry, ClaimState
from vke_gpu_dra.config import PluginConfigError, parse_config
from vke_gpu_dra.kubeapi import KubeAPI, KubeError
from vke_gpu_dra.partitions.backends import SIMULATED_STATE_FILE
from vke_gpu_dra.partitions.publish import partitioned_gpu, slice_layout
from vke_gpu_dra.partitions.records import MigDevices, MigRecord
from vke_gpu_dra.partitions.setup import counter_layout
from vke_gpu_dra.plugin import Plugin
from vke_gpu_dra.state import RECORD_TYPES, checkpoint_store
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import ClaimRef, Device
from vke_gpu_dra_core.featuregates import conflicts
from vke_gpu_dra_core.mig_partitions import (
    Partition,
    check_slice_limits,
    mig_product,
    slice_limits,
)
from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer
from vke_gpu_dra_testing.kubelet_client import Kubelet
from vke_gpu_dra_testing.plugin_env import NODE, claim, plugin_args, wait_until

A100_80 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
MIB = 2**20


def whole_gpu(minor: int, product: str = H100) -> Device:
    return Device(
        name=f"gpu-{minor}",
        device_type=facts.DEVICE_TYPE_GPU,
        uuid=f"GPU-{minor:08d}-0000-4000-8000-000000000000",
        attributes={
            facts.ATTR_TYPE: facts.DEVICE_TYPE_GPU,
            facts.ATTR_UUID: f"GPU-{minor:08d}-0000-4000-8000-000000000000",
            facts.ATTR_PRODUCT_NAME: product,
        },
        capacity={facts.CAPACITY_MEMORY: 80 * 2**30},
        minor=minor,
        device_nodes=(f"/dev/nvidia{minor}",),
    )


# ----------------------------------------------------------------------------------------- the gate


def test_the_gate_is_off_by_default_and_refused_with_mps() -> None:
    assert not parse_config(["--node-name", "n"], {}).feature_gates.dynamic_mig
    assert parse_config(
        ["--node-name", "n", "--feature-gates", "DynamicMIG=true"], {}
    ).feature_gates.dynamic_mig
    assert conflicts({"DynamicMIG": True, "MPSSupport": True}) == (
        "DynamicMIG=true and MPSSupport=true: the two are mutually exclusive (as in NVIDIA's plugin); enable "
        "one of them"
    )
    with pytest.raises(PluginConfigError, match="DynamicMIG=true and MPSSupport=true"):
        parse_config(
            ["--node-name", "n", "--feature-gates", "DynamicMIG=true,MPSSupport=true", "--image-name", "i:1"],
            {},
        )
    assert conflicts({"DynamicMIG": True, "TimeSlicingSettings": True}) is None


# ------------------------------------------------------------------------- devices against the catalog


@pytest.mark.parametrize("product", [A100_80, H100])
def test_published_counters_and_devices_are_the_catalogs(product: str) -> None:
    catalog = mig_product(product)
    gpu = partitioned_gpu(whole_gpu(3, product), 3, catalog.profiles)
    counters = gpu.partitions.counter_set
    assert counters.name == "gpu-3-counter-set"
    assert counters.counters["multiprocessors"] == max(p.multiprocessors for p in catalog.profiles)
    assert counters.counters["memory"] == max(p.memory_mib for p in catalog.profiles) * MIB
    assert counters.counters["copy-engines"] == max(p.copy_engines for p in catalog.profiles)
    assert counters.counters["decoders"] == max(p.decoders for p in catalog.profiles)
    assert sorted(k for k in counters.counters if k.startswith("memory-slice-")) == sorted(
        f"memory-slice-{i}" for i in range(catalog.memory_slices)
    )
    expected = {
        f"gpu-3-mig-{p.name.replace('.', '').replace('+', '-')}-{p.profile_id}-{pl.start}": (p, pl)
        for p in catalog.profiles
        for pl in p.placements
    }
    assert set(gpu.placements) == set(expected)
    for name, device in gpu.placements.items():
        profile, placement = expected[name]
        assert device.device_type == "mig" and device.uuid == ""
        assert device.attributes["type"] == "mig"
        assert device.attributes["profile"] == profile.name
        assert device.attributes["parentUUID"] == gpu.whole.uuid
        assert device.attributes["productName"] == product
        assert "uuid" not in device.attributes
        assert device.capacity["memory"] == profile.memory_mib * MIB
        assert device.capacity["multiprocessors"] == profile.multiprocessors
        assert {k for k in device.capacity if k.startswith("memorySlice")} == {
            f"memorySlice{i}" for i in placement.memory_slices
        }
        partition = gpu.partition(name)
        assert partition is not None
        assert {k for k in partition.consumes if k.startswith("memory-slice-")} == {
            f"memory-slice-{i}" for i in placement.memory_slices
        }
    assert gpu.partition("gpu-3") is not None and gpu.partition("gpu-3").consumes == counters.counters  # type: ignore[union-attr]


def test_known_rows_of_nvidias_tables() -> None:
    """Figures from NVIDIA's MIG user guide: 7 x 1g.10gb on both, 1g.10gb = 1/8 of the memory slices."""
    for product, sms in ((A100_80, 98), (H100, 132)):
        gpu = partitioned_gpu(whole_gpu(0, product), 0, mig_product(product).profiles)
        assert [n for n in gpu.placements if "-mig-1g10gb-19-" in n] == [
            f"gpu-0-mig-1g10gb-19-{i}" for i in range(7)
        ]
        assert gpu.partitions.counter_set.counters["multiprocessors"] == sms
        assert "gpu-0-mig-7g80gb-0-0" in gpu.placements


# ------------------------------------------------------------------------------------- slice layout


def _check(contents: list[dict[str, Any]], gpus: list[Any], minor: int) -> None:
    by_set = {g.partitions.counter_set.name: g for g in gpus}
    limits = slice_limits(minor)
    for content in contents:
        sets = [by_set[c["name"]].partitions.counter_set for c in content.get("sharedCounters", [])]
        devices: list[Partition] = []
        for entry in content.get("devices", []):
            gpu = by_set[entry["consumesCounters"][0]["counterSet"]]
            partition = gpu.partition(entry["name"])
            assert partition is not None
            devices.append(partition)
        assert check_slice_limits(sets, devices, limits) == []


@pytest.mark.parametrize("minor", [34, 35, 36])
def test_slices_stay_within_kep_4815_limits_per_version(minor: int) -> None:
    gpus = [partitioned_gpu(whole_gpu(i), i, mig_product(H100).profiles) for i in range(8)]
    entries = [d.slice_entry() for g in gpus for d in g.devices]
    layout = slice_layout(
        gpus, "inline" if minor == 34 else "split", kubernetes_minor=minor, max_per_slice=128
    )
    contents = layout(entries)
    _check(contents, gpus, minor)
    published = [e["name"] for c in contents for e in c.get("devices", [])]
    assert sorted(published) == sorted(str(e["name"]) for e in entries)
    if minor == 34:
        # counters beside the devices that consume them; two GPUs per slice (32 shared counters)
        assert len(contents) == 4
        for content in contents:
            sets = {c["name"] for c in content["sharedCounters"]}
            assert len(sets) == 2
            assert {e["consumesCounters"][0]["counterSet"] for e in content["devices"]} == sets
    else:
        # one slice of counter sets (8 at most), then the devices of each GPU in a slice of their own
        assert [len(c.get("sharedCounters", [])) for c in contents] == [8] + [0] * 8
        assert "devices" not in contents[0]
        for i, content in enumerate(contents[1:]):
            assert {e["consumesCounters"][0]["counterSet"] for e in content["devices"]} == {
                f"gpu-{i}-counter-set"
            }


def test_devices_without_dynamic_mig_keep_their_plain_slices() -> None:
    gpus = [partitioned_gpu(whole_gpu(0), 0, mig_product(H100).profiles)]
    other = whole_gpu(1, "NVIDIA A10").slice_entry()
    contents = slice_layout(gpus, "split", kubernetes_minor=36, max_per_slice=128)(
        [*(d.slice_entry() for d in gpus[0].devices), other]
    )
    assert contents[-1] == {"devices": [other]}
    assert all("consumesCounters" in e for c in contents[:-1] for e in c.get("devices", []))


# ---------------------------------------------------------------------------- shared-counters detection


class _Server:
    def __init__(self, version: str, keeps: bool = True, fail: bool = False) -> None:
        self.version, self.keeps, self.fail = version, keeps, fail
        self.sent: list[dict[str, Any]] = []

    def server_version(self) -> dict[str, Any]:
        if self.fail:
            raise KubeError(0, "", "connection refused")
        return {"gitVersion": f"v{self.version}"}

    def create_slice(self, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        assert dry_run
        self.sent.append(obj)
        stored = json.loads(json.dumps(obj))
        if not self.keeps:
            stored["spec"].pop("sharedCounters", None)
        return stored


@pytest.mark.parametrize(
    ("server", "layout"),
    [
        (_Server("1.33.2"), None),
        (_Server("1.34.1"), "inline"),
        (_Server("1.35.0"), "split"),
        (_Server("1.35.0", keeps=False), None),
        (_Server("1.36.0-vke.1"), "split"),
        (_Server("1.36.0", fail=True), None),
    ],
)
def test_shared_counters_are_detected_from_version_and_a_dry_run(server: _Server, layout: str | None) -> None:
    found = cluster_features.detect(server, driver="gpu.nvidia.com", node_name="n")  # type: ignore[arg-type]
    assert counter_layout(found) == layout
    for sent in server.sent:
        spec = sent["spec"]
        if "sharedCounters" in spec:
            assert ("devices" in spec) == (not server.version.startswith(("1.35", "1.36")))


# ------------------------------------------------------------------------- the plugin, simulated GPUs


class Node:
    def __init__(self, root: Path, api: FakeAPIServer) -> None:
        self.root, self.api = root, api
        self.boot_id = root / "boot_id"
        self.boot_id.write_text("boot-1\n")
        self.data = root / "plugins" / facts.DRIVER_NAME
        self.plugin: Plugin | None = None
        self.kubelet: Kubelet | None = None

    def start(self, product: str = H100, gates: str = "DynamicMIG=true") -> Plugin:
        args = [
            *plugin_args(self.root, gpus=2),
            "--simulated-product", product,
            "--feature-gates", gates,
            "--boot-id-path", str(self.boot_id),
        ]  # fmt: skip
        self.plugin = Plugin(parse_config(args, environ={}), stop_grace=1)
        self.plugin.start()
        self.kubelet = Kubelet(self.plugin.registration_socket)
        self.kubelet.register()
        return self.plugin

    def stop(self) -> None:
        if self.kubelet is not None:
            self.kubelet.close()
        if self.plugin is not None:
            self.plugin.stop()
        self.plugin = self.kubelet = None

    def instances(self) -> dict[str, list[dict[str, Any]]]:
        path = self.data / SIMULATED_STATE_FILE
        return json.loads(path.read_text())["gpus"] if path.exists() else {}

    def spec(self, uid: str) -> dict[str, Any]:
        import yaml

        return yaml.safe_load(claim_spec_path(self.root / "cdi", uid).read_text())


@pytest.fixture
def node(short_tmp: Path, fake_api: FakeAPIServer) -> Iterator[Node]:
    fake_api.k8s_version = "1.36.0"
    fake_api.add_node(NODE)
    n = Node(short_tmp, fake_api)
    yield n
    n.stop()


def _uuids(spec: dict[str, Any]) -> dict[str, str]:
    found = {}
    for device in spec["devices"]:
        for env in device["containerEdits"]["env"]:
            name, _, value = env.partition("=")
            if name.endswith("_UUID"):
                found[device["name"]] = value
    return found


def test_simulated_gpus_publish_counters_and_placements(node: Node) -> None:
    plugin = node.start()
    assert plugin.slices is not None and plugin.slices.wait_synced(10)
    slices, _ = KubeAPI.from_kubeconfig(node.root / "kubeconfig").list_slices(facts.DRIVER_NAME, NODE)
    counters = [s for s in slices if s["spec"].get("sharedCounters")]
    assert [[c["name"] for c in s["spec"]["sharedCounters"]] for s in counters] == [
        ["gpu-0-counter-set", "gpu-1-counter-set"]
    ]
    devices = {d["name"]: d for s in slices for d in s["spec"].get("devices", [])}
    assert devices["gpu-0-mig-1g10gb-19-3"]["attributes"]["profile"] == {"string": "1g.10gb"}
    assert devices["gpu-0-mig-1g10gb-19-3"]["consumesCounters"][0]["counterSet"] == "gpu-0-counter-set"
    assert devices["gpu-1"]["consumesCounters"][0]["counterSet"] == "gpu-1-counter-set"


def test_two_mig_devices_of_one_gpu_in_one_claim_are_two_cdi_devices(node: Node) -> None:
    node.start()
    assert node.kubelet is not None
    node.api.add_claim(claim("c1", "uid-1", "gpu-0-mig-1g10gb-19-0", "gpu-0-mig-2g20gb-14-2"))
    result = node.kubelet.prepare([("default", "c1", "uid-1")])["uid-1"]
    assert result["error"] == ""
    assert [d["cdi_device_ids"] for d in result["devices"]] == [
        ["k8s.gpu.nvidia.com/claim=uid-1-gpu-0-mig-1g10gb-19-0"],
        ["k8s.gpu.nvidia.com/claim=uid-1-gpu-0-mig-2g20gb-14-2"],
    ]
    (gpu0,) = node.instances().values()
    assert [(i["profileId"], i["start"], i["size"]) for i in gpu0] == [(19, 0, 1), (14, 2, 2)]
    uuids = _uuids(node.spec("uid-1"))
    assert uuids == {
        "uid-1-gpu-0-mig-1g10gb-19-0": gpu0[0]["uuid"],
        "uid-1-gpu-0-mig-2g20gb-14-2": gpu0[1]["uuid"],
    }
    (entry,) = checkpoint_store(node.data).load().entries.values()
    assert [(r.device, r.uuid) for r in MigDevices.of(entry)] == [
        ("gpu-0-mig-1g10gb-19-0", gpu0[0]["uuid"]),
        ("gpu-0-mig-2g20gb-14-2", gpu0[1]["uuid"]),
    ]
    assert node.kubelet.unprepare([("default", "c1", "uid-1")]) == {"uid-1": ""}
    assert node.instances() == {next(iter(node.instances())): []}


def test_the_claim_status_names_each_mig_device_created_for_the_claim(node: Node) -> None:
    """KEP-4817's per-device status of a dynamic MIG claim carries the UUID of the MIG device prepare
    created, which exists only from then on."""
    node.start()
    assert node.kubelet is not None
    node.api.add_claim(claim("c1", "uid-1", "gpu-0-mig-1g10gb-19-0", "gpu-0-mig-2g20gb-14-2"))
    assert node.kubelet.prepare([("default", "c1", "uid-1")])["uid-1"]["error"] == ""
    (gpu0,) = node.instances().values()

    def written() -> dict[str, Any]:
        stored = node.api.claims[("default", "c1")].get("status", {}).get("devices", [])
        return {e["device"]: e.get("data", {}).get("migUUID") for e in stored}

    assert wait_until(lambda: len(written()) == 2, 10)
    assert written() == {
        "gpu-0-mig-1g10gb-19-0": gpu0[0]["uuid"],
        "gpu-0-mig-2g20gb-14-2": gpu0[1]["uuid"],
    }
    assert node.kubelet.unprepare([("default", "c1", "uid-1")]) == {"uid-1": ""}


def test_a_restart_destroys_mig_devices_no_claim_owns(node: Node) -> None:
    node.start()
    assert node.kubelet is not None
    node.api.add_claim(claim("c1", "uid-1", "gpu-1-mig-3g40gb-9-4"))
    assert node.kubelet.prepare([("default", "c1", "uid-1")])["uid-1"]["error"] == ""
    node.stop()
    state = node.instances()
    (parent,) = state
    state[parent].append({"gi": 9, "ci": 0, "profileId": 19, "start": 0, "size": 1, "uuid": "MIG-left"})
    (node.data / SIMULATED_STATE_FILE).write_text(json.dumps({"gpus": state}))
    node.start()
    assert [(i["profileId"], i["start"]) for i in node.instances()[parent]] == [(9, 4)]


def test_a_reboot_creates_the_prepared_mig_devices_again(node: Node) -> None:
    node.start()
    assert node.kubelet is not None
    node.api.add_claim(claim("c1", "uid-1", "gpu-0-mig-1g10gb-19-5"))
    assert node.kubelet.prepare([("default", "c1", "uid-1")])["uid-1"]["error"] == ""
    before = _uuids(node.spec("uid-1"))
    node.stop()
    # the reboot: a new boot id, the MIG devices and the CDI specs gone
    node.boot_id.write_text("boot-2\n")
    (node.data / SIMULATED_STATE_FILE).unlink()
    claim_spec_path(node.root / "cdi", "uid-1").unlink()
    plugin = node.start()
    assert plugin.state is not None and plugin.state.reboot is not None
    assert plugin.state.reboot.restored == ("uid-1",)
    (gpu0,) = node.instances().values()
    assert [(i["profileId"], i["start"]) for i in gpu0] == [(19, 5)]
    after = _uuids(node.spec("uid-1"))
    assert after == {"uid-1-gpu-0-mig-1g10gb-19-5": gpu0[0]["uuid"]} and after != before
    (entry,) = checkpoint_store(node.data).load().entries.values()
    assert MigDevices.of(entry).records[0].uuid == gpu0[0]["uuid"]


def test_a_product_without_mig_profiles_is_published_whole(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        plugin = node.start(product="NVIDIA A10")
    assert [d.name for d in plugin.devices] == ["gpu-0", "gpu-1"]
    assert "no MIG profiles catalogued for GPU product 'NVIDIA A10'" in caplog.text


def test_without_the_gate_nothing_changes(node: Node) -> None:
    plugin = node.start(gates="")
    assert [d.name for d in plugin.devices] == ["gpu-0", "gpu-1"]
    assert plugin.mig_layout is None and plugin.dynamic_mig is None


def test_a_placement_without_the_gate_is_refused_at_prepare(node: Node) -> None:
    node.start(gates="")
    assert node.kubelet is not None
    node.api.add_claim(claim("c1", "uid-1", "gpu-0-mig-1g10gb-19-0"))
    error = node.kubelet.prepare([("default", "c1", "uid-1")])["uid-1"]["error"]
    assert "gpu-0-mig-1g10gb-19-0" in error


def test_the_docs_show_the_sample_claim_template() -> None:
    import yaml

    repo = Path(__file__).resolve().parents[3]
    [template, pod] = yaml.safe_load_all((repo / "driver/docs/samples/dynamic-mig-1g10gb.yaml").read_text())
    text = (repo / "docs/dynamic-mig.md").read_text()
    shown = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(shown) == template
    [request] = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == facts.DEVICE_CLASS_MIG.name
    assert pod["spec"]["resourceClaims"] == [{"name": "mig", "resourceClaimTemplateName": "mig-1g10gb"}]


# --------------------------------------------------------------------------------- checkpoint records


def test_the_checkpoint_keeps_mig_records_and_names_a_bad_field() -> None:
    from vke_gpu_dra.claims.checkpoint import CheckpointError, ClaimEntry, ClaimState, decode, encode

    placed = MigRecord("gpu-0-mig-1g10gb-19-3", "GPU-x", 0, 19, 3, 1)
    created = MigRecord(
        "gpu-0-mig-3g40gb-9-4", "GPU-x", 0, 9, 4, 4, 2, 0, "MIG-y", ("/dev/nvidia-caps/nvidia-cap21",)
    )
    entry = ClaimEntry(
        "u", "ns", "c", ClaimState.PREPARE_STARTED, records={"partitions": MigDevices((placed, created))}
    )
    assert decode(encode({"u": entry}), RECORD_TYPES) == {"u": entry}
    assert "partitions" not in ClaimEntry("u", "ns", "c", ClaimState.PREPARE_STARTED).to_json()
    bad = entry.to_json()
    bad["partitions"][0]["profileId"] = "19"
    with pytest.raises(
        ValueError, match=r"claims\[0\]\.partitions\[0\]\.profileId: '19'; allowed: a whole number"
    ):
        ClaimEntry.from_json(bad, "claims[0]", RECORD_TYPES)
    bad["partitions"][0] = {"device": "d"}
    with pytest.raises(CheckpointError, match="missing field"):
        ClaimEntry.from_json(bad, "claims[0]", RECORD_TYPES)


# ------------------------------------------------------------------------------ the held-devices guard


def test_a_gpu_overlaps_its_placements_and_placements_overlap_by_memory_slice(node: Node) -> None:
    plugin = node.start()
    assert plugin.dynamic_mig is not None
    manager = plugin.dynamic_mig.manager
    assert "gpu-0-mig-1g10gb-19-0" in manager.overlapping("gpu-0")
    assert "gpu-0" in manager.overlapping("gpu-0-mig-1g10gb-19-0")
    assert "gpu-0-mig-3g40gb-9-4" in manager.overlapping("gpu-0-mig-1g10gb-19-5")  # slices 4-7 hold 5
    assert "gpu-0-mig-2g20gb-14-2" not in manager.overlapping("gpu-0-mig-1g10gb-19-0")
    assert not manager.overlapping("gpu-0") & {"gpu-1", "gpu-1-mig-1g10gb-19-0"}
    assert manager.overlapping("no-such-device") == frozenset()


def test_the_guard_prepares_distinct_placements_of_one_gpu_for_two_claims(node: Node) -> None:
    node.start()
    assert node.kubelet is not None
    node.api.add_claim(claim("c1", "uid-1", "gpu-0-mig-1g10gb-19-0"))
    node.api.add_claim(claim("c2", "uid-2", "gpu-0-mig-2g20gb-14-2"))
    assert node.kubelet.prepare([("default", "c1", "uid-1")])["uid-1"]["error"] == ""
    assert node.kubelet.prepare([("default", "c2", "uid-2")])["uid-2"]["error"] == ""
    (gpu0,) = node.instances().values()
    assert [(i["profileId"], i["start"]) for i in gpu0] == [(19, 0), (14, 2)]


def test_the_guard_refuses_a_gpu_while_a_live_claim_holds_one_of_its_placements_and_back(node: Node) -> None:
    node.start()
    assert node.kubelet is not None
    node.api.add_claim(claim("c1", "uid-1", "gpu-0-mig-1g10gb-19-0"))
    node.api.add_claim(claim("c2", "uid-2", "gpu-1"))
    assert node.kubelet.prepare([("default", "c1", "uid-1")])["uid-1"]["error"] == ""
    assert node.kubelet.prepare([("default", "c2", "uid-2")])["uid-2"]["error"] == ""
    node.api.add_claim(claim("whole", "uid-3", "gpu-0"))
    node.api.add_claim(claim("part", "uid-4", "gpu-1-mig-1g10gb-19-0"))
    whole = node.kubelet.prepare([("default", "whole", "uid-3")])["uid-3"]["error"]
    assert "device(s) gpu-0-mig-1g10gb-19-0 are prepared on this node for claim default/c1" in whole
    assert "share a GPU's memory slices with gpu-0 asked for here" in whole
    part = node.kubelet.prepare([("default", "part", "uid-4")])["uid-4"]["error"]
    assert "device(s) gpu-1 are prepared on this node for claim default/c2" in part
    assert "with gpu-1-mig-1g10gb-19-0 asked for here" in part
    assert [(i["profileId"], i["start"]) for gpu in node.instances().values() for i in gpu] == [(19, 0)]
    entries = checkpoint_store(node.data).load().entries
    assert set(entries) == {"uid-1", "uid-2"}


def test_the_guard_cleans_a_ghost_placement_before_preparing_its_gpu(node: Node) -> None:
    node.start()
    assert node.kubelet is not None
    node.api.add_claim(claim("c1", "uid-1", "gpu-0-mig-1g10gb-19-0"))
    assert node.kubelet.prepare([("default", "c1", "uid-1")])["uid-1"]["error"] == ""
    node.api.delete_claim("default", "c1")  # deleted without an unprepare: a ghost
    node.api.add_claim(claim("whole", "uid-2", "gpu-0"))
    assert node.kubelet.prepare([("default", "whole", "uid-2")])["uid-2"]["error"] == ""
    assert [i for gpu in node.instances().values() for i in gpu] == []  # the ghost's MIG device went
    assert set(checkpoint_store(node.data).load().entries) == {"uid-2"}


def test_a_started_entry_holds_its_recorded_placements_and_admin_access_allows_the_overlap(
    node: Node,
) -> None:
    plugin = node.start()
    assert plugin.dynamic_mig is not None
    manager = plugin.dynamic_mig.manager
    started = ClaimEntry(
        "old",
        "default",
        "old",
        ClaimState.PREPARE_STARTED,
        records={"partitions": MigDevices((MigRecord("gpu-0-mig-1g10gb-19-0", "GPU-x", 0, 19, 0, 1),))},
    )
    new = ClaimRef("default", "new", "new")
    wanted = allocated_devices(
        new,
        claim("new", "new", "gpu-0"),
        driver_name=facts.DRIVER_NAME,
        pool_name=NODE,
        devices={d.name: d for d in plugin.devices},
    )
    [holder] = find_holders(new, wanted, [started], overlapping=manager.overlapping)
    assert (holder.devices, holder.overlapping) == (("gpu-0-mig-1g10gb-19-0",), ("gpu-0",))
    assert find_holders(new, wanted, [started]) == []  # no dynamic MIG: other names are other devices
    assert find_holders(new, wanted, [started], admin={"gpu-0"}, overlapping=manager.overlapping) == []
