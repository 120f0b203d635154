"""What a tier of real binaries (tests/integration, tests/engine, tests/node) does in its conftest: marks its
tests, skips them in one place where its binaries are missing, and reports at the end of a run how many of
its tests ran with which outcomes and the time from its first test's start to its last one's end."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from typing import Any

import pytest

#: A tier's pytest hooks, in the order `TierRecord.hooks` gives them.
Hooks = tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any], Callable[..., Any]]


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

    def report(self, terminalreporter: Any, extra: str = "", figures: Sequence[str] = ()) -> None:
        """The conftest's pytest_terminal_summary: the tier's line (with `extra`), then each figure its tests
        recorded; nothing when no test of the tier ran."""
        if not self.ran:
            return
        terminalreporter.write_line(self.line(extra))
        for figure in figures:
            terminalreporter.write_line(f"  {figure}")

    def hooks(
        self,
        *,
        in_tier: Callable[[pytest.Item], bool],
        missing: Callable[[], str | None],
        marker: pytest.MarkDecorator,
        on_failure: Callable[[pytest.Item], list[tuple[str, str]]] | None = None,
    ) -> Hooks:
        """The conftest's pytest_collection_modifyitems (`marker` on the tier's tests),
        pytest_runtest_setup (one skip location, so `-ra` folds the tier into one line, with `missing`'s
        reason), pytest_runtest_protocol (timing) and pytest_runtest_makereport (outcomes, and the report
        sections `on_failure` gives for a failed test), to be bound to those names at the conftest's top
        level."""

        def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
            for item in items:
                if in_tier(item):
                    item.add_marker(marker)

        def pytest_runtest_setup(item: pytest.Item) -> None:
            if in_tier(item):
                reason = missing()
                if reason:
                    pytest.skip(reason)

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
            return (yield from self.timing(in_tier(item)))

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
            report = yield
            if in_tier(item):
                self.outcome(report)
                if report.failed and on_failure is not None:
                    report.sections.extend(on_failure(item))
            return report

        return (
            pytest_collection_modifyitems,
            pytest_runtest_setup,
            pytest_runtest_protocol,
            pytest_runtest_makereport,
        )
