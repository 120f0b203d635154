"""NodePoolRuntime at the SDK boundary: real volcenginesdkvke client against a fake VKE endpoint."""

from __future__ import annotations

import copy
import subprocess
import sys
from typing import Any

import pytest
from pulumi.dynamic.dynamic import serialize_provider
from vke_gpu_dra_core import facts

from components.readiness import NodeReadinessProvider
from components.runtime import UNKNOWN, NodePoolRuntimeError, NodePoolRuntimeProvider
from tests.program import fake_http, harness

UPDATE = "UpdateNodePoolConfig"
LIST = "ListNodePools"


def action(request: fake_http.Request) -> str:
    """The OpenAPI action of a request (POST /?Action=...&Version=2022-05-12)."""
    assert request.query["Version"] == ["2022-05-12"]
    return request.query["Action"][0]


def live_pool(
    runtime_type: str = "containerd",
    version: str = "1.6.28",
    min_r: int = 0,
    max_r: int = 2,
    phase: str = "Running",
) -> dict:
    return {
        "Id": "np-1",
        "ClusterId": "cc-1",
        "Name": "gpu-dra-dev",
        "Status": {"Phase": phase, "Conditions": [{"Type": "Ok"}]},
        "KubernetesConfig": {
            "Runtime": {"Type": runtime_type, "Version": version},
            "Cordon": False,
            "Labels": [{"Key": key, "Value": value} for key, value in facts.REQUIRED_NODE_LABELS.items()],
            "Taints": [{"Key": "gpu", "Value": "true", "Effect": "NoSchedule"}],
        },
        "AutoScaling": {
            "Enabled": True,
            "MinReplicas": min_r,
            "MaxReplicas": max_r,
            "DesiredReplicas": min_r,
        },
    }


class FakeVke:
    """Answers ListNodePools from `pools` and UpdateNodePoolConfig with success (or `update_error`).

    Like VKE, an accepted update is asynchronous: the pool's phase is then taken from
    `phases_after_update` (one per ListNodePools call, the last one repeated); before the first
    update from `phases_before_update` (none: the pool's own phase).
    """

    def __init__(self, pools: list[dict]) -> None:
        self.pools = pools
        self.update_error: str | None = None
        self.phases_after_update: list[str] = ["Running"]
        self.phases_before_update: list[str] = []
        self.updated = False

    def __call__(self, request: fake_http.Request) -> tuple[int, Any]:
        name = action(request)
        meta: dict[str, Any] = {
            "RequestId": "req-1",
            "Action": name,
            "Version": "2022-05-12",
            "Service": "vke",
            "Region": "cn-beijing",
        }
        if name == LIST:
            wanted = set(request.body["Filter"]["Ids"])
            items = copy.deepcopy([p for p in self.pools if p["Id"] in wanted])
            phases = self.phases_after_update if self.updated else self.phases_before_update
            if phases:
                phase = phases.pop(0) if len(phases) > 1 else phases[0]
                for item in items:
                    item["Status"]["Phase"] = phase
            result = {"Items": items, "TotalCount": len(items), "PageNumber": 1, "PageSize": 10}
            return 200, {"ResponseMetadata": meta, "Result": result}
        if name == UPDATE:
            if self.update_error:
                meta["Error"] = {"Code": "InvalidParameter", "Message": self.update_error}
                return 200, {"ResponseMetadata": meta}
            self.updated = True
            return 200, {"ResponseMetadata": meta, "Result": {}}
        return 404, {"ResponseMetadata": meta}


@pytest.fixture
def vke() -> Any:
    fake = FakeVke([live_pool()])
    with fake_http.serve(fake) as server:
        server.fake = fake  # type: ignore[attr-defined]
        yield server


def props(endpoint: str, **changes: Any) -> dict[str, Any]:
    base = {
        "cluster_id": "cc-1",
        "node_pool_id": "np-1",
        "runtime_type": "containerd",
        "runtime_version": "2.1",
        "min_replicas": 1,
        "max_replicas": 2,
        "desired_replicas": 1,
        "region": "cn-beijing",
        "endpoint": endpoint,
        "access_key": "AKTESTKEY",
        "secret_key": "test-secret-key",
        "session_token": None,
        "timeout_seconds": 5,
        "poll_seconds": 0.01,
    }
    base.update(changes)
    return base


def updates(server: Any) -> list[fake_http.Request]:
    return [r for r in server.requests if action(r) == UPDATE]


