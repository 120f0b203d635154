"""Builders for claim templates and pools used by the capacity tests."""

from __future__ import annotations

from typing import Any

from vke_gpu_dra_core import facts
from vke_gpu_dra_planner.claims import ClaimTemplate, parse_claim_template
from vke_gpu_dra_planner.fit import FitResult, Planner
from vke_gpu_dra_planner.inventory import GpuPool
from vke_gpu_dra_planner.stack import default_classes

#: CEL naming the driver's attributes and capacities.
ATTRS = f"device.attributes['{facts.DRIVER_NAME}']"
CAPS = f"device.capacity['{facts.DRIVER_NAME}']"
MEM = f"{CAPS}.{facts.CAPACITY_MEMORY}"
CC = f"{ATTRS}.{facts.ATTR_CUDA_COMPUTE_CAPABILITY}"


def exactly(
    name: str,
    count: int = 1,
    *selectors: str,
    cls: str = facts.DEVICE_CLASS_GPU.name,
    mode: str | None = None,
    admin: bool = False,
) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": cls}
    if admin:
        body["adminAccess"] = True
    if mode == "All":
        body["allocationMode"] = "All"
    else:
        body["count"] = count
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": body}


def template(
    *requests: dict[str, Any], constraints: list[dict[str, Any]] | None = None, name: str = "t"
) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": {"devices": devices}},
    }


def parsed(*requests: dict[str, Any], constraints: list[dict[str, Any]] | None = None) -> ClaimTemplate:
    return parse_claim_template(template(*requests, constraints=constraints))


def pool(product: str = "NVIDIA A30", gpus: int = 2, low: int = 1, high: int = 2) -> GpuPool:
    return GpuPool("pool", "ecs.test.x", product, gpus, low, high)


def fit(tpl: ClaimTemplate, replicas: int = 1, pools: list[GpuPool] | None = None) -> FitResult:
    planner = Planner(default_classes())
    return planner.fit("t", [(tpl.name, tpl.spec)], [pools or [pool()]], replicas)
