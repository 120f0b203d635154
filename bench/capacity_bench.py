"""Capacity-check benchmark: 1,000 nodes x 8 GPUs against 20 claim templates; 5 pools x 100 templates.

Every figure printed is counted or timed, none is derived:

* planning: every template against the pool (the planner's answer: pods per node, replicas at maximum
  size), then `fits` at exactly that capacity and one replica over it;
* placement: every template's pods placed one by one, first fit over the pool's nodes, up to the capacity
  the planner predicted (a pod-by-pod search the planner's node equivalence does not shortcut); the
  placed count must equal the prediction;
* raw CEL: every selector against every device, no cache.

For each phase: wall time, CEL evaluations run, selector-cache lookups, allocate() calls, nodes searched
(allocators that ran) and search steps.

* stack: 5 pools of different products (H20, A100, A10, L20, L4; `--pool-nodes` nodes each) and 100
  claim templates, one Deployment each: the whole plan (admission, every workload alone, then the
  scheduler simulation: 7 placement runs), with wall time and memory (tracemalloc peak of the plan,
  of a second, untimed run, and the process's ru_maxrss).

Run: `python bench/capacity_bench.py [--nodes N] [--gpus N] [--pool-nodes N]`.
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc
from typing import Any

from vke_gpu_dra_core import facts
from vke_gpu_dra_planner.allocator import AllocationError, NodeAllocator
from vke_gpu_dra_planner.cel.environment import DeviceContext, compile_selector
from vke_gpu_dra_planner.claims import ClaimTemplate, PodClaimRef, parse_claim_template
from vke_gpu_dra_planner.fit import Planner
from vke_gpu_dra_planner.inventory import GpuPool
from vke_gpu_dra_planner.selection import SelectionStats, SelectorCache
from vke_gpu_dra_planner.stack import StackModel, Workload, default_classes
from vke_gpu_dra_planner.verdict import plan_model

ATTR = f"device.attributes['{facts.DRIVER_NAME}']"
MEM = f"device.capacity['{facts.DRIVER_NAME}'].{facts.CAPACITY_MEMORY}"
GPU_CLASS = facts.DEVICE_CLASS_GPU.name
SELECTORS = (
    f"{MEM}.compareTo(quantity('40Gi')) >= 0",
    f"{MEM}.isGreaterThan(quantity('64Gi'))",
    f"{MEM}.compareTo(quantity('200Gi')) >= 0",
    f"{ATTR}.cudaComputeCapability.compareTo(semver('9.0.0')) >= 0",
    f"{ATTR}.cudaComputeCapability.major() >= 8",
    f"{ATTR}.productName == 'NVIDIA H20'",
    f"{ATTR}.architecture in ['Hopper', 'Blackwell']",
    f"{ATTR}.driverVersion.isGreaterThan(semver('550.0.0'))",
    f"{MEM}.sub(quantity('1Gi')).asInteger() > 0",
    "device.attributes['resource.kubernetes.io'].pcieRoot.startsWith('pci')",
)


def _exactly(name: str, count: int, *selectors: str, mode: str = "ExactCount") -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": GPU_CLASS, "allocationMode": mode}
    if mode == "ExactCount":
        body["count"] = count
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": body}


def templates() -> list[ClaimTemplate]:
    return [parse_claim_template(doc) for doc in template_documents()]


def template_documents() -> list[dict[str, Any]]:
    """The 20 ResourceClaimTemplate shapes, as manifests (`metadata.name` t00 .. t19)."""
    specs: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []
    for i in range(10):
        specs.append(([_exactly("gpu", 1 + i % 4, SELECTORS[i])], []))
    specs.append(([_exactly("all", 0, SELECTORS[5], mode="All")], []))
    first = [
        {"name": "eight", "deviceClassName": GPU_CLASS, "count": 8},
        {
            "name": "four",
            "deviceClassName": GPU_CLASS,
            "count": 4,
            "selectors": [{"cel": {"expression": SELECTORS[0]}}],
        },
    ]
    specs.append(([{"name": "gpu", "firstAvailable": first}], []))
    same = [{"requests": ["a", "b"], "matchAttribute": f"{facts.DRIVER_NAME}/{facts.ATTR_PRODUCT_NAME}"}]
    specs.append(([_exactly("a", 2, SELECTORS[3]), _exactly("b", 2, SELECTORS[6])], same))
    distinct = [{"distinctAttribute": f"{facts.DRIVER_NAME}/{facts.ATTR_PCIE_BUS_ID}"}]
    specs.append(([_exactly("a", 3, SELECTORS[4])], distinct))
    root = [{"requests": ["a", "b"], "matchAttribute": facts.ATTR_PCIE_ROOT}]
    specs.append(([_exactly("a", 1), _exactly("b", 1)], root))
    for i in range(5):
        specs.append(([_exactly("x", 1, SELECTORS[i], SELECTORS[9 - i]), _exactly("y", 1, SELECTORS[7])], []))
    out: list[dict[str, Any]] = []
    for n, (requests, constraints) in enumerate(specs):
        devices: dict[str, Any] = {"requests": requests}
        if constraints:
            devices["constraints"] = constraints
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": f"t{n:02d}"},
                "spec": {"spec": {"devices": devices}},
            }
        )
    return out


def _uses_distinct(template: ClaimTemplate) -> bool:
    return any(c.distinct_attribute is not None for c in template.spec.constraints)


def _counted(stats: SelectionStats, seconds: float) -> dict[str, Any]:
    return {
        "seconds": seconds,
        "cel_evaluations": stats.evaluations,
        "cache_lookups": stats.checks,
        "allocate_calls": stats.allocations,
        "nodes_searched": stats.nodes_searched,
        "search_steps": stats.search_steps,
    }


def _place(pool: GpuPool, template: ClaimTemplate, wanted: int, cache: SelectorCache) -> int:
    """First fit of `wanted` pods, one at a time, over the pool's nodes at maximum size."""
    placed = 0
    for index in range(pool.max_nodes):
        if placed >= wanted:
            break
        allocator = NodeAllocator(
            pool.node(index), default_classes(), cache, consumable_capacity=_uses_distinct(template)
        )
        try:
            while placed < wanted and allocator.allocate([template.spec]) is not None:
                placed += 1
        except AllocationError:
            break
    return placed


