"""The Markdown table: the medians of each figure over the runs, beside the baseline's and their ratio."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from .figures import Figure


@dataclass(frozen=True)
class Summary:
    """One row over several runs: medians of the value and of its floor multiple."""

    figure: Figure  # the first run's (label, format, target, note)
    value: float | None
    multiple: float | None

    def cell(self) -> str:
        if self.value is None:
            text = "n/a"
        else:
            text = self.figure.fmt.format(self.value)
            if self.multiple is not None:
                text += f" ({self.multiple:.2f}x floor)"
        return f"{text}; {self.figure.note}" if self.figure.note else text

    def result(self) -> str:
        target = self.figure.target
        if target is None:
            return ""
        if self.value is None:
            return "not measured"
        return "met" if target.met(self.value, self.multiple) else "**missed**"


def median_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present and len(present) == len(values) else None


def summarize(runs: list[list[Figure]]) -> dict[str, Summary]:
    """Per label (in the first run's order): the medians over `runs`."""
    by_label: dict[str, list[Figure]] = {}
    for run in runs:
        for fig in run:
            by_label.setdefault(fig.label, []).append(fig)
    out = {}
    for label, figs in by_label.items():
        multiples = [f.value / f.floor if f.value is not None and f.floor else None for f in figs]
        has_floor = figs[0].floor is not None
        out[label] = Summary(
            figs[0], median_or_none([f.value for f in figs]), median_or_none(multiples) if has_floor else None
        )
    return out


def ratio(current: Summary, baseline: Summary | None) -> str:
    if baseline is None or not current.figure.compared or current.value is None or baseline.value is None:
        return ""
    if current.value <= 0 or baseline.value <= 0:
        return ""
    return f"{current.value / baseline.value:.2f}"


def table(current: dict[str, Summary], baseline: dict[str, Summary] | None, baseline_name: str) -> list[str]:
    if baseline is None:
        lines = ["| measurement | value | target | result |", "|---|---|---|---|"]
        for label, s in current.items():
            lines.append(f"| {label} | {s.cell()} | {s.figure.target.text if s.figure.target else ''} | "
                         f"{s.result()} |")  # fmt: skip
        return lines
    lines = [
        f"| measurement | current | baseline {baseline_name} | current / baseline | target | result |",
        "|---|---|---|---|---|---|",
    ]
    for label, s in current.items():
        b = baseline.get(label)
        lines.append(
            f"| {label} | {s.cell()} | {b.cell() if b else 'n/a'} | {ratio(s, b)} | "
            f"{s.figure.target.text if s.figure.target else ''} | {s.result()} |"
        )
    return lines
