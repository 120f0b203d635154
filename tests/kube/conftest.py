"""Fixtures of the client set-up's tests: a test PKI and a TLS API server that records requests (a module may
have a `server` of its own); every RestClient a test opened through `tls_server.track` is closed when it
ends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kube.tls_server import Pki, RecordingServer, close_tracked, make_pki


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    close_tracked()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def server(pki: Pki) -> Iterator[RecordingServer]:
    with RecordingServer(pki) as s:
        yield s
