from __future__ import annotations

from typing import Any

from vke_dra_policies.checks import claims
from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r

from .helpers import res

CLASSES = [
    res(pt.DEVICE_CLASS, f"dc-{dc.name}", {"metadata": {"name": dc.name}}) for dc in facts.DEVICE_CLASSES
]


def template(requests: list[dict[str, Any]], name: str = "single-gpu", ns: str | None = None) -> r.Res:
    metadata = {"name": name, **({"namespace": ns} if ns else {})}
    return res(
        pt.RESOURCE_CLAIM_TEMPLATE,
        f"rct-{name}",
        {"metadata": metadata, "spec": {"spec": {"devices": {"requests": requests}}}},
    )


def exactly(class_name: Any) -> dict[str, Any]:
    return {"name": "gpu", "exactly": {"deviceClassName": class_name}}


def deployment(claims_: Any, container_claims: Any, ns: str | None = None) -> r.Res:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"claims": container_claims}}]}
    if claims_ is not None:
        spec["resourceClaims"] = claims_
    metadata = {"name": "d", **({"namespace": ns} if ns else {})}
    return res(
        pt.DEPLOYMENT,
        "deploy",
        {"metadata": metadata, "spec": {"template": {"spec": spec}}},
    )


def test_templates_name_known_classes() -> None:
    good = template(
        [
            exactly(facts.DEVICE_CLASS_GPU.name),
            {
                "name": "any",
                "firstAvailable": [
                    {"name": "mig", "deviceClassName": facts.DEVICE_CLASS_MIG.name},
                    {"name": "full", "deviceClassName": facts.DEVICE_CLASS_GPU.name},
                ],
            },
        ]
    )
    assert claims.template_classes([*CLASSES, good]) == []


def test_unknown_classes_in_requests_and_subrequests() -> None:
    bad = template(
        [
            exactly("tpu.example.com"),
            {"name": "any", "firstAvailable": [{"name": "x", "deviceClassName": "x.example.com"}]},
            {"name": "old", "deviceClassName": "gpu.example.com"},
        ]
    )
    found = [v.message for v in claims.template_classes([*CLASSES, bad])]
    assert len(found) == 3
    assert "requests[0].exactly.deviceClassName is 'tpu.example.com'" in found[0]
    assert "requests[1].firstAvailable[0].deviceClassName is 'x.example.com'" in found[1]
    assert "requests[2].deviceClassName is 'gpu.example.com'" in found[2]
    (missing,) = claims.template_classes([*CLASSES, template([exactly(None)])])
    assert "is None" in missing.message


def test_claim_template_names_are_not_judged_while_unknown() -> None:
    assert claims.template_classes([*CLASSES, template([exactly(r.UNKNOWN)])]) == []
    unknown_class = res(pt.DEVICE_CLASS, "dc-x", {"metadata": {"name": r.UNKNOWN}})
    assert claims.template_classes([unknown_class, template([exactly("x.example.com")])]) == []


def test_resource_claims_are_checked_like_templates() -> None:
    claim = res(
        pt.RESOURCE_CLAIM,
        "claim",
        {"metadata": {"name": "c"}, "spec": {"devices": {"requests": [exactly("nope.example.com")]}}},
    )
    (v,) = claims.template_classes([*CLASSES, claim])
    assert "spec.devices.requests[0]" in v.message


def test_pod_claims_resolve() -> None:
    ok = deployment([{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}], [{"name": "gpu"}])
    assert claims.pod_claims([template([exactly(facts.DEVICE_CLASS_GPU.name)]), ok]) == []


def test_container_claim_without_pod_claim() -> None:
    (v,) = claims.pod_claims([template([]), deployment(None, [{"name": "gpu"}])])
    assert "containers[0].resources.claims[0].name is 'gpu'" in v.message and "found []" in v.message


def test_pod_claim_naming_a_missing_template_or_namespace() -> None:
    pod_claim = [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]
    (v,) = claims.pod_claims([deployment(pod_claim, [{"name": "gpu"}])])
    assert 'no ResourceClaimTemplate "single-gpu" exists in namespace "default"' in v.message
    (v,) = claims.pod_claims([template([], ns="ml"), deployment(pod_claim, [{"name": "gpu"}], ns="other")])
    assert 'namespace "other"' in v.message
    assert claims.pod_claims([template([], ns="ml"), deployment(pod_claim, [{"name": "gpu"}], ns="ml")]) == []


def test_pod_claim_by_claim_name_or_by_nothing() -> None:
    named = res(pt.RESOURCE_CLAIM, "claim", {"metadata": {"name": "shared"}})
    by_claim = deployment([{"name": "gpu", "resourceClaimName": "shared"}], [{"name": "gpu"}])
    assert claims.pod_claims([named, by_claim]) == []
    (v,) = claims.pod_claims([by_claim])
    assert 'no ResourceClaim "shared"' in v.message
    (v,) = claims.pod_claims([deployment([{"name": "gpu"}], [{"name": "gpu"}])])
    assert "names neither" in v.message


def test_pods_and_cronjobs_are_workloads_too() -> None:
    pod = res(
        pt.POD,
        "p",
        {
            "metadata": {"name": "p"},
            "spec": {
                "initContainers": [{"name": "i", "resources": {"claims": [{"name": "gpu"}]}}],
                "containers": [],
            },
        },
    )
    (v,) = claims.pod_claims([pod])
    assert "spec.initContainers[0]" in v.message
    cron = res(
        pt.CRON_JOB,
        "cj",
        {
            "spec": {
                "jobTemplate": {
                    "spec": {
                        "template": {
                            "spec": {
                                "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}]
                            }
                        }
                    }
                }
            }
        },
    )
    assert len(claims.pod_claims([cron])) == 1


def test_unknown_pod_claims_are_not_judged() -> None:
    assert claims.pod_claims([deployment(r.UNKNOWN, [{"name": "gpu"}])]) == []
    unknown_tpl = res(pt.RESOURCE_CLAIM_TEMPLATE, "t", {"metadata": {"name": r.UNKNOWN}})
    pod_claim = [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]
    assert claims.pod_claims([unknown_tpl, deployment(pod_claim, [{"name": "gpu"}])]) == []
