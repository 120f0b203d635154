"""`pulumi up`, `refresh`, an update and `destroy` of a stack aimed at an existing cluster: the real
API server, scheduler and controllers of the toolchain, Kubernetes 1.34 (VKE's release) and 1.38 (the
next, where the DynamicResourceAllocation gate is gone and device taints are locked on), one GPU node
whose kubelet the node agent plays (`kubelet.py`), a prebuilt driver image and no Docker.

The real Kubernetes provider installs the chart's Helm release (and waits for its DaemonSet, whose pod
the agent runs as the plugin process, publishing simulated GPUs), the DeviceClasses and the sample (and
waits for its Deployment, whose pod gets its claim allocated by the scheduler and prepared by the
plugin). Then: a refresh finds no drift; a config change updates exactly the sample's Deployment; another
sample namespace previews as a replacement of the namespace and what lives in it; destroy leaves none of the
stack's objects on the server.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt

from tests.integration.controlplane import NEXT, VKE, ApiError, ControlPlane

from .conftest import timed
from .kubelet import NodeAgent, wait_for
from .workspace import SAMPLE_NAMESPACE, Workspace

STACK = "engine"


def _server_objects(api: Any) -> dict[str, list[str]]:
    """The stack's objects on the server, by kind (empty lists when none)."""
    ns = facts.DRIVER_NAMESPACE

    def names(path: str, **query: str) -> list[str]:
        try:
            return sorted(o["metadata"]["name"] for o in api.items(path, **query))
        except ApiError as exc:
            if exc.status == 404:
                return []
            raise

    return {
        "namespaces": [n for n in names("/api/v1/namespaces") if n in (ns, SAMPLE_NAMESPACE)],
        "deviceclasses": names("/apis/resource.k8s.io/v1/deviceclasses"),
        "daemonsets": names(f"/apis/apps/v1/namespaces/{ns}/daemonsets"),
        "helm releases": names(f"/api/v1/namespaces/{ns}/secrets", labelSelector="owner=helm"),
        "clusterroles": [n for n in names("/apis/rbac.authorization.k8s.io/v1/clusterroles") if "dra" in n],
        "admission policies": names("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"),
        "claim templates": names(
            f"/apis/resource.k8s.io/v1/namespaces/{SAMPLE_NAMESPACE}/resourceclaimtemplates"
        ),
        "deployments": names(f"/apis/apps/v1/namespaces/{SAMPLE_NAMESPACE}/deployments"),
    }


@pytest.mark.parametrize("plane", [VKE, NEXT], indirect=True)
def test_up_refresh_update_destroy_on_a_real_api_server(
    workspace: Workspace, plane: ControlPlane, gpu_node: tuple[str, NodeAgent]
) -> None:
    node, agent = gpu_node
    api = plane.admin()
    assert api.get("/version")["minor"] == str(plane.release[1]), "the release the test names"
    workspace.aim_at(plane, STACK)
    workspace.stack_init(STACK)

    run, events = workspace.up(STACK, check=False)
    assert run.returncode == 0, f"{events.errors()}\n{run.stderr[-3000:]}\n{agent.report()}"
    timed(f"{plane.version}: up (existing cluster: Helm release, DeviceClasses, sample)", run.seconds)

    # What the real provider created, and the pod the scheduler and the plugin made run.
    objects = _server_objects(api)
    assert objects["namespaces"] == sorted([facts.DRIVER_NAMESPACE, SAMPLE_NAMESPACE])
    assert objects["deviceclasses"] == sorted(spec.name for spec in facts.DEVICE_CLASSES)
    assert objects["claim templates"] == ["single-gpu"] and objects["deployments"] == ["gpu-test"]
    assert len(objects["helm releases"]) == 1 and objects["daemonsets"]
    [pod] = api.items(f"/api/v1/namespaces/{SAMPLE_NAMESPACE}/pods")
    assert pod["spec"]["nodeName"] == node and pod["status"]["phase"] == "Running"
    [claim] = api.items(f"/apis/resource.k8s.io/v1/namespaces/{SAMPLE_NAMESPACE}/resourceclaims")
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"]) == (facts.DRIVER_NAME, node)
    assert any(f"prepared {SAMPLE_NAMESPACE}/" in e for e in agent.events), agent.report()
    outputs = json.loads(workspace.pulumi("stack", "output", "--stack", STACK, "--json").stdout)
    assert outputs["driverNamespace"] == facts.DRIVER_NAMESPACE
    assert outputs["sample"]["namespace"] == SAMPLE_NAMESPACE
    assert events.one(pt.HELM_RELEASE).op == "create"

    # Refresh: the state matches the server.
    refresh = workspace.pulumi("refresh", "--stack", STACK, "--yes", "--expect-no-changes", "--json")
    assert refresh.events().result == "succeeded"
    timed(f"{plane.version}: refresh", refresh.seconds)

    # A config change is an update of exactly what it changes.
    workspace.config_set(STACK, {"sample.image": "busybox:1.36"})
    _, preview = workspace.preview(STACK)
    changed = {s.name: s.op for s in preview.steps if s.op != "same"}
    assert changed == {"sample-deployment": "update"}, changed
    assert preview.one(pt.DEPLOYMENT).diffs, preview.one(pt.DEPLOYMENT)
    run, events = workspace.up(STACK)
    assert [s.name for s in events.steps if s.op == "update"] == ["sample-deployment"]
    timed(f"{plane.version}: update (the sample's image)", run.seconds)
    wait_for(lambda: len(api.items(f"/api/v1/namespaces/{SAMPLE_NAMESPACE}/pods")) == 1, timeout=60)

    # Another namespace for the sample replaces its namespace and what lives in it, new ones first.
    workspace.config_set(STACK, {"sample.namespace": "gpu-samples-2"})
    _, preview = workspace.preview(STACK)
    ops: dict[str, set[str]] = {}
    for step in preview.steps:
        if step.op != "same":
            ops.setdefault(step.name, set()).add(step.op)
    replacement = {"create-replacement", "replace", "delete-replaced"}
    assert ops == {
        n: replacement for n in ("sample-namespace", "sample-claim-template", "sample-deployment")
    }, ops
    workspace.config_set(STACK, {"sample.namespace": SAMPLE_NAMESPACE})

    # Destroy: nothing of the stack is left on the server.
    destroy = workspace.pulumi("destroy", "--stack", STACK, "--yes", "--json", timeout=600)
    timed(f"{plane.version}: destroy", destroy.seconds)
    assert destroy.events().result == "succeeded"
    left = _server_objects(api)
    assert {kind: names for kind, names in left.items() if names} == {}, agent.report()
