"""One reader of registered resources: the planner sees a stack the way the policy pack's validators do."""

from types import SimpleNamespace
from typing import Any

from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r
from vke_gpu_dra_planner import check_stack
from vke_gpu_dra_planner.stack import model_from_resources

from .helpers import exactly
from .test_policy import Unknown, claim_template, deployment, node_pool


def test_read_turns_any_pulumi_shaped_resource_into_the_packs_view() -> None:
    pool = SimpleNamespace(urn="urn:pool")
    raw = SimpleNamespace(
        type=pt.NODE_POOL_RUNTIME,
        name="rt",
        urn="urn:rt",
        props={"min_replicas": 1.0, "max_replicas": Unknown(), "labels": ("a", "b"), "raw": {1: "x"}},
        dependencies=[pool, "urn:cluster"],
    )
    res = r.read(raw)
    assert res == r.Res(
        pt.NODE_POOL_RUNTIME,
        "rt",
        "urn:rt",
        {"min_replicas": 1.0, "max_replicas": r.UNKNOWN, "labels": ["a", "b"], "raw": r.UNKNOWN},
        dependencies=("urn:pool", "urn:cluster"),
    )
    assert r.is_node_pool_runtime(res)
    assert r.read(res) is res
    assert r.is_known(res.props["min_replicas"]) and not r.is_known(res.props)


def test_a_kubernetes_resource_registers_its_object_with_the_tokens_api_version_and_kind() -> None:
    namespace = r.Res(pt.NAMESPACE, "ns", "urn:ns", {"metadata": {"name": "gpu"}})
    assert r.kubernetes_object(namespace) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "gpu"},
    }
    previewed = r.Res(pt.CRON_JOB, "job", "urn:job", {"apiVersion": r.UNKNOWN, "kind": "CronJob"})
    assert r.kubernetes_object(previewed) == {"apiVersion": "batch/v1", "kind": "CronJob"}


def test_pod_spec_paths_cover_every_workload_kind_and_jobs_nest_their_pod_template() -> None:
    for token, path in pt.POD_SPEC_PATHS.items():
        api_version, kind = pt.kubernetes_api_version_kind(token)
        assert pt.POD_SPEC_PATHS_BY_KIND[kind] == path
        assert api_version in ("v1", "apps/v1", "batch/v1")
    for kind, job_path in pt.JOB_SPEC_PATHS_BY_KIND.items():
        assert pt.POD_SPEC_PATHS_BY_KIND[kind] == (*job_path, "template", "spec")


def _as_pack_sees_it(resource: SimpleNamespace) -> r.Res:
    """The same resource decoded as the pack decodes the engine's wire format (UNKNOWN for unknowns)."""

    def decode(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: decode(v) for k, v in value.items()}
        if isinstance(value, list):
            return [decode(v) for v in value]
        return r.UNKNOWN if isinstance(value, Unknown) else value

    return r.Res(resource.resource_type, resource.name, resource.urn, decode(resource.props))


def test_the_planner_reads_the_packs_view_and_duck_typed_resources_alike() -> None:
    stacks = [
        [node_pool(), claim_template(exactly("gpu", 4)), deployment(5.0)],  # pending pods
        [node_pool(types=[Unknown()]), claim_template(exactly("gpu", 1)), deployment(1.0)],  # preview
    ]
    for stack in stacks:
        as_pack = [_as_pack_sees_it(res) for res in stack]
        assert check_stack(as_pack) == check_stack(stack)
        assert model_from_resources(as_pack).undecided == model_from_resources(stack).undecided
    assert check_stack(stacks[0]) and not check_stack(stacks[1])
    assert model_from_resources(stacks[1]).undecided == [stacks[1][0].urn]
