"""The real control-plane tier: one control plane per Kubernetes release and test run, each test in its
own namespace.

Three releases, from the toolchain (scripts/toolchain): Kubernetes 1.37, the newest, 1.34, VKE's, and 1.38,
the next (its newest pre-release the Go module proxy serves); all on etcd 3.6. Each control plane
(`controlplane.py`) starts when a test first asks for it and stops at the end of the run. Without the
toolchain's 1.37 and 1.34 every test here is skipped with one line saying how to build them; without its
1.38 the tests on 1.38 are. The tier's own time and its test count are printed at the end of the run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from vke_gpu_dra_core import dra_gates

from tests.tier import TierRecord
from tools import toolchain

from .cluster import FIGURES, Cluster
from .controlplane import NEWEST, NEXT, VKE, ControlPlane, missing_assets

#: VKE's release with DRAConsumableCapacity (alpha there) turned on, as an operator may: where the planner's
#: 1.34 model with the gate is checked against the real v1.34.4 scheduler.
VKE_CAPACITY = "1.34+DRAConsumableCapacity"
CAPACITY_GATES = {**dra_gates.settable_defaults((1, 34)), dra_gates.CONSUMABLE_CAPACITY: True}

#: Fixtures that start a control plane: the tests using them form the tier (marker `envtest`).
PLANE_FIXTURES = frozenset(
    {
        "control_plane",
        "control_plane_134",
        "control_plane_138",
        "control_plane_134_capacity",
        "each_cluster",
        "newest_clusters",
        "allocator_clusters",
    }
)


TIER = TierRecord("real control-plane tier (tests/integration)")
#: Control planes running, and how long each took to come up.
PLANES: dict[str, ControlPlane] = {}
STARTUPS: dict[str, float] = {}


def in_tier(item: pytest.Item) -> bool:
    return bool(PLANE_FIXTURES & set(getattr(item, "fixturenames", ())))


def _missing() -> str | None:
    for minor in (NEWEST, VKE):
        reason = missing_assets(minor, toolchain.kube_assets(minor))
        if reason:
            return reason
    return None


def _plane_logs(item: pytest.Item) -> list[tuple[str, str]]:
    return [(f"control plane {name}: logs", plane.logs()) for name, plane in PLANES.items()]


(
    pytest_collection_modifyitems,
    pytest_runtest_setup,
    pytest_runtest_protocol,
    pytest_runtest_makereport,
) = TIER.hooks(in_tier=in_tier, missing=_missing, marker=pytest.mark.envtest, on_failure=_plane_logs)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    startups = ", ".join(f"{name} up in {seconds:.1f}s" for name, seconds in STARTUPS.items())
    TIER.report(terminalreporter, f"; {startups}" if startups else "", FIGURES)


def _start(minor: str, name: str = "", gates: dict[str, bool] | None = None) -> Iterator[ControlPlane]:
    """The control plane of release `minor` (its default gates, or `gates`), known as `name` (`minor`)."""
    name = name or minor
    assets = toolchain.kube_assets(minor)
    reason = missing_assets(minor, assets)
    if reason:
        pytest.skip(reason)
    assert assets is not None  # missing_assets names a reason otherwise
    plane = ControlPlane(assets, minor, feature_gates=gates)
    plane.start()
    PLANES[name], STARTUPS[name] = plane, plane.started_in
    try:
        yield plane
    finally:
        PLANES.pop(name, None)
        plane.stop(keep=bool(os.environ.get("ENVTEST_KEEP")))


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """Kubernetes 1.37, the newest release (its DRA features on by default)."""
    yield from _start(NEWEST)


@pytest.fixture(scope="session")
def control_plane_134() -> Iterator[ControlPlane]:
    """Kubernetes 1.34, VKE's release (the DRA features that were alpha in 1.34 off)."""
    yield from _start(VKE)


@pytest.fixture(scope="session")
def control_plane_138() -> Iterator[ControlPlane]:
    """Kubernetes 1.38, the next release, at the toolchain's pre-release (DynamicResourceAllocation gone,
    the device-taint gates locked on)."""
    yield from _start(NEXT)


@pytest.fixture(scope="session")
def control_plane_134_capacity() -> Iterator[ControlPlane]:
    """Kubernetes 1.34 with DRAConsumableCapacity turned on (every other gate at its default)."""
    yield from _start(VKE, VKE_CAPACITY, CAPACITY_GATES)


@pytest.fixture
def cluster(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """This test's namespace on the 1.37 control plane; what the test made is removed afterwards."""
    with Cluster.for_test(control_plane, request.node.name) as c:
        yield c


@pytest.fixture
def cluster_134(control_plane_134: ControlPlane, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """This test's namespace on the 1.34 control plane."""
    with Cluster.for_test(control_plane_134, request.node.name) as c:
        yield c


@pytest.fixture
def cluster_138(control_plane_138: ControlPlane, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """This test's namespace on the 1.38 control plane."""
    with Cluster.for_test(control_plane_138, request.node.name) as c:
        yield c


@pytest.fixture
def cluster_134_capacity(
    control_plane_134_capacity: ControlPlane, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    """This test's namespace on the 1.34 control plane with DRAConsumableCapacity on."""
    with Cluster.for_test(control_plane_134_capacity, request.node.name) as c:
        yield c


#: each_cluster's fixture per release.
CLUSTER_FIXTURES = {
    NEWEST: "cluster",
    VKE: "cluster_134",
    NEXT: "cluster_138",
    VKE_CAPACITY: "cluster_134_capacity",
}


@pytest.fixture(params=[NEWEST, VKE, NEXT])
def each_cluster(request: pytest.FixtureRequest) -> Cluster:
    """This test's namespace on each control plane in turn: 1.37, 1.34 (VKE's release), then 1.38."""
    cluster: Cluster = request.getfixturevalue(CLUSTER_FIXTURES[request.param])
    return cluster


@pytest.fixture(params=[NEWEST, NEXT])
def newest_clusters(request: pytest.FixtureRequest) -> Cluster:
    """This test's namespace on each control plane with the DRA features VKE's 1.34 lacks on by default
    (device taints and DeviceTaintRules, the extended resource, partitionable devices, consumable
    capacity): 1.37, then 1.38."""
    cluster: Cluster = request.getfixturevalue(CLUSTER_FIXTURES[request.param])
    return cluster


@pytest.fixture(params=[NEWEST, VKE, NEXT, VKE_CAPACITY])
def allocator_clusters(request: pytest.FixtureRequest) -> Cluster:
    """each_cluster's releases, then 1.34 with DRAConsumableCapacity on: for the planner's allocator cases,
    whose 1.34 model with the gate is checked on the real v1.34.4 scheduler too."""
    cluster: Cluster = request.getfixturevalue(CLUSTER_FIXTURES[request.param])
    return cluster
