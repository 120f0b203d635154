"""Fixtures shared by the driver's cluster-side tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from vke_gpu_dra.kubeapi import KubeAPI
from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary directory with a short path (unix socket paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="dra", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fake_api(short_tmp: Path) -> Iterator[FakeAPIServer]:
    """A running fake API server; its kubeconfig is at `short_tmp / "kubeconfig"`."""
    with FakeAPIServer() as server:
        server.write_kubeconfig(short_tmp / "kubeconfig")
        yield server


@pytest.fixture
def kube(fake_api: FakeAPIServer, short_tmp: Path) -> Iterator[KubeAPI]:
    api = KubeAPI.from_kubeconfig(short_tmp / "kubeconfig")
    yield api
    api.close()