def test_create_pins_runtime_and_scales_through_update_node_pool_config(vke: Any) -> None:
    result = NodePoolRuntimeProvider().create(props(vke.url))
    assert result.id == "cc-1/np-1"
    assert [action(r) for r in vke.requests] == [LIST, UPDATE, LIST]
    listed = vke.requests[0].body
    assert listed["Filter"] == {"ClusterIds": ["cc-1"], "Ids": ["np-1"]}
    sent = vke.requests[1]
    assert sent.method == "POST"
    body = sent.body
    assert body["ClusterId"] == "cc-1"
    assert body["Id"] == "np-1"
    assert body["KubernetesConfig"]["Runtime"] == {"Type": "containerd", "Version": "2.1"}
    # labels, taints and cordon go back unchanged so the update cannot reset them
    assert body["KubernetesConfig"]["Labels"] == live_pool()["KubernetesConfig"]["Labels"]
    assert body["KubernetesConfig"]["Taints"] == live_pool()["KubernetesConfig"]["Taints"]
    assert body["KubernetesConfig"]["Cordon"] is False
    assert body["AutoScaling"] == {"Enabled": True, "MinReplicas": 1, "MaxReplicas": 2, "DesiredReplicas": 1}
    auth = sent.headers["authorization"]
    assert auth.startswith("HMAC-SHA256 Credential=AKTESTKEY/")
    assert "/cn-beijing/vke/request" in auth
    assert "test-secret-key" not in str(sent.headers)


def test_create_waits_until_the_pool_is_running_again(vke: Any) -> None:
    """UpdateNodePoolConfig is asynchronous: VKE answers at once and the pool goes Updating -> Running."""
    vke.fake.phases_after_update = ["Updating", "Updating", "Running"]
    NodePoolRuntimeProvider().create(props(vke.url))
    assert [action(r) for r in vke.requests] == [LIST, UPDATE, LIST, LIST, LIST]


def test_create_waits_for_a_busy_pool_before_updating_it(vke: Any) -> None:
    vke.fake.phases_before_update = ["Updating", "Running"]
    NodePoolRuntimeProvider().create(props(vke.url))
    assert [action(r) for r in vke.requests] == [LIST, LIST, UPDATE, LIST]


def test_create_fails_when_the_pool_update_fails(vke: Any) -> None:
    vke.fake.phases_after_update = ["Updating", "Failed"]
    with pytest.raises(NodePoolRuntimeError, match="node pool np-1 is Failed after UpdateNodePoolConfig"):
        NodePoolRuntimeProvider().create(props(vke.url))


def test_create_times_out_with_the_last_phase(vke: Any) -> None:
    vke.fake.phases_after_update = ["Updating"]
    with pytest.raises(NodePoolRuntimeError, match=r"not Running after 0\.2s \(phase Updating\)"):
        NodePoolRuntimeProvider().create(props(vke.url, timeout_seconds=0.2))


def test_create_fails_clearly_when_the_pool_does_not_exist(vke: Any) -> None:
    with pytest.raises(NodePoolRuntimeError, match="node pool np-404 not found in cluster cc-1"):
        NodePoolRuntimeProvider().create(props(vke.url, node_pool_id="np-404"))
    assert updates(vke) == []


def test_api_errors_are_reported(vke: Any) -> None:
    vke.fake.update_error = "Runtime version 9.9 is not supported"
    with pytest.raises(NodePoolRuntimeError, match="UpdateNodePoolConfig for node pool np-1 failed"):
        NodePoolRuntimeProvider().create(props(vke.url))


def test_update_sends_the_new_version(vke: Any) -> None:
    old = props(vke.url)
    new = props(vke.url, runtime_version="2.2")
    result = NodePoolRuntimeProvider().update("cc-1/np-1", old, new)
    assert result.outs is not None
    assert result.outs["runtime_version"] == "2.2"
    assert updates(vke)[-1].body["KubernetesConfig"]["Runtime"] == {"Type": "containerd", "Version": "2.2"}


def test_update_for_new_credentials_only_does_not_touch_the_pool(vke: Any) -> None:
    """Rotated credentials must not re-send desiredReplicas (that would undo the autoscaler's size)."""
    vke.fake.pools[:] = [live_pool(version="2.1.4", min_r=1)]
    old = props(vke.url, access_key="AKOLDKEY")
    result = NodePoolRuntimeProvider().update("cc-1/np-1", old, props(vke.url))
    assert updates(vke) == []
    assert result.outs is not None and result.outs["access_key"] == "AKTESTKEY"


def test_update_for_new_credentials_still_repairs_drift(vke: Any) -> None:
    vke.fake.pools[:] = [live_pool(version="2.0.5", min_r=1)]
    NodePoolRuntimeProvider().update("cc-1/np-1", props(vke.url, access_key="AKOLDKEY"), props(vke.url))
    assert len(updates(vke)) == 1