def measure(nodes: int = 1000, gpus: int = 8) -> dict[str, Any]:
    """Measured figures of the three phases (see the module docstring)."""
    pool = GpuPool("bench", "ecs.hpcpni3ln.45xlarge", "NVIDIA H20", gpus, max(nodes // 10, 1), nodes)
    tpls = templates()

    started = time.perf_counter()
    pool_nodes = pool.nodes(nodes)
    build = time.perf_counter() - started

    planner = Planner(default_classes())
    # distinctAttribute is enforced by value with the DRAConsumableCapacity gate on (1.34.4 keeps the
    # field but compares no values): those templates are planned with the gate on, sharing the selector cache
    gated = Planner(default_classes(), cache=planner.cache, consumable_capacity=True)

    def plan(template: ClaimTemplate, replicas: int) -> Any:
        chosen = gated if _uses_distinct(template) else planner
        return chosen.fit(template.name, [(template.name, template.spec)], [[pool]], replicas)

    started = time.perf_counter()
    results = [plan(t, 1) for t in tpls]
    capacity = [r.at_max for r in results]
    at_capacity = [plan(t, max(c, 1)).fits for t, c in zip(tpls, capacity, strict=True)]
    over_capacity = [plan(t, c + 1).fits for t, c in zip(tpls, capacity, strict=True)]
    planning = _counted(planner.cache.stats, time.perf_counter() - started)
    planning.update(
        templates=len(tpls),
        fitting=sum(r.fits for r in results),
        at_max=capacity,
        fits_at_capacity=sum(at_capacity),
        fits_over_capacity=sum(over_capacity),
    )

    cache = SelectorCache()
    started = time.perf_counter()
    placed = [_place(pool, t, c, cache) for t, c in zip(tpls, capacity, strict=True)]
    placement = _counted(cache.stats, time.perf_counter() - started)
    placement.update(replicas=capacity, placed=placed)

    expressions = [*{s for c in default_classes().values() for s in c.selectors}, *SELECTORS]
    compiled = [compile_selector(e) for e in expressions]
    started = time.perf_counter()
    contexts = [DeviceContext(node.driver, d) for node in pool_nodes for d in node.devices]
    for context in contexts:
        for selector in compiled:
            selector.evaluate(context)
    raw = {"seconds": time.perf_counter() - started, "cel_evaluations": len(contexts) * len(compiled)}

    return {
        "nodes": nodes,
        "gpus": gpus,
        "devices": len(contexts),
        "build_seconds": build,
        "planning": planning,
        "placement": placement,
        "raw": raw,
    }


#: (instance type, product, GPUs per node) of the stack phase's pools
STACK_POOLS = (
    ("ecs.hpcpni3ln.45xlarge", "NVIDIA H20", 8),
    ("ecs.pni2.28xlarge", "NVIDIA A100-SXM4-80GB", 8),
    ("ecs.gni2.3xlarge", "NVIDIA A10", 1),
    ("ecs.gni3cl.11xlarge", "NVIDIA L20", 1),
    ("ecs.gni3.xlarge", "NVIDIA L4", 1),
)


def stack_model(pool_nodes: int = 200, templates_count: int = 100) -> StackModel:
    """5 pools of different products and `templates_count` templates, one 3-replica Deployment each."""
    model = StackModel(classes=default_classes())
    for n, (instance_type, product, gpus) in enumerate(STACK_POOLS):
        model.pools.append([GpuPool(f"pool-{n}", instance_type, product, gpus, 0, pool_nodes)])
    base = templates()
    for i in range(templates_count):
        shape = base[i % len(base)]
        name = f"t{i:03d}"
        model.templates[f"default/{name}"] = ClaimTemplate(name, "default", shape.spec)
        model.workloads.append(
            Workload("Deployment", f"app{i:03d}", "default", 3, (PodClaimRef("gpu", template=name),))
        )
    return model


def measure_stack(pool_nodes: int = 200, templates_count: int = 100) -> dict[str, Any]:
    model = stack_model(pool_nodes, templates_count)
    started = time.perf_counter()
    plan = plan_model(model)
    seconds = time.perf_counter() - started
    # memory from a second run under tracemalloc (which slows Python down: not timed)
    tracemalloc.start()
    plan_model(stack_model(pool_nodes, templates_count))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    figures = _counted(plan.planner.cache.stats, seconds)
    statuses: dict[str, int] = {}
    for w in plan.workloads:
        statuses[w.status] = statuses.get(w.status, 0) + 1
    figures.update(
        pools=len(model.pools),
        nodes=sum(v[0].max_nodes for v in model.pools),
        templates=len(model.templates),
        pods_wanted=sum(w.wanted for w in plan.workloads),
        pods_placed=sum(w.placed for w in plan.workloads),
        statuses=statuses,
        peak_bytes=peak,
        max_rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    )
    return figures


def _phase(figures: dict[str, Any]) -> str:
    return (
        f"{figures['seconds']:.2f} s, {figures['cel_evaluations']:,} CEL evaluations, "
        f"{figures['cache_lookups']:,} selector-cache lookups, "
        f"{figures['allocate_calls']:,} allocate() calls on {figures['nodes_searched']:,} nodes searched, "
        f"{figures['search_steps']:,} search steps"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pool-nodes", type=int, default=200)
    args = parser.parse_args()
    figures = measure(args.nodes, args.gpus)
    planning, placement, raw = figures["planning"], figures["placement"], figures["raw"]

    print(
        f"pool: {figures['nodes']} nodes x {figures['gpus']} GPUs ({figures['devices']} devices), "
        f"{planning['templates']} templates"
    )
    print(f"building simulated devices:   {figures['build_seconds']:.2f} s")
    print(f"planning all templates:       {_phase(planning)}")
    print(
        f"  templates that fit:         {planning['fitting']}/{planning['templates']}; "
        f"replicas at max size: {', '.join(str(c) for c in planning['at_max'])}"
    )
    print(
        f"  fit at that capacity:       {planning['fits_at_capacity']}/{planning['templates']}; "
        f"one replica over it: {planning['fits_over_capacity']}/{planning['templates']}"
    )
    print(f"placing every replica:        {_phase(placement)}")
    print(
        f"  pods placed / predicted:    {sum(placement['placed']):,} / {sum(placement['replicas']):,} "
        f"({'all templates agree' if placement['placed'] == placement['replicas'] else 'MISMATCH'})"
    )
    print(
        f"raw CEL, no cache:            {raw['seconds']:.2f} s for {raw['cel_evaluations']:,} evaluations "
        f"({raw['cel_evaluations'] / raw['seconds']:,.0f} evaluations/s, contexts included)"
    )
    stack = measure_stack(args.pool_nodes)
    print(
        f"stack: {stack['pools']} pools ({stack['nodes']:,} nodes), {stack['templates']} templates, "
        f"one Deployment each"
    )
    print(f"planning the whole stack:     {_phase(stack)}")
    print(
        f"  pods placed / wanted:       {stack['pods_placed']:,} / {stack['pods_wanted']:,}; "
        f"workloads: {', '.join(f'{k} {v}' for k, v in sorted(stack['statuses'].items()))}"
    )
    print(
        f"  memory:                     {stack['peak_bytes'] / 2**20:.1f} MiB traced peak while planning, "
        f"{stack['max_rss_kib'] / 1024:.0f} MiB max RSS of the process"
    )


if __name__ == "__main__":
    main()
