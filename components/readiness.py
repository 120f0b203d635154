"""`NodeReadinessGate`: waits for a node pool's nodes to be Ready with containerd 2.1+.

The driver must not be installed before the GPU nodes exist and run a containerd that supports
DRA's CDI injection. This dynamic resource lists the nodes selected by a label selector (the DRA
label plus the pool's own label) with the Kubernetes client and the stack's secret kubeconfig,
and succeeds once the expected number of nodes are Ready. It fails with one message naming every
node whose `status.nodeInfo.containerRuntimeVersion` is below the minimum (immediately: waiting
cannot fix it), every node that is not Ready and the number of missing nodes (after the timeout).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pulumi
import yaml
from kubernetes import client, config
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider, UpdateResult
from vke_gpu_dra_core import facts, versions

WATCHED_KEYS: Final = ("label_selector", "expected_nodes", "min_containerd", "node_pool_id")


class NodeReadinessError(RuntimeError):
    """The pool's nodes did not become ready with a suitable runtime."""


@dataclass(frozen=True)
class NodeReport:
    name: str
    ready: bool
    ready_detail: str
    runtime: str
    runtime_ok: bool


def runtime_ok(runtime: str, minimum: tuple[int, int]) -> bool:
    """True for `containerd://X.Y…` with (X, Y) >= minimum."""
    version = versions.runtime_major_minor(runtime or "")
    return version is not None and version >= minimum


def parse_minimum(text: str) -> tuple[int, int]:
    """The minimum containerd release, MAJOR.MINOR[.PATCH] (the gate's own input)."""
    version = versions.release_major_minor(text)
    if version is None:
        raise ValueError(f"min_containerd {text!r}: expected MAJOR.MINOR such as 2.1")
    return version


def inspect_nodes(nodes: Sequence[Any], minimum: tuple[int, int]) -> list[NodeReport]:
    """Reports for V1Node objects from the Kubernetes client."""
    reports = []
    for node in nodes:
        status = node.status
        conditions = (status.conditions if status is not None else None) or []
        ready = next((c for c in conditions if c.type == "Ready"), None)
        is_ready = ready is not None and ready.status == "True"
        if ready is None:
            detail = "no Ready condition"
        else:
            detail = f"Ready={ready.status}" + (f" ({ready.reason})" if ready.reason else "")
        info = status.node_info if status is not None else None
        runtime = (info.container_runtime_version if info is not None else "") or ""
        ok = runtime_ok(runtime, minimum)
        reports.append(NodeReport(node.metadata.name, is_ready, detail, runtime, ok))
    return reports


def problems(
    reports: Sequence[NodeReport], expected: int, minimum: tuple[int, int], selector: str
) -> list[str]:
    found: list[str] = []
    min_text = f"containerd://{minimum[0]}.{minimum[1]}"
    for r in reports:
        if not r.runtime_ok:
            found.append(
                f"node {r.name}: container runtime {r.runtime or '(none reported)'} is below {min_text}"
            )
    for r in reports:
        if not r.ready:
            found.append(f"node {r.name}: not Ready ({r.ready_detail})")
    if len(reports) < expected:
        found.append(
            f"{expected - len(reports)} node(s) missing: expected {expected} with labels {selector}, "
            f"found {len(reports)}"
        )
    return found


def _core_api(props: Mapping[str, Any]) -> Any:
    """A CoreV1Api for the secret kubeconfig; a parse error names no part of it (PyYAML quotes lines)."""
    context = props.get("context") or None
    failure = ""
    api_client: Any = None
    try:
        kubeconfig = yaml.safe_load(props["kubeconfig"])
        api_client = config.new_client_from_config_dict(kubeconfig, context=context)
    except Exception as exc:  # yaml and kubernetes config errors may quote the (secret) text
        failure = type(exc).__name__
    if failure:  # raised outside the handler, so no traceback carries the original error
        raise NodeReadinessError(f"the cluster's kubeconfig (secret, not shown) is not usable: {failure}")
    return client.CoreV1Api(api_client)


def wait_for_nodes(props: Mapping[str, Any]) -> list[dict[str, str]]:
    """Poll until the nodes are ready or fail; return name and runtime of each node."""
    api = _core_api(props)
    selector = str(props["label_selector"])
    expected = int(props["expected_nodes"])
    minimum = parse_minimum(str(props["min_containerd"]))
    timeout = float(props["timeout_seconds"])
    poll = float(props.get("poll_seconds") or 10)
    deadline = time.monotonic() + timeout
    while True:
        try:
            nodes = api.list_node(label_selector=selector, _request_timeout=30).items
            error = ""
        except Exception as exc:  # transport and API errors: retried until the deadline
            nodes, error = [], f"listing nodes failed: {exc}"
        reports = inspect_nodes(nodes, minimum)
        found = problems(reports, expected, minimum, selector)
        if not error and not found:
            return [{"name": r.name, "runtime": r.runtime} for r in reports]
        bad_runtime = [r for r in reports if not r.runtime_ok]
        timed_out = time.monotonic() >= deadline
        if bad_runtime or timed_out:
            head = (
                f"nodes with {selector} have a container runtime below the minimum"
                if bad_runtime and not timed_out
                else f"timed out after {timeout:g}s waiting for nodes with {selector}"
            )
            lines = [*found, *([error] if error else [])]
            raise NodeReadinessError(head + ":\n" + "\n".join(f"  - {line}" for line in lines))
        time.sleep(min(poll, max(deadline - time.monotonic(), 0.0)))


class NodeReadinessProvider(ResourceProvider):
    """CRUD for `NodeReadinessGate`: create and update wait; nothing to delete."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        nodes = wait_for_nodes(props)
        return CreateResult(id_=f"ready-{props['node_pool_id']}", outs={**props, "nodes": nodes})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        return ReadResult(id_, props)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return DiffResult(changes=any(olds.get(k) != news.get(k) for k in WATCHED_KEYS))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(outs={**news, "nodes": wait_for_nodes(news)})


class NodeReadinessGate(Resource, module="vke", name="NodeReadinessGate"):
    """Waits for `expected_nodes` nodes matching `label_selector` to be Ready with containerd >= minimum."""

    nodes: pulumi.Output[list[dict[str, str]]]

    def __init__(
        self,
        name: str,
        *,
        kubeconfig: pulumi.Input[str],
        node_pool_id: pulumi.Input[str],
        label_selector: str,
        expected_nodes: int,
        timeout_seconds: int,
        min_containerd: str = versions.format_version(facts.MIN_CONTAINERD_VERSION),
        context: str = "",
        poll_seconds: int = 10,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props: dict[str, Any] = {
            "kubeconfig": pulumi.Output.secret(kubeconfig),
            "context": context,
            "node_pool_id": node_pool_id,
            "label_selector": label_selector,
            "expected_nodes": expected_nodes,
            "min_containerd": min_containerd,
            "timeout_seconds": timeout_seconds,
            "poll_seconds": poll_seconds,
            "nodes": None,
        }
        super().__init__(NodeReadinessProvider(), name, props, opts)
