"""The parts of the driver bench (`bench/plugin_bench/`) stay layered as driver/BENCHMARKS.md says: each
module imports only those before it in `ORDER`, and every module has its place there. The bench is not an
installed package, so the import contracts of `lint-imports` cannot see it; this is the same check, made by
import-linter's own graph library."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
#: Lowest first, as driver/BENCHMARKS.md lists them.
ORDER = ("settings", "probes", "timed_fake", "trees", "plugin", "workloads", "floor", "fsyncs", "idle",
         "figures", "report", "runs", "cli")  # fmt: skip


@pytest.fixture(scope="module")
def graph() -> Iterator[grimp.ImportGraph]:
    sys.path.insert(0, str(BENCH))
    try:
        yield grimp.build_graph("plugin_bench")
    finally:
        sys.path.remove(str(BENCH))


def test_every_part_has_its_place_in_the_order(graph: grimp.ImportGraph) -> None:
    parts = {module.removeprefix("plugin_bench.") for module in graph.modules} - {"plugin_bench"}
    assert parts == set(ORDER)


def test_each_part_imports_only_the_parts_before_it(graph: grimp.ImportGraph) -> None:
    layers = list(reversed(ORDER))  # highest first
    illegal = graph.find_illegal_dependencies_for_layers(layers=layers, containers={"plugin_bench"})
    assert not illegal, sorted(f"{d.importer} -> {d.imported}" for d in illegal)


def test_an_import_of_a_later_part_would_be_found(graph: grimp.ImportGraph) -> None:
    graph.add_import(importer="plugin_bench.settings", imported="plugin_bench.cli")
    try:
        illegal = graph.find_illegal_dependencies_for_layers(
            layers=list(reversed(ORDER)), containers={"plugin_bench"}
        )
        assert {(d.importer, d.imported) for d in illegal} == {("plugin_bench.settings", "plugin_bench.cli")}
    finally:
        graph.remove_import(importer="plugin_bench.settings", imported="plugin_bench.cli")
