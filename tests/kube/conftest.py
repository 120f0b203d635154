"""Every RestClient a test of this folder opened (through `tls_server.track`) is closed when it ends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kube.tls_server import close_tracked


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    close_tracked()
