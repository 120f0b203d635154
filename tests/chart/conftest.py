"""Fixtures for the Helm chart tests (helpers in chartlib)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.chart.chartlib import Helm, Manifest, require_helm


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return require_helm(tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="session")
def render(helm: Helm) -> Callable[..., list[Manifest]]:
    return helm.template
