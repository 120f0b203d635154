"""Production stacks protect the cluster and its node pools from deletion."""

from __future__ import annotations

from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r

from . import Violation

PROTECTED_TYPES = (pt.CLUSTER, pt.NODE_POOL)


def protected(res: r.Res, production: bool, problem: str | None = None) -> list[Violation]:
    """`problem`: the production value is not a boolean; reported on each cluster and pool."""
    if res.type not in PROTECTED_TYPES:
        return []
    if problem is not None:
        return [
            Violation(f"{res.label}: {problem}; fix the value (checked as production meanwhile).", res.urn)
        ]
    if not production or res.protect:
        return []
    return [
        Violation(
            f"{res.label}: protect is false in a production stack, so `pulumi destroy` or a replacement "
            "would delete it; set opts=pulumi.ResourceOptions(protect=True).",
            res.urn,
        )
    ]
