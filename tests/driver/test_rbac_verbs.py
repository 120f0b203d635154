"""The chart's ClusterRole grants exactly the verbs the plugin's requests need, no more, no less.

The plugin runs in-process against the fake API server through everything that makes it call the API
(start, prepare, a stale slice of another pool, a deleted and an edited slice, a claim adopted from
NVIDIA's plugin without a name, looked for through the pods of its node); each recorded request is
mapped to its RBAC verb as the apiserver does, and compared with the rendered ClusterRole.
"""

from __future__ import annotations

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


def test_cluster_role_verbs_are_exactly_those_the_plugin_uses(
    short_tmp: Path, fake_api: FakeAPIServer, tmp_path: Path
) -> None:
    node = fake_api.add_node(NODE)
    fake_api.add_claim(claim("c1", "uid-1", "gpu-0"))
    spec = slice_spec(driver=facts.DRIVER_NAME, node_name=NODE, devices=[], generation=3, slice_count=1)
    spec["pool"]["name"] = "legacy-pool"  # stale: deleted by the plugin
    fake_api.create_slice(
        new_slice(spec, driver=facts.DRIVER_NAME, node_name=NODE, node_uid=node["metadata"]["uid"])
    )
    fake_api.add_pod("default", "p1", NODE, claims={"gpu": "c1"})
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

    plugin = Plugin(plugin_config(short_tmp, gpus=2), stop_grace=5)
    plugin.start()
    try:
        assert plugin.slices is not None and plugin.slices.wait_synced(10)
        assert plugin.reconciler is not None and plugin.reconciler.wait_rounds(1, 10)
        kubelet = Kubelet(plugin.registration_socket)
        kubelet.register()
        assert kubelet.prepare([("default", "c1", "uid-1")])["uid-1"]["error"] == ""
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
        # /version is a non-resource URL every authenticated user may read (system:public-info-viewer).
        used = {rbac_verb(m, u) for m, u in fake_api.requests if urlsplit(u).path != "/version"}

    role = find(require_helm(tmp_path).template({}), "ClusterRole", PLUGIN_ROLE)
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert used == granted, f"missing: {sorted(used - granted)}, unused: {sorted(granted - used)}"
    # pods are only ever listed on this node: RBAC cannot narrow that, the plugin does
    pod_lists = [u for m, u in fake_api.requests if urlsplit(u).path == "/api/v1/pods"]
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
    ],
)
def test_request_to_verb_mapping(method: str, url: str, expected: tuple[str, str, str]) -> None:
    assert rbac_verb(method, url) == expected
