"""The capacity benchmark reports what it measured, on a small pool."""

import importlib.util
from pathlib import Path

from vke_gpu_dra_planner.allocator import NodeAllocator
from vke_gpu_dra_planner.selection import SelectorCache
from vke_gpu_dra_planner.stack import default_classes

from .helpers import exactly, parsed, pool

BENCH = Path(__file__).resolve().parents[2] / "bench" / "capacity_bench.py"


def _bench():
    spec = importlib.util.spec_from_file_location("capacity_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_allocator_counts_its_calls_and_nodes():
    cache = SelectorCache()
    spec = parsed(exactly("gpu", 1)).spec
    for index in range(2):
        allocator = NodeAllocator(pool(gpus=2).node(index), default_classes(), cache)
        while allocator.allocate([spec]) is not None:
            pass
    assert (cache.stats.allocations, cache.stats.nodes_searched) == (6, 2)
    assert cache.stats.search_steps > 0


def test_bench_reports_measured_figures_and_places_many_replicas():
    figures = _bench().measure(nodes=10, gpus=8)
    planning, placement = figures["planning"], figures["placement"]
    for phase in (planning, placement):
        assert phase["seconds"] > 0
        assert phase["allocate_calls"] > 0 and phase["nodes_searched"] > 0
        assert phase["cel_evaluations"] <= phase["cache_lookups"]
    assert "decided" not in str(figures)
    # every template that fits is placed pod by pod up to the pool's capacity, and exactly that fits
    assert max(placement["replicas"]) > 1
    assert placement["replicas"] == placement["placed"] == planning["at_max"]
    assert planning["fits_at_capacity"] == planning["fitting"]
    assert planning["fits_over_capacity"] == 0


def test_bench_plans_a_stack_of_five_pools_and_reports_time_and_memory():
    figures = _bench().measure_stack(pool_nodes=2, templates_count=10)
    assert (figures["pools"], figures["nodes"], figures["templates"]) == (5, 10, 10)
    assert figures["seconds"] > 0 and figures["peak_bytes"] > 0 and figures["max_rss_kib"] > 0
    assert figures["allocate_calls"] > 0
    # every workload has a status, and the placed pods never exceed the wanted ones
    assert sum(figures["statuses"].values()) == 10
    assert 0 < figures["pods_placed"] <= figures["pods_wanted"] == 30
