"""NodeReadinessGate against Node objects served over HTTP to the real kubernetes client."""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.versions import format_version

from components.node_pool import POOL_LABEL_KEY, node_selector
from components.readiness import NodeReadinessError, NodeReadinessProvider, runtime_ok
from tests.program import fake_http

SELECTOR = node_selector("gpu-dra-dev")
MIN_CONTAINERD = format_version(facts.MIN_CONTAINERD_VERSION)


def node(
    name: str, runtime: str = "containerd://2.1.4", ready: str = "True", reason: str = "KubeletReady"
) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {facts.LABEL_GPU_SCHEDULE: facts.LABEL_GPU_SCHEDULE_DRA}},
        "status": {
            "conditions": [{"type": "Ready", "status": ready, "reason": reason}],
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": "b",
                "containerRuntimeVersion": runtime,
                "kernelVersion": "5.15",
                "kubeProxyVersion": "v1.34.1",
                "kubeletVersion": "v1.34.1",
                "machineID": "m",
                "operatingSystem": "linux",
                "osImage": "veLinux 2.0",
                "systemUUID": "u",
            },
        },
    }


class FakeApiServer:
    """Serves GET /api/v1/nodes from a list of snapshots (the last one repeats)."""

    def __init__(self, *snapshots: list[dict]) -> None:
        self.snapshots = list(snapshots)
        self.calls = 0

    def __call__(self, request: fake_http.Request) -> tuple[int, Any]:
        if request.path != "/api/v1/nodes":
            return 404, {"kind": "Status", "status": "Failure", "code": 404}
        items = self.snapshots[min(self.calls, len(self.snapshots) - 1)]
        self.calls += 1
        return 200, {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": items}


def kubeconfig(url: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": url}}],
            "users": [{"name": "u", "user": {"token": "t0ken"}}],
            "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "ctx",
        }
    )


def props(url: str, expected: int = 1, timeout: float = 0.4) -> dict[str, Any]:
    return {
        "kubeconfig": kubeconfig(url),
        "context": "",
        "node_pool_id": "np-1",
        "label_selector": SELECTOR,
        "expected_nodes": expected,
        "min_containerd": MIN_CONTAINERD,
        "timeout_seconds": timeout,
        "poll_seconds": 0.05,
    }


def run_create(api: FakeApiServer, **kwargs: Any) -> tuple[Any, list[fake_http.Request]]:
    with fake_http.serve(api) as server:
        result = NodeReadinessProvider().create(props(server.url, **kwargs))
        return result, server.requests


def create_error(api: FakeApiServer, **kwargs: Any) -> tuple[str, float]:
    start = time.monotonic()
    with fake_http.serve(api) as server, pytest.raises(NodeReadinessError) as info:
        NodeReadinessProvider().create(props(server.url, **kwargs))
    return str(info.value), time.monotonic() - start


def test_ready_nodes_with_containerd_2_1_pass() -> None:
    result, requests = run_create(FakeApiServer([node("192.168.2.8"), node("192.168.2.9")]), expected=2)
    assert result.outs["nodes"] == [
        {"name": "192.168.2.8", "runtime": "containerd://2.1.4"},
        {"name": "192.168.2.9", "runtime": "containerd://2.1.4"},
    ]
    assert requests[0].query["labelSelector"] == [SELECTOR]
    assert requests[0].headers["authorization"] == "Bearer t0ken"
    assert result.id == "ready-np-1"


def test_selector_uses_dra_label_and_pool_label() -> None:
    dra_label = f"{facts.LABEL_GPU_SCHEDULE}={facts.LABEL_GPU_SCHEDULE_DRA}"
    assert node_selector("gpu-dra-dev") == SELECTOR == f"{dra_label},{POOL_LABEL_KEY}=gpu-dra-dev"


def test_old_runtime_fails_at_once_naming_node_and_version() -> None:
    api = FakeApiServer([node("192.168.2.8", runtime="containerd://1.7.27"), node("192.168.2.9")])
    message, elapsed = create_error(api, expected=2, timeout=30)
    assert (
        f"node 192.168.2.8: container runtime containerd://1.7.27 is below containerd://{MIN_CONTAINERD}"
        in message
    )
    assert "192.168.2.9" not in message
    assert elapsed < 5  # no waiting: an old runtime does not fix itself


def test_other_runtime_is_reported() -> None:
    message, _ = create_error(FakeApiServer([node("n1", runtime="docker://24.0.7")]))
    assert f"node n1: container runtime docker://24.0.7 is below containerd://{MIN_CONTAINERD}" in message


def test_not_ready_node_times_out_with_its_condition() -> None:
    api = FakeApiServer([node("192.168.2.8", ready="False", reason="KubeletNotReady")])
    message, _ = create_error(api, timeout=0.3)
    assert message.startswith("timed out after 0.3s waiting for nodes with " + SELECTOR)
    assert "node 192.168.2.8: not Ready (Ready=False (KubeletNotReady))" in message
    assert api.calls >= 2  # it polled


def test_missing_nodes_time_out_with_counts() -> None:
    message, _ = create_error(FakeApiServer([node("192.168.2.8")]), expected=3, timeout=0.2)
    assert f"2 node(s) missing: expected 3 with labels {SELECTOR}, found 1" in message


def test_no_nodes_at_all_times_out() -> None:
    message, _ = create_error(FakeApiServer([]), timeout=0.2)
    assert "timed out after 0.2s" in message
    assert "1 node(s) missing" in message


def test_nodes_becoming_ready_pass_after_polling() -> None:
    api = FakeApiServer([], [node("n1", ready="False")], [node("n1")])
    result, requests = run_create(api, timeout=5)
    assert result.outs["nodes"] == [{"name": "n1", "runtime": "containerd://2.1.4"}]
    assert len(requests) == 3


@pytest.mark.parametrize(
    "text",
    [
        "users:\n- name: u\n  user: {token: s3cret-t0ken\n",  # broken YAML: PyYAML quotes the line
        "users: [{name: u, user: {token: s3cret-t0ken}}]\n",  # valid YAML, not a usable kubeconfig
    ],
)
def test_a_bad_kubeconfig_fails_without_showing_it(text: str) -> None:
    p = props("http://127.0.0.1:9") | {"kubeconfig": text}
    with pytest.raises(NodeReadinessError) as info:
        NodeReadinessProvider().create(p)
    message = "".join(str(e) for e in (info.value, info.value.__cause__, info.value.__context__) if e)
    assert "kubeconfig" in str(info.value)
    assert "s3cret" not in message


def test_diff_only_for_watched_inputs() -> None:
    p = props("http://127.0.0.1:1")
    provider = NodeReadinessProvider()
    assert provider.diff("x", dict(p), dict(p, kubeconfig="rotated")).changes is False
    assert provider.diff("x", dict(p), dict(p, expected_nodes=2)).changes is True
    assert provider.diff("x", dict(p), dict(p, min_containerd="2.2")).changes is True


@pytest.mark.parametrize(
    ("runtime", "ok"),
    [
        ("containerd://2.1.0", True),
        ("containerd://2.2.1", True),
        ("containerd://3.0.0", True),
        ("containerd://2.0.9", False),
        ("containerd://1.7.27", False),
        ("docker://2.1", False),
        ("", False),
    ],
)
def test_runtime_ok(runtime: str, ok: bool) -> None:
    assert runtime_ok(runtime, (2, 1)) is ok
