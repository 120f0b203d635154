"""What a tier of real binaries (tests/integration, tests/engine) reports at the end of a run: how many of
its tests ran with which outcomes, and the time from its first test's start to its last one's end."""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any


class TierRecord:
    """Fed by a conftest's hook wrappers (`timing`, `outcome`); read by its terminal summary (`line`)."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.first: float | None = None
        self.last = 0.0
        self.outcomes: dict[str, int] = {}

    def timing(self, inside: bool) -> Generator[None, Any, Any]:
        """pytest_runtest_protocol's wrapper body: times the tier's tests."""
        if not inside:
            return (yield)
        self.first = self.first or time.monotonic()
        try:
            return (yield)
        finally:
            self.last = time.monotonic()

    def outcome(self, report: Any) -> None:
        """Counts a test once: its call, or a setup that did not pass (a skip, an error)."""
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.outcomes[report.outcome] = self.outcomes.get(report.outcome, 0) + 1

    @property
    def ran(self) -> bool:
        return self.first is not None

    def line(self, extra: str = "") -> str:
        counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(self.outcomes.items()))
        took = self.last - (self.first or self.last)
        return f"{self.title}: {sum(self.outcomes.values())} tests ({counts}) in {took:.1f}s{extra}"
