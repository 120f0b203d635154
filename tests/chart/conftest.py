"""Fixtures for the Helm chart tests (helpers in chartlib)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from tests.chart.chartlib import Helm, Manifest, find_helm


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Helm]:
    binary = find_helm()
    if binary is None:
        reason = "helm binary not found (.venv/bin/helm or PATH); run scripts/setup to install it"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason} (CI=true: not skipping)")
        pytest.skip(reason)
    yield Helm(binary, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="session")
def render(helm: Helm) -> Callable[..., list[Manifest]]:
    return helm.template
