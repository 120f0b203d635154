"""What the program knows of the cluster's DRA fields from `cluster.kubernetesVersion` (core's table, the one
the driver's dry-runs and the planner's versions agree with: tests/capacity/test_dra_gates.py)."""

from __future__ import annotations

import pytest
from vke_gpu_dra_core import config as config_mod
from vke_gpu_dra_core import dra_gates, facts, vke_releases
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core.versions import format_version

from tests.program import harness

ALL = frozenset(dra_gates.SLICE_FIELDS)


@pytest.mark.parametrize(
    ("stack", "overrides", "fields", "shared"),
    [
        ("dev", {}, frozenset(), False),  # the example stack: 1.34
        ("dev", {"driver.featureGates": "ConsumableShares=true"}, frozenset(), False),
        ("dev", {"cluster.kubernetesVersion": "1.37", "cluster.forceKubernetesVersion": "true"}, ALL, False),
        (
            "dev",
            {
                "cluster.kubernetesVersion": "1.37",
                "cluster.forceKubernetesVersion": "true",
                "driver.featureGates": "ConsumableShares=true",
            },
            ALL,
            True,
        ),
        # an existing cluster may run a line VKE does not offer
        (
            "local",
            {"cluster.kubernetesVersion": "1.35", "driver.featureGates": "ConsumableShares=true"},
            frozenset(),
            False,
        ),
        (
            "local",
            {"cluster.kubernetesVersion": "1.36", "driver.featureGates": "ConsumableShares=true"},
            ALL,
            True,
        ),
    ],
)
def test_slice_fields_and_shared_gpus_per_cluster_version(
    stack: str, overrides: dict, fields: frozenset, shared: bool
) -> None:
    cfg = config_mod.load(harness.stack_raw_config(stack, overrides))
    assert cfg.slice_fields == fields
    assert cfg.gpus_shared_by_memory is shared


def test_one_table_for_the_gates_of_each_version() -> None:
    assert dra_gates.slice_fields_kept((1, 34)) == frozenset()
    assert dra_gates.slice_fields_kept((1, 34), frozenset({dra_gates.DEVICE_TAINTS})) == {"taints"}
    assert dra_gates.slice_fields_kept((1, 32), frozenset({dra_gates.CONSUMABLE_CAPACITY})) == frozenset()
    assert dra_gates.slice_fields_kept((1, 36)) == ALL
    assert facts.EXTENDED_RESOURCE_MIN_KUBERNETES_VERSION == (1, 36)


@pytest.mark.parametrize("line", [format_version(v) for v in vke_releases.OFFERED])
def test_the_cluster_resource_gets_the_line_vke_runs_its_newest_build_of(line: str) -> None:
    """The program writes the line, never a patch: VKE's provider keeps `1.37` unchanged against the build the
    cluster reports (`v1.37.2-vke.1`), and the field is replace-on-change."""
    run = harness.run_stack("dev", {"cluster.kubernetesVersion": line})
    assert run.one(pt.CLUSTER).inputs["kubernetesVersion"] == line


@pytest.mark.parametrize("line", ["1.36", "1.37", "1.38"])
def test_a_line_vke_does_not_document_stops_the_program_before_any_resource(line: str) -> None:
    with pytest.raises(config_mod.StackConfigError) as info:
        harness.run_stack("dev", {"cluster.kubernetesVersion": line})
    (issue,) = info.value.issues
    assert (issue.key, issue.value) == ("cluster.kubernetesVersion", repr(line))
    assert "major.minor: 1.34 (" in issue.allowed and "cluster.forceKubernetesVersion=true" in issue.allowed


@pytest.mark.parametrize("line", ["1.37", "1.38"])
def test_a_forced_line_goes_to_the_cluster_resource_as_written(line: str) -> None:
    run = harness.run_stack(
        "dev", {"cluster.kubernetesVersion": line, "cluster.forceKubernetesVersion": "true"}
    )
    assert run.one(pt.CLUSTER).inputs["kubernetesVersion"] == line