def test_diff_no_change_when_live_runtime_matches(vke: Any) -> None:
    vke.fake.pools[:] = [live_pool(version="2.1.4", min_r=1)]
    p = props(vke.url)
    diff = NodePoolRuntimeProvider().diff("cc-1/np-1", copy.deepcopy(p), p)
    assert diff.changes is False
    assert diff.replaces in (None, [])
    assert [action(r) for r in vke.requests] == [LIST]
    assert updates(vke) == []


def test_diff_detects_live_version_drift(vke: Any) -> None:
    vke.fake.pools[:] = [live_pool(version="2.0.5", min_r=1)]
    p = props(vke.url)
    assert NodePoolRuntimeProvider().diff("cc-1/np-1", copy.deepcopy(p), p).changes is True


def test_diff_detects_live_runtime_type_change(vke: Any) -> None:
    vke.fake.pools[:] = [live_pool(runtime_type="docker", version="2.1", min_r=1)]
    p = props(vke.url)
    assert NodePoolRuntimeProvider().diff("cc-1/np-1", copy.deepcopy(p), p).changes is True


def test_diff_detects_type_change_in_inputs_without_calling_the_api(vke: Any) -> None:
    old = props(vke.url, runtime_type="docker")
    diff = NodePoolRuntimeProvider().diff("cc-1/np-1", old, props(vke.url))
    assert diff.changes is True
    assert vke.requests == []


def test_diff_detects_version_change_in_inputs(vke: Any) -> None:
    diff = NodePoolRuntimeProvider().diff("cc-1/np-1", props(vke.url), props(vke.url, runtime_version="2.2"))
    assert diff.changes is True
    assert not diff.replaces


def test_diff_detects_scaling_drift(vke: Any) -> None:
    vke.fake.pools[:] = [live_pool(version="2.1", min_r=3, max_r=2)]
    p = props(vke.url)
    assert NodePoolRuntimeProvider().diff("cc-1/np-1", copy.deepcopy(p), p).changes is True


def test_diff_replaces_when_the_pool_changes(vke: Any) -> None:
    diff = NodePoolRuntimeProvider().diff("cc-1/np-1", props(vke.url), props(vke.url, node_pool_id="np-2"))
    assert diff.changes is True
    assert diff.replaces == ["node_pool_id"]


def test_diff_with_unknown_inputs_reports_a_change_without_calling_the_api(vke: Any) -> None:
    diff = NodePoolRuntimeProvider().diff("x", props(vke.url), props(vke.url, runtime_version=UNKNOWN))
    assert diff.changes is True
    assert vke.requests == []


def test_read_returns_the_live_runtime_and_scaling(vke: Any) -> None:
    vke.fake.pools[:] = [live_pool(version="2.0.5", min_r=1, max_r=4)]
    result = NodePoolRuntimeProvider().read("cc-1/np-1", props(vke.url))
    assert result.id == "cc-1/np-1"
    assert result.outs is not None
    assert result.outs["runtime_version"] == "2.0.5"
    assert (result.outs["min_replicas"], result.outs["max_replicas"]) == (1, 4)


def test_read_keeps_configured_spelling_for_the_same_release(vke: Any) -> None:
    vke.fake.pools[:] = [live_pool(version="2.1.4", min_r=1)]
    result = NodePoolRuntimeProvider().read("cc-1/np-1", props(vke.url))
    assert result.outs is not None
    assert result.outs["runtime_version"] == "2.1"


def test_read_of_a_deleted_pool_reports_it_gone(vke: Any) -> None:
    vke.fake.pools[:] = []
    assert NodePoolRuntimeProvider().read("cc-1/np-1", props(vke.url)).id is None


def test_provider_pickles_without_clients_or_credentials() -> None:
    provider = NodePoolRuntimeProvider()
    assert vars(provider) == {}
    assert serialize_provider(provider)


@pytest.mark.parametrize("provider", [NodePoolRuntimeProvider(), NodeReadinessProvider()])
def test_serialized_providers_load_in_a_fresh_process_started_in_the_project_root(provider: Any) -> None:
    """The engine runs `python -m pulumi.dynamic` in the project root: state's providers must load there."""
    code = (
        "import base64, sys, dill\n"
        "p = dill.loads(base64.b64decode(sys.stdin.read()))\n"
        "news = {'runtime_version': sys.argv[1], 'expected_nodes': sys.argv[1]}\n"
        "print(type(p).__name__, p.diff('x', {}, news).changes)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, UNKNOWN],
        input=serialize_provider(provider),
        capture_output=True,
        text=True,
        cwd=harness.ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [type(provider).__name__, "True"]
