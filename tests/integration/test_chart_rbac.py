"""The chart's objects on a real API server (Kubernetes 1.37, the newest release, and 1.34, VKE's): RBAC with
a real service-account token, and the ValidatingAdmissionPolicy that confines the kubelet plugin to its own
node's ResourceSlices."""

from __future__ import annotations

import functools
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from vke_gpu_dra.kubeapi import KubeAPI, KubeError
from vke_gpu_dra_core import facts

from tests.chart.chartlib import CHART_DIR, find_helm
from tools import toolchain

from .cluster import Cluster
from .controlplane import ApiError, Client, wait_until

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def resource_slice(node: str, *, devices: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{uuid.uuid4().hex[:6]}"},
        "spec": {
            "driver": facts.DRIVER_NAME,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(devices)],
        },
    }


def refusal(client: Client, admin: Client, obj: dict[str, Any]) -> ApiError | None:
    """The API server's refusal of creating `obj` with `client`; None (and the object removed) if it was
    accepted, as it is in the moment before a new policy is in force."""
    try:
        client.create(SLICES, obj)
    except ApiError as exc:
        return exc
    admin.delete(f"{SLICES}/{obj['metadata']['name']}")
    return None


@pytest.fixture
def plugin_setup(each_cluster: Cluster) -> dict[str, Any]:
    """The chart installed, two GPU nodes, the plugin's pod on the first, a token bound to that pod."""
    return set_up_plugin(each_cluster)


def set_up_plugin(each_cluster: Cluster, values: dict[str, Any] | None = None) -> dict[str, Any]:
    """`plugin_setup` with the chart's `values`."""
    objects = each_cluster.install_chart(values=values)
    own, other = each_cluster.add_node("a"), each_cluster.add_node("b")
    pod = each_cluster.plugin_pod(objects, own["metadata"]["name"])
    [service_account] = [o for o in objects if o["kind"] == "ServiceAccount"]
    token = each_cluster.token(service_account["metadata"]["name"], pod)
    [policy] = [
        o
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"].endswith("-resourceslices")
    ]
    return {
        "objects": objects,
        "own": own["metadata"]["name"],
        "other": other["metadata"]["name"],
        "client": each_cluster.plane.client(token),
        "service_account": service_account["metadata"]["name"],
        "pod": pod["metadata"]["name"],
        "token": token,
        "policy": policy["metadata"]["name"],
    }


def test_every_rendered_object_is_accepted(each_cluster: Cluster) -> None:
    objects = each_cluster.install_chart()
    kinds = {o["kind"] for o in objects}
    assert {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "DeviceClass",
            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "Service"} <= kinds  # fmt: skip
    [daemonset] = [o for o in objects if o["kind"] == "DaemonSet"]
    stored = each_cluster.api.get(f"/apis/apps/v1/namespaces/{each_cluster.namespace}/daemonsets/"
                             f"{daemonset['metadata']['name']}")  # fmt: skip
    assert (
        stored["spec"]["template"]["spec"]["serviceAccountName"]
        == (daemonset["spec"]["template"]["spec"]["serviceAccountName"])
    )
    classes = {
        dc["metadata"]["name"] for dc in each_cluster.api.items("/apis/resource.k8s.io/v1/deviceclasses")
    }
    assert {spec.name for spec in facts.DEVICE_CLASSES} <= classes


def test_admission_policy_type_checks_clean(each_cluster: Cluster) -> None:
    """The server's own type check of the policies' CEL (the status controller): no warnings."""
    objects = each_cluster.install_chart()
    policies = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
    assert len(policies) == 2  # the plugin's slices, its entries in claims' status

    def checked(path: str) -> dict[str, Any] | None:
        stored = each_cluster.api.get(path)
        status = stored.get("status") or {}
        done = (
            status.get("observedGeneration") == stored["metadata"]["generation"] and "typeChecking" in status
        )
        return status if done else None

    for policy in policies:
        path = (
            f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{policy['metadata']['name']}"
        )
        status = wait_until(functools.partial(checked, path), timeout=60)
        assert status is not None, f"{path} was never type-checked"
        assert not status["typeChecking"].get("expressionWarnings"), (path, status)


