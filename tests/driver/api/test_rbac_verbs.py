"""The chart's ClusterRole grants exactly the verbs the plugin's requests need, no more, no less.

The plugin runs in-process against the fake API server through everything that makes it call the API
(start, prepare with its claim's status written, a stale slice of another pool, a deleted and an edited
slice, a claim adopted from NVIDIA's plugin without a name, looked for through kubelet's PodResources
API and, with the chart's `takeover.listPods`, the pods of its node); each recorded request is mapped to
its RBAC verb as the apiserver does, and compared with the ClusterRole rendered with the same values.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from vke_gpu_dra.fsutil import atomic_write
from vke_gpu_dra.plugin import Plugin
from vke_gpu_dra.slices import new_slice, slice_spec
from vke_gpu_dra.takeover import LEDGER_FILE, NvidiaClaim, NvidiaClaimState
from vke_gpu_dra.takeover.adoption import LedgerEntry, encode
from vke_gpu_dra.takeover.nvidia_checkpoint import NvidiaDevice, NvidiaGroup
from vke_gpu_dra_core import facts
from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer
from vke_gpu_dra_testing.fake_pod_resources import FakePodResources, UsedClaim
from vke_gpu_dra_testing.kubelet_client import Kubelet
from vke_gpu_dra_testing.plugin_env import NODE, claim, plugin_config

from tests.chart.chartlib import RELEASE, find, require_helm

PLUGIN_ROLE = f"{RELEASE}-vke-gpu-dra-driver-kubelet-plugin"


def rbac_verb(method: str, url: str) -> tuple[str, str, str]:
    """(apiGroup, resource, verb) of a request, by the apiserver's rules for resource requests."""
    split = urlsplit(url)
    parts = split.path.strip("/").split("/")
    if parts[0] == "api":  # /api/v1/...
        group, rest = "", parts[2:]
    else:  # /apis/<group>/<version>/...
        group, rest = parts[1], parts[3:]
    if rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource, named = rest[0], len(rest) > 1
    if len(rest) > 2:  # a subresource: <resource>/<name>/<subresource>
        resource = f"{rest[0]}/{rest[2]}"
    if method == "GET":
        verb = (
            "get"
            if named
            else ("watch" if "watch=true" in split.query or "watch=1" in split.query else "list")
        )
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]
        if method == "DELETE" and not named:
            verb = "deletecollection"
    return group, resource, verb


def plugin_requests(
    short_tmp: Path, fake_api: FakeAPIServer, pod_resources: FakePodResources | None
) -> list[tuple[str, str]]:
    """Run the plugin through everything that makes it call the API; the requests it made. With
    `pod_resources`, kubelet's PodResources API names the claim a container of the node uses; without,
    the node has none (the plugin then looks through the pod list)."""
    node = fake_api.add_node(NODE)
    # its device config stored as a Python JSON client sent it: the status apply is refused, and the plugin
    # writes the entries by an update of the claim in protobuf form
    parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}
    c1 = claim("c1", "uid-1", "gpu-0")
    c1["status"]["allocation"]["devices"]["config"] = [
        {
            "source": "FromClaim",
            "requests": ["gpu"],
            "opaque": {"driver": facts.DRIVER_NAME, "parameters": parameters},
        }
    ]
    fake_api.add_claim(c1, config_bytes=[json.dumps(parameters).encode()])
    spec = slice_spec(driver=facts.DRIVER_NAME, node_name=NODE, devices=[], generation=3, slice_count=1)
    spec["pool"]["name"] = "legacy-pool"  # stale: deleted by the plugin
    fake_api.create_slice(
        new_slice(spec, driver=facts.DRIVER_NAME, node_name=NODE, node_uid=node["metadata"]["uid"])
    )
    fake_api.add_pod("default", "p1", NODE, claims={"gpu": "c1"})
    if pod_resources is not None:
        pod_resources.add_pod("default", "p1", main=[UsedClaim("c1", [(NODE, "gpu-0")])])
    # a claim NVIDIA's 25.8.1 plugin prepared on gpu-1, adopted without a name: its pods are looked for
    unnamed = NvidiaClaim(
        "uid-nvidia",
        NvidiaClaimState.PREPARE_COMPLETED,
        (NvidiaGroup((NvidiaDevice("gpu", "GPU-1", "gpu-1", NODE, ("gpu",), ()),)),),
        (),
        frozenset(),
    )
    data_dir = short_tmp / "plugins" / facts.DRIVER_NAME
    data_dir.mkdir(parents=True)
    atomic_write(data_dir / LEDGER_FILE, encode({unnamed.uid: LedgerEntry(unnamed)}))
    fake_api.requests.clear()

    socket = pod_resources.socket if pod_resources else short_tmp / "no-kubelet" / "kubelet.sock"
    config = replace(plugin_config(short_tmp, gpus=2), pod_resources_socket=socket)
    plugin = Plugin(config, stop_grace=5)
    plugin.start()
    try:
        assert plugin.slices is not None and plugin.slices.wait_synced(10)
        assert plugin.reconciler is not None and plugin.reconciler.wait_rounds(1, 10)
        kubelet = Kubelet(plugin.registration_socket)
        kubelet.register()
        assert kubelet.prepare([("default", "c1", "uid-1")])["uid-1"]["error"] == ""
        assert fake_api.wait_for(lambda: fake_api.count("PUT", "/resourceclaims/c1/status") == 1)
        kubelet.close()
        [published] = fake_api.slices_of(NODE)
        fake_api.edit_slice(
            published["metadata"]["name"], lambda o: o["spec"].update(devices=o["spec"]["devices"][:1])
        )
        assert fake_api.wait_for(lambda: fake_api.count("PUT", "/resourceslices/") >= 1)
        fake_api.delete_slice(published["metadata"]["name"])
        assert fake_api.wait_for(lambda: len(fake_api.slices_of(NODE)) == 1 and fake_api.count("POST") >= 2)
    finally:
        plugin.stop()
    with fake_api.cond:
        return list(fake_api.requests)


