"""The kube API wrapper against the fake API server, through the real kubernetes client."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from vke_gpu_dra.kubeapi import KubeAPI, KubeError, load_api_client, slice_field_selector
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.kubeconfig import KubeconfigError
from vke_gpu_dra_testing.fake_apiserver import ApiError, FakeAPIServer, parse_field_selector

DRIVER = facts.DRIVER_NAME


def slice_obj(node: str, devices: list[dict] | None = None, driver: str = DRIVER) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{node}-{driver}-"},
        "spec": {
            "driver": driver,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": devices or [],
        },
    }


def test_field_selector() -> None:
    assert slice_field_selector(DRIVER, "n1") == f"spec.driver={facts.DRIVER_NAME},spec.nodeName=n1"


def test_only_the_apiservers_slice_field_labels_are_accepted() -> None:
    assert parse_field_selector("spec.driver=d,spec.nodeName=n") == {"spec.driver": "d", "spec.nodeName": "n"}
    with pytest.raises(ApiError, match=r"field label not supported: spec\.pool\.name"):
        parse_field_selector("spec.pool.name=n")


def test_gets_return_plain_json(fake_api: FakeAPIServer, kube: KubeAPI) -> None:
    node = fake_api.add_node("n1")
    assert kube.get_node("n1")["metadata"]["uid"] == node["metadata"]["uid"]
    with pytest.raises(KubeError) as err:
        kube.get_node("nope")
    assert err.value.not_found
    assert kube.get_resource_claim("ns", "missing") is None
    fake_api.add_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"namespace": "ns", "name": "c"},
            "spec": {"devices": {}},
        }
    )
    claim = kube.get_resource_claim("ns", "c")
    assert claim is not None and claim["metadata"]["name"] == "c" and "resourceVersion" in claim["metadata"]


def test_slice_crud_with_generate_name_and_selector(fake_api: FakeAPIServer, kube: KubeAPI) -> None:
    mine = kube.create_slice(slice_obj("n1"))
    assert (
        mine["metadata"]["name"].startswith(f"n1-{DRIVER}-")
        and len(mine["metadata"]["name"]) == len(f"n1-{DRIVER}-") + 5
    )
    kube.create_slice(slice_obj("n2"))
    kube.create_slice(slice_obj("n1", driver="other.example.com"))
    items, rv = kube.list_slices(DRIVER, "n1")
    assert [i["metadata"]["name"] for i in items] == [mine["metadata"]["name"]]
    assert int(rv) >= int(mine["metadata"]["resourceVersion"])
    mine["spec"]["pool"]["generation"] = 2
    updated = kube.update_slice(mine)
    assert updated["spec"]["pool"]["generation"] == 2
    with pytest.raises(KubeError) as err:
        kube.update_slice(mine)  # stale resourceVersion
    assert err.value.conflict and "modified" in err.value.message
    kube.delete_slice(mine["metadata"]["name"])
    kube.delete_slice(mine["metadata"]["name"])  # already gone: fine
    assert kube.list_slices(DRIVER, "n1")[0] == []


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s["spec"].update(allNodes=True), "exactly one of"),
        (lambda s: s["spec"].update(devices=[{"name": f"gpu-{i}"} for i in range(129)]), "Too many"),
        (lambda s: s["spec"].update(devices=[{"name": "GPU_0"}]), "DNS label"),
        (
            lambda s: s["spec"].update(devices=[{"name": "g", "attributes": {"x": {"string": "y" * 65}}}]),
            "Too long",
        ),
        (
            lambda s: s["spec"].update(
                devices=[{"name": "g", "attributes": {"v": {"version": "535.129.03"}}}]
            ),
            "semver",
        ),
        (lambda s: s["spec"].update(devices=[{"name": "g", "attributes": {"a b": {"int": 1}}}]), "qualified"),
        (lambda s: s["spec"]["pool"].pop("resourceSliceCount"), "resourceSliceCount"),
        (lambda s: s["spec"].update(devices=[{"name": "g", "atributes": {}}]), "dditional properties"),
    ],
)
def test_invalid_slices_get_422(kube: KubeAPI, mutate, message: str) -> None:
    obj = slice_obj("n1")
    mutate(obj)
    with pytest.raises(KubeError) as err:
        kube.create_slice(obj)
    assert err.value.status == 422 and err.value.reason == "Invalid"
    assert message in err.value.message


def test_watch_streams_events_and_reports_410(fake_api: FakeAPIServer, kube: KubeAPI) -> None:
    _, rv = kube.list_slices(DRIVER, "n1")
    watch = kube.watch_slices(DRIVER, "n1", rv, 30)
    seen: list[str] = []
    done = threading.Event()

    def consume() -> None:
        for event in watch:
            seen.append(event.type)
        done.set()

    t = threading.Thread(target=consume)
    t.start()
    created = kube.create_slice(slice_obj("n1"))
    kube.create_slice(slice_obj("n2"))  # filtered out
    fake_api.edit_slice(created["metadata"]["name"], lambda s: s["spec"]["pool"].update(generation=9))
    fake_api.delete_slice(created["metadata"]["name"])
    assert fake_api.wait_for(lambda: len(seen) == 3)
    assert seen == ["ADDED", "MODIFIED", "DELETED"]
    watch.close()
    assert done.wait(5)
    t.join(5)
    fake_api.compact()
    events = list(kube.watch_slices(DRIVER, "n1", created["metadata"]["resourceVersion"], 30))
    assert [(e.type, e.object["code"]) for e in events] == [("ERROR", 410)]


def test_requests_need_the_kubeconfig_token(fake_api: FakeAPIServer, short_tmp: Path) -> None:
    path = short_tmp / "bad-kubeconfig"
    fake_api.write_kubeconfig(path)
    path.write_text(path.read_text().replace("fake-apiserver-token", "wrong"))
    api = KubeAPI.from_kubeconfig(path)
    with pytest.raises(KubeError) as err:
        api.get_node("n1")
    assert err.value.status == 401
    api.close()


def test_missing_kubeconfig_is_a_clear_error(short_tmp: Path) -> None:
    with pytest.raises(KubeconfigError, match="does not exist"):
        load_api_client(short_tmp / "missing")
