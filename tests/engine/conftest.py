"""The engine tier: `pulumi preview`, `pulumi up`, refresh, destroy and `vke-gpu-dra demo` on the real
Pulumi CLI, the real Python language host and the real Kubernetes provider (all from scripts/toolchain),
against a file backend in a temporary folder, with the passphrase secrets provider.

Without the toolchain's `pulumi` and `pulumi-resource-kubernetes` every test here is skipped with one line
saying how to build them. At the end of the run the tier prints its test count, its time, and the timings
its tests recorded (`TIMINGS`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import Cluster
from tests.integration.controlplane import CONTROLLERS, VKE, ControlPlane, missing_assets
from tests.tier import TierRecord
from tools import toolchain

from .kubelet import NodeAgent
from .workspace import Workspace, missing_tools, tool_dirs

#: "what: seconds" lines the tests recorded, printed with the tier's summary.
TIMINGS: list[str] = []


TIER = TierRecord("engine tier (tests/engine)")


def in_tier(item: pytest.Item) -> bool:
    return Path(str(item.fspath)).parent == Path(__file__).parent


(
    pytest_collection_modifyitems,
    pytest_runtest_setup,
    pytest_runtest_protocol,
    pytest_runtest_makereport,
) = TIER.hooks(in_tier=in_tier, missing=missing_tools, marker=pytest.mark.engine)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    TIER.report(terminalreporter, figures=TIMINGS)


def timed(what: str, seconds: float) -> None:
    TIMINGS.append(f"{what}: {seconds:.1f}s")


@pytest.fixture
def workspace() -> Iterator[Workspace]:
    """A fresh copy of the project with its own backend; removed afterwards (ENGINE_KEEP=1 keeps it)."""
    root = Path(tempfile.mkdtemp(prefix="engine-"))
    try:
        yield Workspace.create(root, tool_dirs())
    finally:
        if not os.environ.get("ENGINE_KEEP"):
            shutil.rmtree(root, ignore_errors=True)


#: The plane's controllers: the tier's, plus the DaemonSet controller (the chart's plugin pods).
ENGINE_CONTROLLERS = f"{CONTROLLERS},daemonset-controller"


@pytest.fixture(scope="session")
def plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """A control plane from the toolchain for the stacks aimed at an existing cluster: Kubernetes 1.34
    (VKE's release), or the release a test names (`@pytest.mark.parametrize("plane", [...],
    indirect=True)`); one per release and run."""
    minor = str(getattr(request, "param", VKE))
    assets = toolchain.kube_assets(minor)
    reason = missing_assets(minor, assets)
    if reason:
        pytest.skip(reason)
    assert assets is not None
    control_plane = ControlPlane(assets, minor, controllers=ENGINE_CONTROLLERS).start()
    try:
        yield control_plane
    finally:
        control_plane.stop()


@pytest.fixture
def gpu_node(plane: ControlPlane) -> Iterator[tuple[str, NodeAgent]]:
    """A Ready GPU node with the DRA labels, and the agent playing its kubelet (its folder short: the
    plugin's unix sockets live in it)."""
    with Cluster.for_test(plane, "engine-gpu-node") as cluster:
        node = cluster.add_node("gpu")["metadata"]["name"]
        agent = NodeAgent(plane, node, cluster.tmp / "n").start()
        try:
            yield node, agent
        finally:
            agent.stop()
