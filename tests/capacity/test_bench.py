"""The capacity benchmark reports what it measured, on a small pool."""

import importlib.util
import sys
from pathlib import Path

import yaml
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


PLAN_BENCH = BENCH.parent / "plan_bench.py"


def _plan_bench():
    # plan_bench takes the template shapes from capacity_bench, its neighbour in bench/
    sys.path.insert(0, str(BENCH.parent))
    try:
        spec = importlib.util.spec_from_file_location("plan_bench", PLAN_BENCH)
        module = importlib.util.module_from_spec(spec)
        sys.modules["plan_bench"] = module  # its dataclass looks its module up while being made
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH.parent))
    return module


def test_plan_bench_writes_the_job_and_both_trees_give_one_report(tmp_path):
    bench = _plan_bench()
    stack, objects = bench.write_job(tmp_path, nodes=4, templates=6)
    docs = list(yaml.safe_load_all(objects.read_text()))
    assert [d["kind"] for d in docs].count("ResourceClaimTemplate") == 6
    assert sum(d["spec"]["replicas"] for d in docs if d["kind"] == "Deployment") == 18
    figures = bench.compare({"a": [], "b": []}, stack, objects, runs=2)
    assert figures["a"]["verdict"] == figures["b"]["verdict"]
    assert len(figures["a"]["seconds"]) == len(figures["a"]["cpu"]) == 2
    report = figures["a"]["verdict"]
    assert report["pools"][0]["maxNodes"] == 4 and report["pools"][0]["gpusPerNode"] == 8
    assert sum(w["wanted"] for w in report["workloads"]) == 18
    assert "selectorChecks" not in report
    # the pack's capacity check on the same job as registered resources finds what the plan finds
    policy = bench.measure_policy(nodes=4, templates=6)
    assert policy["violations"] == len(report["violations"])
    assert policy["import"] > 0 and policy["check"] > 0


def test_plan_bench_takes_the_previous_revision_out_of_git(tmp_path):
    previous = _plan_bench().materialise("HEAD", tmp_path)
    assert (previous / "core" / "src" / "vke_gpu_dra_core" / "__init__.py").is_file()
    assert (previous / "ops" / "src" / "vke_gpu_dra_ops" / "__main__.py").is_file()
    assert (previous / "policy" / "vke_dra_policies" / "checks" / "capacity.py").is_file()
