"""Production stacks protect the cluster and its node pools from deletion."""

from __future__ import annotations

from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r

from . import Violation

PROTECTED_TYPES = (pt.CLUSTER, pt.NODE_POOL)


def protected(
    res: r.Res, production: bool, problem: str | None = None, stack_sets_it: bool = False, stack: str = ""
) -> list[Violation]:
    """`problem`: the production value is not a boolean; reported on each cluster and pool.
    `stack_sets_it`: the stack's own `production` setting is true (the program protects them then), as
    against production named only by the pack's configuration; `stack`: its name, for the command."""
    if res.type not in PROTECTED_TYPES:
        return []
    if problem is not None:
        return [
            Violation(f"{res.label}: {problem}; fix the value (checked as production meanwhile).", res.urn)
        ]
    if not production or res.protect:
        return []
    deletes = "protect is false in a production stack, so `pulumi destroy` or a replacement would delete it"
    if stack_sets_it:
        # The program protects them whenever the stack says production: this resource came another way.
        fix = f"protect it in the state: pulumi state protect '{res.urn}'"
    else:
        where = f" --stack {stack}" if stack else ""
        fix = (
            f"mark the stack production: pulumi config set{where} production true "
            "(the program then protects the cluster and its node pools)"
        )
    return [Violation(f"{res.label}: {deletes}; {fix}.", res.urn)]
