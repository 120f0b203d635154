"""Fixtures shared by the driver's cluster-side tests."""

from __future__ import annotations

import ctypes
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pynvml
import pytest
from vke_gpu_dra import cdi
from vke_gpu_dra.kubeapi import KubeAPI
from vke_gpu_dra_testing import cdi_check
from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer
from vke_gpu_dra_testing.fake_pod_resources import FakePodResources

from tests.driver.fake_nvml import build


@pytest.fixture(autouse=True)
def every_cdi_spec_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every CDI spec the driver builds or writes in a test passes the CDI 1.1.0 rules (`cdi_check`).

    The driver does not validate its specs at prepare time; this keeps every test that prepares a
    claim in process a check of the spec it produced. A test that replaces `cdi.write_claim_spec`
    itself (a failing write) replaces this check for that call.
    """
    build, write = cdi.build_claim_spec, cdi.write_claim_spec

    def checked_build(*args: Any, **kwargs: Any) -> dict[str, Any]:
        spec = build(*args, **kwargs)
        cdi_check.validate_spec(spec)
        return spec

    def checked_write(cdi_root: Path, claim_uid: str, spec: Mapping[str, Any]) -> Path:
        cdi_check.validate_spec(spec)
        return write(cdi_root, claim_uid, spec)

    monkeypatch.setattr(cdi, "build_claim_spec", checked_build)
    monkeypatch.setattr(cdi, "write_claim_spec", checked_write)


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


@pytest.fixture
def pod_resources(short_tmp: Path) -> Iterator[FakePodResources]:
    """kubelet's PodResources API on a unix socket at `short_tmp / "pod-resources" / "kubelet.sock"`."""
    fake = FakePodResources(short_tmp / "pod-resources" / "kubelet.sock").start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tests' fake libnvidia-ml, built once per test module (each module loads its own copy, so the
    fake's state never crosses modules)."""
    return build(tmp_path_factory.mktemp("nvml"))


@pytest.fixture
def lib(fake_lib: Path) -> Iterator[ctypes.CDLL]:
    """The module's fake libnvidia-ml with its test controls (events, lost GPUs), reset before and after
    the test; pynvml lets go of it afterwards."""
    handle = ctypes.CDLL(str(fake_lib))
    handle.fakeNvmlReset()
    yield handle
    handle.fakeNvmlReset()
    with pynvml.libLoadLock:
        pynvml.nvmlLib = None
        pynvml._nvmlGetFunctionPointer_cache.clear()


@pytest.fixture
def release_pynvml() -> Iterator[None]:
    """pynvml keeps the loaded library in module globals: do not leak a fake into other tests."""
    yield
    with pynvml.libLoadLock:
        pynvml.nvmlLib = None
        pynvml._nvmlGetFunctionPointer_cache.clear()
