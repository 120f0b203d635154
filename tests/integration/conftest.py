"""The real control-plane tier: one control plane per test run, each test in its own namespace.

The control plane (`controlplane.py`) starts on first use and stops at the end of the run; a second one
with `--emulated-version=1.34` starts only when a test asks for it. Without the binaries
(`$KUBEBUILDER_ASSETS`) every test here is skipped with one line saying how to get them. The tier's own time
and its test count are printed at the end of the run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .cluster import FIGURES, Cluster
from .controlplane import ControlPlane, missing_assets

#: Fixtures that start a control plane: the tests using them form the tier (marker `envtest`).
PLANE_FIXTURES = frozenset({"control_plane", "control_plane_134", "each_cluster"})


class _Tier:
    """What the terminal summary reports: tests run, outcomes, time spent, control-plane start-ups."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last = 0.0
        self.outcomes: dict[str, int] = {}
        self.startups: dict[str, float] = {}
        self.planes: dict[str, ControlPlane] = {}


TIER = _Tier()


def in_tier(item: pytest.Item) -> bool:
    return bool(PLANE_FIXTURES & set(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if in_tier(item):
            item.add_marker(pytest.mark.envtest)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Without the binaries every test of the tier is skipped from here: one location, so `-ra` folds
    them into one line."""
    if in_tier(item):
        reason = missing_assets()
        if reason:
            pytest.skip(reason)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    if not in_tier(item):
        return (yield)
    TIER.first = TIER.first or time.monotonic()
    try:
        return (yield)
    finally:
        TIER.last = time.monotonic()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if in_tier(item):
        if report.when == "call" or (report.when == "setup" and not report.passed):
            TIER.outcomes[report.outcome] = TIER.outcomes.get(report.outcome, 0) + 1
        if report.failed:
            for name, plane in TIER.planes.items():
                report.sections.append((f"control plane {name}: logs", plane.logs()))
    return report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TIER.first is None:
        return
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(TIER.outcomes.items()))
    startups = ", ".join(f"{name} up in {seconds:.1f}s" for name, seconds in TIER.startups.items())
    terminalreporter.write_line(
        f"real control-plane tier (tests/integration): {sum(TIER.outcomes.values())} tests ({counts}) "
        f"in {TIER.last - TIER.first:.1f}s" + (f"; {startups}" if startups else "")
    )
    for figure in FIGURES:
        terminalreporter.write_line(f"  {figure}")


def _assets() -> Path:
    reason = missing_assets()
    if reason:
        pytest.skip(reason)
    return Path(os.environ["KUBEBUILDER_ASSETS"])


def _start(name: str, emulated_version: str | None) -> Iterator[ControlPlane]:
    assets = _assets()
    plane = ControlPlane(assets, emulated_version=emulated_version)
    plane.start()
    TIER.planes[name], TIER.startups[name] = plane, plane.started_in
    try:
        yield plane
    finally:
        TIER.planes.pop(name, None)
        plane.stop(keep=bool(os.environ.get("ENVTEST_KEEP")))


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """Kubernetes 1.36 (the binaries' own version)."""
    yield from _start("1.36", None)


@pytest.fixture(scope="session")
def control_plane_134() -> Iterator[ControlPlane]:
    """The same binaries with --emulated-version=1.34 (VKE's 1.34: the DRA beta features of 1.36 off)."""
    yield from _start("1.34", "1.34")


@pytest.fixture
def cluster(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """This test's namespace on the 1.36 control plane; what the test made is removed afterwards."""
    with Cluster.for_test(control_plane, request.node.name) as c:
        yield c


@pytest.fixture
def cluster_134(control_plane_134: ControlPlane, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """This test's namespace on the emulated 1.34 control plane."""
    with Cluster.for_test(control_plane_134, request.node.name) as c:
        yield c


@pytest.fixture(params=["1.36", "1.34"])
def each_cluster(request: pytest.FixtureRequest) -> Cluster:
    """This test's namespace on each control plane in turn: 1.36, then emulated 1.34 (VKE's version)."""
    cluster: Cluster = request.getfixturevalue("cluster_134" if request.param == "1.34" else "cluster")
    return cluster
