"""Policy pack test fixtures: the pack's package on sys.path, and one analyzer process per session."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

POLICY_DIR = Path(__file__).resolve().parents[2] / "policy"
# The pack is not an installed package: the CLI runs policy/__main__.py with policy/ on sys.path.
if str(POLICY_DIR) not in sys.path:
    sys.path.insert(0, str(POLICY_DIR))

from .analyzer_client import PackProcess  # noqa: E402 - needs the path above


@pytest.fixture(scope="session")
def pack() -> Iterator[PackProcess]:
    process = PackProcess()
    try:
        yield process
    finally:
        process.close()


@pytest.fixture
def analyzer(pack: PackProcess) -> PackProcess:
    """The session's pack, reconfigured to the default policy config for each test."""
    pack.configure()
    return pack