def test_plugin_token_writes_its_own_nodes_slices(
    each_cluster: Cluster, plugin_setup: dict[str, Any]
) -> None:
    client: Client = plugin_setup["client"]
    own = resource_slice(plugin_setup["own"])
    created = client.create(SLICES, own)
    assert created["spec"]["nodeName"] == plugin_setup["own"]
    created["spec"]["devices"].append({"name": "gpu-1"})
    updated = client.replace(f"{SLICES}/{own['metadata']['name']}", created)
    assert [d["name"] for d in updated["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    names = [
        s["metadata"]["name"]
        for s in client.items(SLICES, fieldSelector=f"spec.nodeName={plugin_setup['own']}")
    ]
    assert names == [own["metadata"]["name"]]
    client.delete(f"{SLICES}/{own['metadata']['name']}")
    assert not each_cluster.slices_of(plugin_setup["own"])


def test_another_nodes_slice_is_refused_by_the_policy(
    each_cluster: Cluster, plugin_setup: dict[str, Any]
) -> None:
    client: Client = plugin_setup["client"]
    # A new policy takes effect within a second or two: until then a write may pass (and is undone).
    error = wait_until(
        lambda: refusal(client, each_cluster.api, resource_slice(plugin_setup["other"])), timeout=30
    )
    assert error is not None, "the policy never refused a slice of another node"
    assert error.status == 403
    assert plugin_setup["policy"] in error.message
    assert (
        f"the kubelet plugin on node '{plugin_setup['own']}' may only write ResourceSlices of its own node, "
        f"not slices of node '{plugin_setup['other']}'"
    ) in error.message
    assert not each_cluster.slices_of(plugin_setup["other"])

    # Nor may it change or delete a slice another node's plugin published.
    theirs = each_cluster.api.create(SLICES, resource_slice(plugin_setup["other"]))
    path = f"{SLICES}/{theirs['metadata']['name']}"
    theirs["spec"]["devices"].append({"name": "gpu-9"})
    with pytest.raises(ApiError) as update:
        client.replace(path, theirs)
    assert update.value.status == 403
    assert f"not slices of node '{plugin_setup['other']}'" in update.value.message
    with pytest.raises(ApiError) as delete:
        client.delete(path)
    assert delete.value.status == 403
    assert f"not slices of node '{plugin_setup['other']}'" in delete.value.message
    # Moving a slice to another node is refused by the API server itself: spec.nodeName is immutable.
    theirs["spec"]["nodeName"] = plugin_setup["own"]
    with pytest.raises(ApiError) as move:
        each_cluster.api.replace(path, theirs)
    assert move.value.status == 422 and "field is immutable" in move.value.message
    each_cluster.api.delete(path)


def test_a_token_not_bound_to_a_pod_on_a_node_writes_no_slice(
    each_cluster: Cluster, plugin_setup: dict[str, Any]
) -> None:
    client = each_cluster.plane.client(each_cluster.token(plugin_setup["service_account"]))
    error = wait_until(
        lambda: refusal(client, each_cluster.api, resource_slice(plugin_setup["own"])), timeout=30
    )
    assert error is not None and error.status == 403
    assert "no node is associated with this request" in error.message


def may_list_pods(each_cluster: Cluster, service_account: str) -> bool:
    """The API server's answer to a SubjectAccessReview: may the account list pods, cluster-wide?"""
    review = each_cluster.api.create(
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{each_cluster.namespace}:{service_account}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{each_cluster.namespace}"],
                "resourceAttributes": {"verb": "list", "resource": "pods", "version": "v1"},
            },
        },
    )
    return bool(review["status"]["allowed"])


def node_pods(each_cluster: Cluster, setup: dict[str, Any], node: str, tmp_path: Path) -> list[str]:
    """The plugin's own call (`KubeAPI.list_node_pods`, a quorum list scoped by `spec.nodeName`) with the
    token bound to its pod, as reconciliation makes it for adopted claims without a name."""
    kubeconfig = each_cluster.plane.write_kubeconfig(tmp_path / "kubeconfig", setup["token"])
    api = KubeAPI.from_kubeconfig(kubeconfig)
    try:
        return [p["metadata"]["name"] for p in api.list_node_pods(node, timeout=10)]
    finally:
        api.close()


def test_the_default_chart_never_lets_the_plugin_list_pods(
    each_cluster: Cluster, plugin_setup: dict[str, Any], tmp_path: Path
) -> None:
    """No pods at all by default: adopted claims without a name are looked for through kubelet's
    PodResources API on the node, which needs no grant."""
    assert may_list_pods(each_cluster, plugin_setup["service_account"]) is False
    with pytest.raises(KubeError) as denied:
        node_pods(each_cluster, plugin_setup, plugin_setup["own"], tmp_path)
    assert denied.value.status == 403
    assert f"system:serviceaccount:{each_cluster.namespace}:{plugin_setup['service_account']}" in str(
        denied.value
    )


def test_with_list_pods_the_plugin_token_lists_the_pods_of_its_node(
    each_cluster: Cluster, tmp_path: Path
) -> None:
    """`takeover.listPods: true` adds `list` on pods (cluster-wide, as RBAC cannot narrow it); the plugin
    itself only ever lists its own node's pods."""
    setup = set_up_plugin(each_cluster, {"takeover": {"listPods": True}})
    assert may_list_pods(each_cluster, setup["service_account"]) is True
    assert node_pods(each_cluster, setup, setup["own"], tmp_path) == [setup["pod"]]
    assert node_pods(each_cluster, setup, setup["other"], tmp_path) == []


