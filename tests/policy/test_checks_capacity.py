from __future__ import annotations

from typing import Any

import pytest
from vke_dra_policies import context
from vke_dra_policies.checks import capacity
from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt

from .stacks import Stack, program_stack

DEPLOYMENT = pt.DEPLOYMENT
POOL = pt.NODE_POOL


@pytest.fixture(scope="module")
def dev() -> Any:  # a Stack of SimRes, which the checks read as Res
    return program_stack("dev", "python")


def test_the_program_sample_fits_its_pool(dev: Any) -> None:
    assert capacity.claims_fit(dev, {}) == []


def test_replicas_beyond_the_pool_are_reported_on_the_workload(dev: Any) -> None:
    def more(s: Stack) -> None:
        s.one(DEPLOYMENT).props["spec"]["replicas"] = 2

    (violation,) = capacity.claims_fit(dev.mutated(more), {})
    assert violation.urn == dev.one(DEPLOYMENT).urn
    assert "2 replicas wanted, 1 fit per node, 1 on the pool's maximum of 1 nodes" in violation.message


def test_catalog_rows_come_from_the_stack_config(dev: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def bigger(s: Stack) -> None:
        s.one(POOL).props["nodeConfig"]["instanceTypeIds"] = ["ecs.gni2.8xlarge"]

    stack = dev.mutated(bigger)
    (violation,) = capacity.claims_fit(stack, {})
    assert "add it with the config key vke-gpu-dra:gpuInstanceTypes" in violation.message
    rows = '{"ecs.gni2.8xlarge": {"product": "NVIDIA A10", "gpus": 2, "source": "console"}}'
    monkeypatch.setattr(context.STACK, "config", {"vke-gpu-dra:gpuInstanceTypes": rows})
    monkeypatch.setattr(context.STACK, "project", "vke-gpu-dra")
    assert capacity.claims_fit(stack, {}) == []


TEMPLATE = pt.RESOURCE_CLAIM_TEMPLATE
CLUSTER = pt.CLUSTER


# Untyped like its siblings: a Stack holds SimRes, which claims_fit reads like the analyzer's resources.
def test_the_cluster_version_selects_the_admission_rules(dev):
    """distinctAttribute is refused by a 1.34 API server (DRAConsumableCapacity off) and accepted from
    1.36 (beta, on): the program's cluster resource says which."""

    def distinct(s: Stack) -> None:
        devices = s.one(TEMPLATE).props["spec"]["spec"]["devices"]
        devices["constraints"] = [{"distinctAttribute": f"{facts.DRIVER_NAME}/{facts.ATTR_UUID}"}]

    stack = dev.mutated(distinct)
    (violation,) = capacity.claims_fit(stack, {})
    assert "spec.spec.devices.constraints[0].matchAttribute: Required value" in violation.message
    assert "DRAConsumableCapacity is off by default in 1.34" in violation.message

    def newer(s: Stack) -> None:
        s.one(CLUSTER).props["kubernetesVersion"] = "v1.36.0-vke.1"

    assert capacity.claims_fit(stack.mutated(newer), {}) == []
