"""The node tier: containerd 2.1 with CDI and runc from the toolchain, in a node of its own
(`node.py`: its own namespaces, folders and cgroups), running containers from images built here
(`images.py`). Every test here needs root and the toolchain's node binaries; without them each is skipped
with one line saying why. The tier prints its test count, time and the node's start-up at the end of the
run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.controlplane import missing_assets
from tests.tier import TierRecord
from tools import toolchain

from .kube import PLANES, NodePlane, forget_stopped_nodes, kubelet_of
from .node import FIGURES, Node, missing, remove_shared_cgroups

TIER = TierRecord("node tier (tests/node)")
HERE = Path(__file__).resolve().parent
NODE_FIXTURES = frozenset({"node"})
STARTUPS: list[float] = []


def in_tier(item: pytest.Item) -> bool:
    """A test of this folder that runs a node (other folders have fixtures named `node` too)."""
    if HERE not in Path(str(item.fspath)).parents:
        return False
    fixtures = set(getattr(item, "fixturenames", ()))
    return bool(NODE_FIXTURES & fixtures) or item.get_closest_marker("node") is not None


def _node_logs(item: pytest.Item) -> list[tuple[str, str]]:
    running = item.funcargs.get("node") if hasattr(item, "funcargs") else None
    return [("node logs", running.logs())] if isinstance(running, Node) else []


(
    pytest_collection_modifyitems,
    pytest_runtest_setup,
    pytest_runtest_protocol,
    pytest_runtest_makereport,
) = TIER.hooks(in_tier=in_tier, missing=missing, marker=pytest.mark.node, on_failure=_node_logs)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The CRI's shared /k8s.io cgroups are the run's, not a node's (`Node.leftovers` counts only a pod's
    cgroup left in them): once this run's nodes are gone, the empty ones go (if other lanes' nodes still
    run, the last lane to end does it)."""
    if TIER.ran:
        remove_shared_cgroups()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    started = f"; containerd up in {max(STARTUPS):.2f}s at most" if STARTUPS else ""
    TIER.report(terminalreporter, started, FIGURES)


@pytest.fixture
def node(request: pytest.FixtureRequest) -> Iterator[Node]:
    """A node of its own for the test; stopped afterwards, and nothing of it may be left on the host. On
    the tier's control plane (a test that also takes `plane`) the Nodes whose kubelet no longer runs go too
    (`forget_stopped_nodes`; their ResourceSlices with them), as an operator removes a machine that is
    gone: the scheduler of the next test sees no node without a kubelet."""
    reason = missing()
    if reason:
        pytest.skip(reason)
    running = Node().start()
    STARTUPS.append(running.started_in)
    try:
        yield running
    finally:
        running.stop()
        if "plane" in request.fixturenames:
            forget_stopped_nodes(request.getfixturevalue("plane"))
    assert running.leftovers() == [], "the node left things behind"


@pytest.fixture(scope="session", params=sorted(PLANES))
def plane(request: pytest.FixtureRequest) -> Iterator[NodePlane]:
    """A control plane of each release the node tier runs (the control-plane tier's, knowing this
    process's nodes' kubelets; its nodes run the kubelet PLANES names), one at a time."""
    minor = str(request.param)
    kubelet_of(PLANES[minor])  # skips before a control plane is started for nothing
    assets = toolchain.kube_assets(minor)
    reason = missing_assets(minor, assets)
    if reason:
        pytest.skip(reason)
    assert assets is not None
    running = NodePlane(assets, minor)
    running.start()
    try:
        yield running
    finally:
        running.stop()
