"""Capacity-check benchmark: 1,000 nodes x 8 GPUs against 20 claim templates.

Prints the time to plan every template against the pool (replicas that fit at minimum and maximum size),
the selector checks and CEL evaluations that took, and the raw engine rate (every selector against every
device, no cache). Run: `python bench/capacity_bench.py [--nodes N] [--gpus N]`.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from vke_gpu_dra_ops.capacity.celenv import DeviceContext, compile_selector
from vke_gpu_dra_ops.capacity.claims import ClaimTemplate, parse_claim_template
from vke_gpu_dra_ops.capacity.inventory import GpuPool
from vke_gpu_dra_ops.capacity.planner import Planner
from vke_gpu_dra_ops.capacity.stack import default_classes

ATTR = "device.attributes['gpu.nvidia.com']"
MEM = "device.capacity['gpu.nvidia.com'].memory"
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
    body: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com", "allocationMode": mode}
    if mode == "ExactCount":
        body["count"] = count
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": body}


def templates() -> list[ClaimTemplate]:
    specs: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []
    for i in range(10):
        specs.append(([_exactly("gpu", 1 + i % 4, SELECTORS[i])], []))
    specs.append(([_exactly("all", 0, SELECTORS[5], mode="All")], []))
    first = [
        {"name": "eight", "deviceClassName": "gpu.nvidia.com", "count": 8},
        {
            "name": "four",
            "deviceClassName": "gpu.nvidia.com",
            "count": 4,
            "selectors": [{"cel": {"expression": SELECTORS[0]}}],
        },
    ]
    specs.append(([{"name": "gpu", "firstAvailable": first}], []))
    same = [{"requests": ["a", "b"], "matchAttribute": "gpu.nvidia.com/productName"}]
    specs.append(([_exactly("a", 2, SELECTORS[3]), _exactly("b", 2, SELECTORS[6])], same))
    distinct = [{"distinctAttribute": "gpu.nvidia.com/pcieBusID"}]
    specs.append(([_exactly("a", 3, SELECTORS[4])], distinct))
    root = [{"requests": ["a", "b"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}]
    specs.append(([_exactly("a", 1), _exactly("b", 1)], root))
    for i in range(5):
        specs.append(([_exactly("x", 1, SELECTORS[i], SELECTORS[9 - i]), _exactly("y", 1, SELECTORS[7])], []))
    out = []
    for n, (requests, constraints) in enumerate(specs):
        devices: dict[str, Any] = {"requests": requests}
        if constraints:
            devices["constraints"] = constraints
        out.append(
            parse_claim_template(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaimTemplate",
                    "metadata": {"name": f"t{n:02d}"},
                    "spec": {"spec": {"devices": devices}},
                }
            )
        )
    return out


def _uses_distinct(template: ClaimTemplate) -> bool:
    return any(c.distinct_attribute is not None for c in template.spec.constraints)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    pool = GpuPool("bench", "ecs.hpcpni3ln.45xlarge", "NVIDIA H20", args.gpus, args.nodes // 10, args.nodes)
    tpls = templates()

    started = time.perf_counter()
    nodes = pool.nodes(args.nodes)
    build = time.perf_counter() - started

    planner = Planner(default_classes())
    # distinctAttribute needs the DRAConsumableCapacity gate (off in 1.34, where such a claim never
    # schedules): those templates are planned with the gate on, sharing the selector cache
    gated = Planner(default_classes(), cache=planner.cache, consumable_capacity=True)
    started = time.perf_counter()
    results = [
        (gated if _uses_distinct(t) else planner).fit(t.name, [(t.name, t.spec)], [[pool]], 1) for t in tpls
    ]
    plan = time.perf_counter() - started
    stats = planner.cache.stats
    # every (device, selector) pair of every template is decided: by CEL, by cache or by node equivalence
    decided = sum(len(planner._inputs([t.spec])[0]) for t in tpls) * args.nodes * args.gpus

    devices = [d for node in nodes for d in node.devices]
    expressions = [*{s for c in default_classes().values() for s in c.selectors}, *SELECTORS]
    compiled = [compile_selector(e) for e in expressions]
    started = time.perf_counter()
    contexts = [DeviceContext(node.driver, d) for node in nodes for d in node.devices]
    for context in contexts:
        for selector in compiled:
            selector.evaluate(context)
    raw = time.perf_counter() - started
    raw_count = len(contexts) * len(compiled)

    print(f"pool: {args.nodes} nodes x {args.gpus} GPUs ({len(devices)} devices), {len(tpls)} templates")
    print(f"building simulated devices:   {build:.2f} s")
    print(
        f"planning all templates:       {plan:.2f} s: {decided:,} device x selector results decided "
        f"({decided / plan:,.0f}/s) with {stats.evaluations} CEL evaluations and {stats.checks} cache lookups"
    )
    fitting = sum(r.fits for r in results)
    print(
        f"templates that fit:           {fitting}/{len(results)}; replicas at max size: "
        f"{', '.join(str(r.at_max) for r in results)}"
    )
    print(
        f"raw CEL, no cache:            {raw:.2f} s for {raw_count} evaluations "
        f"({raw_count / raw:,.0f} selector evaluations/s, contexts included)"
    )


if __name__ == "__main__":
    main()