def test_the_cluster_role_grants_nothing_else(each_cluster: Cluster, plugin_setup: dict[str, Any]) -> None:
    client: Client = plugin_setup["client"]
    own = plugin_setup["own"]
    assert client.get(f"/api/v1/nodes/{own}")["metadata"]["name"] == own
    for method, path in [
        ("GET", f"/api/v1/namespaces/{each_cluster.namespace}/pods/{plugin_setup['pod']}"),  # no pods
        ("GET", "/api/v1/pods"),
        ("GET", "/api/v1/pods?watch=true"),
        ("GET", f"{SLICES}/anything"),  # list and watch, never get
        ("PATCH", f"/api/v1/nodes/{own}"),
        ("GET", f"/apis/resource.k8s.io/v1/namespaces/{each_cluster.namespace}/resourceclaims"),
        ("GET", f"/apis/resource.k8s.io/v1/namespaces/{each_cluster.namespace}/resourceclaims/c/status"),
        ("PATCH", f"/apis/resource.k8s.io/v1/namespaces/{each_cluster.namespace}/resourceclaims/c"),
    ]:
        with pytest.raises(ApiError) as denied:
            client.request(method, path, {} if method == "PATCH" else None,
                           content_type="application/merge-patch+json")  # fmt: skip
        assert denied.value.status == 403, (method, path)
        assert f"system:serviceaccount:{each_cluster.namespace}:{plugin_setup['service_account']}" in (
            denied.value.message
        )


def test_the_server_is_the_release_it_is(each_cluster: Cluster) -> None:
    """The binaries are the release the toolchain pins (v1.37.2, v1.34.4), stamped: /version names it, and
    the server emulates no other (its emulation version is its own, its minimum compatibility version the
    release before)."""
    version = each_cluster.api.get("/version")
    minor = each_cluster.plane.version
    pinned = toolchain.recipes()[toolchain.KUBERNETES[minor]].version
    assert pinned.startswith(f"v{minor}.")
    major, number = minor.split(".")
    assert {k: version.get(k) for k in (
        "gitVersion", "major", "minor", "emulationMajor", "emulationMinor",
        "minCompatibilityMajor", "minCompatibilityMinor", "gitTreeState",
    )} == {
        "gitVersion": pinned, "major": major, "minor": number,
        "emulationMajor": major, "emulationMinor": number,
        "minCompatibilityMajor": major, "minCompatibilityMinor": str(int(number) - 1),
        "gitTreeState": "clean",
    }  # fmt: skip


def test_device_taints_are_kept_on_137_and_dropped_on_134(each_cluster: Cluster) -> None:
    """DRADeviceTaints is GA (on) in 1.37 and alpha (off) in 1.34, where the API server drops the field: a
    1.34 cluster never sees the taints a driver might publish."""
    node = each_cluster.node_name("taints")
    obj = resource_slice(node)
    taint = {"key": "example.com/unhealthy", "value": "true", "effect": "NoSchedule"}
    obj["spec"]["devices"][0]["taints"] = [taint]
    created = each_cluster.apply(obj)
    kept = created["spec"]["devices"][0].get("taints")
    if each_cluster.plane.version == "1.34":
        assert kept is None
    else:
        assert kept and kept[0]["key"] == taint["key"] and kept[0]["effect"] == "NoSchedule"


def test_the_chart_notes_render_for_the_release(cluster: Cluster) -> None:
    """`helm install --dry-run=client` against the server (helm 3 checks it is reachable and that the
    release's objects are its own to take): the NOTES name the release's namespace and its `helm test`."""
    helm = find_helm()
    assert helm, "helm not found: run scripts/setup"
    release = "notes"
    home = cluster.tmp / "helm"
    result = subprocess.run(
        [str(helm), "install", "--dry-run=client", release, str(CHART_DIR), "--namespace", cluster.namespace,
         "--kubeconfig", str(cluster.plane.kubeconfig),
         # The DeviceClasses other tests made are no release's: helm would refuse to adopt them.
         "--set", "deviceClasses.enabled=false"],
        capture_output=True, text=True, check=False, timeout=120,
        env={**os.environ, **{f"HELM_{kind}_HOME": str(home) for kind in ("CACHE", "CONFIG", "DATA")}},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    notes = out.split("NOTES:", 1)[1]
    assert f"kubectl get pods -n {cluster.namespace} -o wide" in notes
    assert f"helm test {release} -n {cluster.namespace}" in notes
