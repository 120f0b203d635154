"""`vke-gpu-dra plan` plans a stack once; its report is rendered from that plan's results alone."""

from vke_gpu_dra_ops import plan as plan_command
from vke_gpu_dra_planner.stack import model_from_resources
from vke_gpu_dra_planner.verdict import plan_model

from .helpers import exactly
from .test_policy import claim_template, deployment, node_pool


def test_the_report_renders_the_plan_without_planning_again(monkeypatch) -> None:
    model = model_from_resources(
        [
            node_pool(),
            claim_template(exactly("gpu", 2)),
            claim_template(exactly("gpu", 1), name="u"),
            deployment(3.0),
        ]
    )
    plan = plan_model(model, templates_alone=True)
    assert [(t.template.name, t.wanted, t.alone.fits) for t in plan.templates] == [
        ("t", 3, True),
        ("u", None, True),
    ]
    checks = plan.planner.cache.stats.checks

    def no_planning(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the report must not plan")

    monkeypatch.setattr(type(plan.planner), "fit", no_planning)
    report = plan_command.build_report(plan)
    assert plan.planner.cache.stats.checks == checks == report["selectorChecks"]
    assert [(t["name"], t["replicasWanted"], t["fitsAlone"]) for t in report["templates"]] == [
        ("t", 3, True),
        ("u", None, True),
    ]
    assert [(w["name"], w["status"], w["placed"]) for w in report["workloads"]] == [("app", "fits", 3)]
    assert report["fits"] is True


def test_the_policy_plan_leaves_templates_alone_out() -> None:
    model = model_from_resources([node_pool(), claim_template(exactly("gpu", 2)), deployment(3.0)])
    assert plan_model(model).templates == []
