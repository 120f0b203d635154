"""Pure slice planning: shapes, splitting, generations, what counts as in sync."""

from __future__ import annotations

import copy

import pytest
from vke_gpu_dra.slices import (
    MAX_DEVICES_PER_SLICE,
    chunk_devices,
    desired_specs,
    new_slice,
    owner_reference,
    plan_sync,
)
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.discovery.simulated import SimulatedSource
from vke_gpu_dra_testing.fake_apiserver import slice_rule_errors, validate_slice

DRIVER = facts.DRIVER_NAME
NODE = "10.0.0.7"
UID = "node-uid-1"


def entries(n: int) -> list[dict]:
    return [{"name": f"gpu-{i}"} for i in range(n)]


def stored(obj: dict, name: str, generation: int | None = None) -> dict:
    out = copy.deepcopy(obj)
    out["metadata"] = {**out["metadata"], "name": name, "uid": f"uid-{name}", "resourceVersion": "5"}
    out["metadata"].pop("generateName", None)
    if generation is not None:
        out["spec"]["pool"]["generation"] = generation
    return out


def test_chunking_splits_beyond_128_and_keeps_one_empty_slice() -> None:
    assert chunk_devices([]) == [[]]
    assert [len(c) for c in chunk_devices(entries(128))] == [128]
    assert [len(c) for c in chunk_devices(entries(300))] == [128, 128, 44]
    with pytest.raises(ValueError):
        chunk_devices(entries(1), 0)


def test_desired_specs_shape() -> None:
    specs = desired_specs(driver=DRIVER, node_name=NODE, entries=entries(130), generation=4)
    assert len(specs) == 2
    for spec in specs:
        assert spec["driver"] == DRIVER
        assert spec["nodeName"] == NODE
        assert spec["pool"] == {"name": NODE, "generation": 4, "resourceSliceCount": 2}
    assert [len(s["devices"]) for s in specs] == [MAX_DEVICES_PER_SLICE, 2]


def test_simulated_devices_make_valid_slices() -> None:
    devices = SimulatedSource(count=8, product="NVIDIA A30", node_name=NODE).discover().devices
    spec = desired_specs(
        driver=DRIVER, node_name=NODE, entries=[d.slice_entry() for d in devices], generation=1
    )[0]
    obj = new_slice(spec, driver=DRIVER, node_name=NODE, node_uid=UID)
    obj["metadata"]["name"] = f"n-{facts.DRIVER_NAME}-abcde"
    validate_slice(obj)  # raises on anything the apiserver would reject
    assert obj["metadata"]["generateName"] == f"{NODE}-{DRIVER}-"
    assert obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": UID, "controller": True}
    ]


def test_fake_rules_catch_what_the_schema_does_not() -> None:
    spec = desired_specs(driver=DRIVER, node_name=NODE, entries=entries(129), generation=1)[0]
    spec["devices"].append(
        {"name": "GPU_0", "attributes": {"bad name": {"string": "x" * 65}, "v": {"version": "535.129.03"}}}
    )
    spec["allNodes"] = True
    errors = " | ".join(slice_rule_errors({"metadata": {"name": "x"}, "spec": spec}))
    for expected in (
        "exactly one of",
        "Too many",
        "must be a DNS label",
        "not a qualified name",
        "Too long",
        "semver.org",
    ):
        assert expected in errors


def test_empty_cluster_plans_creates_at_generation_one() -> None:
    plan = plan_sync([], entries(3), driver=DRIVER, node_name=NODE, node_uid=UID)
    assert plan.generation == 1 and not plan.updates and not plan.deletes
    [created] = plan.creates
    assert created["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert created["metadata"]["ownerReferences"] == [owner_reference(NODE, UID)]


def test_plan_with_no_devices_still_publishes_one_slice() -> None:
    plan = plan_sync([], [], driver=DRIVER, node_name=NODE, node_uid=UID)
    assert ["devices" in c["spec"] for c in plan.creates] == [False]  # omitempty: the apiserver drops []


def test_matching_slices_are_in_sync() -> None:
    first = plan_sync([], entries(3), driver=DRIVER, node_name=NODE, node_uid=UID)
    existing = [stored(first.creates[0], "a")]
    again = plan_sync(existing, entries(3), driver=DRIVER, node_name=NODE, node_uid=UID, known_generation=1)
    assert again.in_sync and again.generation == 1


def test_edited_slice_is_repaired_with_a_new_generation() -> None:
    first = plan_sync([], entries(200), driver=DRIVER, node_name=NODE, node_uid=UID)
    existing = [stored(o, f"s{i}") for i, o in enumerate(first.creates)]
    existing[1]["spec"]["devices"] = existing[1]["spec"]["devices"][:-1]
    plan = plan_sync(existing, entries(200), driver=DRIVER, node_name=NODE, node_uid=UID, known_generation=1)
    assert plan.generation == 2 and not plan.creates and not plan.deletes
    assert sorted(o["metadata"]["name"] for o in plan.updates) == ["s0", "s1"]
    assert all(o["spec"]["pool"]["generation"] == 2 for o in plan.updates)
    assert all(o["metadata"]["resourceVersion"] == "5" for o in plan.updates)


def test_deleted_slice_is_recreated_and_generation_bumped() -> None:
    first = plan_sync([], entries(200), driver=DRIVER, node_name=NODE, node_uid=UID)
    existing = [stored(first.creates[0], "s0")]
    plan = plan_sync(existing, entries(200), driver=DRIVER, node_name=NODE, node_uid=UID, known_generation=1)
    assert plan.generation == 2 and len(plan.updates) == 1 and len(plan.creates) == 1


def test_stale_slices_are_deleted_and_generation_is_max_plus_one() -> None:
    old = new_slice(
        desired_specs(driver=DRIVER, node_name=NODE, entries=entries(5), generation=7)[0],
        driver=DRIVER,
        node_name=NODE,
        node_uid="old-node-uid",
    )
    existing = [stored(old, "old1"), stored(old, "old2", generation=3)]
    plan = plan_sync(existing, entries(2), driver=DRIVER, node_name=NODE, node_uid=UID)
    assert plan.generation == 8
    [updated] = plan.updates
    assert updated["metadata"]["ownerReferences"][0]["uid"] == UID
    assert plan.deletes == [("old2", "uid-old2")]


def test_wrong_owner_is_not_in_sync() -> None:
    first = plan_sync([], entries(1), driver=DRIVER, node_name=NODE, node_uid="other")
    existing = [stored(first.creates[0], "a")]
    plan = plan_sync(existing, entries(1), driver=DRIVER, node_name=NODE, node_uid=UID, known_generation=1)
    assert not plan.in_sync and plan.updates[0]["metadata"]["ownerReferences"][0]["uid"] == UID


def test_known_generation_wins_when_everything_was_deleted() -> None:
    plan = plan_sync([], entries(1), driver=DRIVER, node_name=NODE, node_uid=UID, known_generation=5)
    assert plan.generation == 6


def test_server_normalised_spec_counts_as_in_sync() -> None:
    first = plan_sync([], entries(1), driver=DRIVER, node_name=NODE, node_uid=UID)
    existing = [stored(first.creates[0], "a")]
    existing[0]["spec"]["devices"][0]["extra"] = "added by the server"
    plan = plan_sync(
        existing,
        entries(1),
        driver=DRIVER,
        node_name=NODE,
        node_uid=UID,
        known_generation=1,
        matches=lambda actual, desired: actual["pool"] == desired["pool"],
    )
    assert plan.in_sync
