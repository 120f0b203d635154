"""Production stacks protect the cluster and its node pools from deletion."""

from __future__ import annotations

from .. import resources as r
from . import Violation

PROTECTED_TYPES = (r.CLUSTER, r.NODE_POOL)


def protected(res: r.Res, production: bool) -> list[Violation]:
    if not production or res.type not in PROTECTED_TYPES or res.protect:
        return []
    return [
        Violation(
            f"{res.label}: protect is false in a production stack, so `pulumi destroy` or a replacement "
            "would delete it; set opts=pulumi.ResourceOptions(protect=True).",
            res.urn,
        )
    ]