def authorization_checks(method: str, url: str) -> set[tuple[str, str, str]]:
    """What the API server authorizes for a request: its RBAC verb, and for a write of a claim's status the
    check of each driver whose `status.devices` entries it changes (Kubernetes 1.36+,
    DRAResourceClaimGranularStatusAuthorization): `associated-node:<verb>` on `resourceclaims/driver` for a
    service account bound to the node the claim is allocated to (the plugin writes only its own driver's)."""
    group, resource, verb = rbac_verb(method, url)
    checks = {(group, resource, verb)}
    if resource == "resourceclaims/status" and verb in ("update", "patch"):
        checks.add((group, "resourceclaims/driver", f"associated-node:{verb}"))
    return checks


def verbs(requests: list[tuple[str, str]]) -> set[tuple[str, str, str]]:
    # /version is a non-resource URL every authenticated user may read (system:public-info-viewer).
    return {c for m, u in requests if urlsplit(u).path != "/version" for c in authorization_checks(m, u)}


def granted(helm_home: Path, values: dict) -> set[tuple[str, str, str]]:
    role = find(require_helm(helm_home).template(values), "ClusterRole", PLUGIN_ROLE)
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_cluster_role_verbs_are_exactly_those_the_plugin_uses(
    short_tmp: Path, fake_api: FakeAPIServer, pod_resources: FakePodResources, tmp_path: Path
) -> None:
    """The default chart: kubelet's PodResources API names the node's claims, no pod is ever listed."""
    used = verbs(plugin_requests(short_tmp, fake_api, pod_resources))
    allowed = granted(tmp_path, {})
    assert used == allowed, f"missing: {sorted(used - allowed)}, unused: {sorted(allowed - used)}"
    assert ("", "pods", "list") not in used and pod_resources.calls >= 1


def test_with_list_pods_the_plugin_lists_only_its_own_nodes_pods_and_nothing_else(
    short_tmp: Path, fake_api: FakeAPIServer, tmp_path: Path
) -> None:
    """`takeover.listPods`: where kubelet's PodResources API cannot tell (here: none on the node), the
    plugin lists the pods of its node, the one verb the switch adds."""
    requests = plugin_requests(short_tmp, fake_api, None)
    used = verbs(requests)
    allowed = granted(tmp_path, {"takeover": {"listPods": True}})
    assert used == allowed, f"missing: {sorted(used - allowed)}, unused: {sorted(allowed - used)}"
    assert allowed - granted(tmp_path, {}) == {("", "pods", "list")}
    # pods are only ever listed on this node: RBAC cannot narrow that, the plugin does
    pod_lists = [u for m, u in requests if urlsplit(u).path == "/api/v1/pods"]
    assert pod_lists and set(pod_lists) == {f"/api/v1/pods?fieldSelector=spec.nodeName%3D{NODE}"}


@pytest.mark.parametrize(
    ("method", "url", "expected"),
    [
        ("GET", "/api/v1/nodes/n", ("", "nodes", "get")),
        (
            "GET",
            "/apis/resource.k8s.io/v1/namespaces/d/resourceclaims/c",
            ("resource.k8s.io", "resourceclaims", "get"),
        ),
        ("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn", ("", "pods", "list")),
        (
            "GET",
            "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=x",
            ("resource.k8s.io", "resourceslices", "list"),
        ),
        (
            "GET",
            "/apis/resource.k8s.io/v1/resourceslices?watch=true",
            ("resource.k8s.io", "resourceslices", "watch"),
        ),
        (
            "PATCH",
            "/apis/resource.k8s.io/v1/resourceslices/s",
            ("resource.k8s.io", "resourceslices", "patch"),
        ),
        (
            "DELETE",
            "/apis/resource.k8s.io/v1/resourceslices",
            ("resource.k8s.io", "resourceslices", "deletecollection"),
        ),
        (
            "PATCH",
            "/apis/resource.k8s.io/v1/namespaces/d/resourceclaims/c/status?fieldManager=m&force=true",
            ("resource.k8s.io", "resourceclaims/status", "patch"),
        ),
        (
            "PUT",
            "/apis/resource.k8s.io/v1/namespaces/d/resourceclaims/c/status?fieldManager=m",
            ("resource.k8s.io", "resourceclaims/status", "update"),
        ),
    ],
)
def test_request_to_verb_mapping(method: str, url: str, expected: tuple[str, str, str]) -> None:
    assert rbac_verb(method, url) == expected
