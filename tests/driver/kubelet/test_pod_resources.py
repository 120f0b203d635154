"""kubelet's PodResources API read over a real unix socket, and the lookup of the claims the pods of a
node use (PodResources first, the pod list through the API server only as a fallback)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
from vke_gpu_dra.kubeapi import KubeAPI, KubeError
from vke_gpu_dra.kubelet.pod_resources import (
    ClaimDevice,
    ClaimUse,
    PodResourcesClient,
    PodResourcesError,
    PodResourcesView,
)
from vke_gpu_dra.takeover.node_claims import (
    POD_LIST,
    POD_RESOURCES,
    NodeClaimLookup,
    kubelet_version,
    pod_resources_names,
)
from vke_gpu_dra_core import facts
from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer
from vke_gpu_dra_testing.fake_pod_resources import FakePodResources, UsedClaim

NODE = "node-a"


def client(fake: FakePodResources) -> PodResourcesClient:
    return PodResourcesClient(fake.socket)


# --- the client, against kubelet's proto on a unix socket ---


def test_list_names_each_claim_a_container_uses_with_its_devices(pod_resources: FakePodResources) -> None:
    pod_resources.add_pod(
        "team-a",
        "train",
        main=[
            UsedClaim(
                "train-gpu-x7k2p",
                [(NODE, "gpu-0"), (NODE, "gpu-1")],
                cdi_ids=["k8s.gpu.nvidia.com/device=gpu-0"],
            )
        ],
        sidecar=[UsedClaim("nic", [("rack-1", "eth0")], driver="nic.example.com")],
    )
    pod_resources.add_pod("default", "no-claims")
    view = client(pod_resources).list_claims(timeout=5)
    assert view.pods == ("team-a/train", "default/no-claims")
    assert view.claims == (
        ClaimUse(
            "team-a/train",
            "main",
            "team-a",
            "train-gpu-x7k2p",
            (ClaimDevice(facts.DRIVER_NAME, NODE, "gpu-0"), ClaimDevice(facts.DRIVER_NAME, NODE, "gpu-1")),
        ),
        ClaimUse(
            "team-a/train", "sidecar", "team-a", "nic", (ClaimDevice("nic.example.com", "rack-1", "eth0"),)
        ),
    )


def test_a_kubelet_without_the_dra_fields_lists_pods_but_no_claim(pod_resources: FakePodResources) -> None:
    pod_resources.dra_fields = False
    pod_resources.add_pod("default", "p", main=[UsedClaim("c", [(NODE, "gpu-0")])])
    assert client(pod_resources).list_claims(timeout=5) == PodResourcesView(("default/p",), ())


def test_no_socket_is_unavailable(short_tmp: Path) -> None:
    missing = short_tmp / "pod-resources" / "kubelet.sock"
    with pytest.raises(PodResourcesError, match=f"no kubelet PodResources socket at {missing}") as err:
        PodResourcesClient(missing).list_claims(timeout=5)
    assert err.value.kind == "unavailable"


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (grpc.StatusCode.UNIMPLEMENTED, "unimplemented"),
        (grpc.StatusCode.UNAVAILABLE, "unavailable"),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "error"),  # kubelet's rate limit
    ],
)
def test_a_failed_list_says_how(pod_resources: FakePodResources, code: grpc.StatusCode, kind: str) -> None:
    pod_resources.fail(code)
    with pytest.raises(PodResourcesError, match=f"List on {pod_resources.socket}: {code.name}") as err:
        client(pod_resources).list_claims(timeout=5)
    assert err.value.kind == kind
    assert client(pod_resources).list_claims(timeout=5).pods == ()  # no retry was spent on it


def test_a_kubelet_that_does_not_answer_is_a_timeout(pod_resources: FakePodResources) -> None:
    pod_resources.hold()
    try:
        with pytest.raises(PodResourcesError) as err:
            client(pod_resources).list_claims(timeout=0.2)
    finally:
        pod_resources.release()
    assert err.value.kind == "timeout" and "DEADLINE_EXCEEDED" in str(err.value)


# --- the pure parts of the lookup ---


def use(name: str, *drivers: str) -> ClaimUse:
    return ClaimUse(
        "default/p", "main", "default", name, tuple(ClaimDevice(d, NODE, "gpu-0") for d in drivers)
    )


def test_only_claims_that_may_be_this_drivers_are_named() -> None:
    claims = [use("ours", facts.DRIVER_NAME), use("mixed", "nic.example.com", facts.DRIVER_NAME)]
    claims += [use("no-devices"), use("theirs", "nic.example.com")]
    assert pod_resources_names(claims, facts.DRIVER_NAME) == {
        ("default", "ours"),
        ("default", "mixed"),
        ("default", "no-devices"),
    }


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("v1.34.4", (1, 34)), ("v1.36.0-vke.2", (1, 36)), ("", None), (None, None), (134, None)],
)
def test_kubelet_version(raw: Any, expected: tuple[int, int] | None) -> None:
    assert kubelet_version({"status": {"nodeInfo": {"kubeletVersion": raw}}}) == expected
    assert kubelet_version({}) is None


# --- the lookup: PodResources first, the pod list only when it cannot tell ---


def with_kubelet(fake_api: FakeAPIServer, version: str) -> None:
    fake_api.add_node(NODE)
    with fake_api.cond:
        fake_api.nodes[NODE]["status"] = {"nodeInfo": {"kubeletVersion": version}}


def pod_lists(fake_api: FakeAPIServer) -> int:
    return sum(1 for m, p in fake_api.requests if m == "GET" and p.startswith("/api/v1/pods"))


def lookup(pod_resources: FakePodResources | None, kube: KubeAPI, *, pods: bool = True) -> NodeClaimLookup:
    return NodeClaimLookup(
        driver_name=facts.DRIVER_NAME,
        node_name=NODE,
        pod_resources=client(pod_resources) if pod_resources else None,
        nodes=kube,
        pods=kube if pods else None,
    )


def test_a_pod_resources_answer_naming_claims_is_complete_and_lists_no_pods(
    pod_resources: FakePodResources, fake_api: FakeAPIServer, kube: KubeAPI
) -> None:
    pod_resources.add_pod("default", "p", main=[UsedClaim("c", [(NODE, "gpu-0")])])
    seen = lookup(pod_resources, kube).look(5)
    assert seen.names == {("default", "c")} and seen.sources == (POD_RESOURCES,)
    assert seen.undecided is None and seen.error is None
    assert pod_lists(fake_api) == 0 and fake_api.count("GET", "/api/v1/nodes") == 0


def test_no_claim_on_a_kubelet_that_locks_the_gate_on_is_complete(
    pod_resources: FakePodResources, fake_api: FakeAPIServer, kube: KubeAPI
) -> None:
    with_kubelet(fake_api, "v1.36.1")
    look = lookup(pod_resources, kube)
    assert look.look(5).undecided is None and look.look(5).names == frozenset()
    assert pod_lists(fake_api) == 0
    assert fake_api.count("GET", f"/api/v1/nodes/{NODE}") == 1  # read once, then known


def test_no_claim_on_a_1_34_kubelet_falls_back_to_the_pod_list(
    pod_resources: FakePodResources, fake_api: FakeAPIServer, kube: KubeAPI
) -> None:
    with_kubelet(fake_api, "v1.34.4")
    fake_api.add_pod("default", "p", NODE, claims={"gpu": "c"})
    seen = lookup(pod_resources, kube).look(5)
    assert seen.names == {("default", "c")} and seen.sources == (POD_RESOURCES, POD_LIST)
    assert seen.undecided is None and pod_lists(fake_api) == 1


def test_without_the_pod_list_grant_the_view_stays_incomplete_and_is_no_failure(
    pod_resources: FakePodResources, fake_api: FakeAPIServer, kube: KubeAPI
) -> None:
    with_kubelet(fake_api, "v1.34.4")
    fake_api.inject_fault("GET", "/api/v1/pods", 403)
    seen = lookup(pod_resources, kube).look(5)
    assert seen.undecided is not None and seen.undecided.kind == "forbidden" and seen.error is None
    assert "kubelet (1.34) names no claim in its PodResources API" in seen.undecided.why
    assert "KubeletPodResourcesDynamicResources gate is off" in seen.undecided.why
    assert "listing the pods of this node is not granted" in seen.undecided.why


def test_an_unreadable_pod_resources_api_falls_back_to_the_pod_list(
    short_tmp: Path, fake_api: FakeAPIServer, kube: KubeAPI
) -> None:
    fake_api.add_pod("default", "p", NODE, claims={"gpu": "c"})
    missing = FakePodResources(short_tmp / "nowhere" / "kubelet.sock")  # never started
    seen = lookup(missing, kube).look(5)
    assert seen.names == {("default", "c")} and seen.sources == (POD_LIST,) and seen.undecided is None
    # and without the pod list: undecided, naming why
    alone = lookup(missing, kube, pods=False).look(5)
    assert alone.undecided is not None and alone.undecided.kind == "pod-resources-unavailable"
    assert alone.names == frozenset() and alone.sources == ()


def test_a_failed_pod_list_is_an_error_to_count(
    pod_resources: FakePodResources, fake_api: FakeAPIServer, kube: KubeAPI
) -> None:
    pod_resources.fail(grpc.StatusCode.UNAVAILABLE)
    fake_api.inject_fault("GET", "/api/v1/pods", 500)
    seen = lookup(pod_resources, kube).look(5)
    assert seen.undecided is not None and seen.undecided.kind == "pod-list"
    assert isinstance(seen.error, KubeError) and seen.error.status == 500


def test_a_pod_whose_generated_claim_is_not_named_yet_keeps_the_view_incomplete(
    pod_resources: FakePodResources, fake_api: FakeAPIServer, kube: KubeAPI
) -> None:
    """A 1.35 kubelet with the gate off names no claim; the pod list then meets a pod whose claim from a
    template its status does not name yet: that claim might be any adopted one."""
    with_kubelet(fake_api, "v1.35.0")
    pod_resources.dra_fields = False
    fake_api.add_pod("default", "new", NODE, generated={"gpu": ""})
    seen = lookup(pod_resources, kube).look(5)
    assert seen.undecided is not None and seen.undecided.kind == "unresolved"
    assert seen.sources == (POD_RESOURCES, POD_LIST)


def test_a_pod_list_needs_the_node_name() -> None:
    with pytest.raises(ValueError, match="never cluster-wide"):
        NodeClaimLookup(driver_name=facts.DRIVER_NAME, node_name="", pods=object())  # type: ignore[arg-type]
