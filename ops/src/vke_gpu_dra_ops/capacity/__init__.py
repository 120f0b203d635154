"""Capacity planning: prove every device claim fits the GPU node pools before a GPU is paid for.

* `celenv` — the DRA CEL environment (quantity(), semver(), type-checked like the apiserver);

The GPU catalog, quantities and semver are the shared contract's (`vke_gpu_dra_core`).
* `allocator` — resource.k8s.io/v1 structured allocation on one node;
* `planner`, `stack` — replicas of claim templates against pools (each alone on an empty pool);
* `scheduler` — a whole stack's pods placed as kube-scheduler's default profile places them, and bounds;
* `admission`, `versions` — what the API server refuses, per Kubernetes version (feature-gate defaults);
* `policy` — the stack plan (`plan_model`) and the stack policy's violations.

The names below are the package's public entry point: what the policy pack uses (the stack policy and
the CEL environment its DeviceClass checks compile selectors in). Other packages import them from here,
never from the modules (the import contract in pyproject.toml holds the pack to that).
"""

from .celenv import DeviceContext, SelectorCompileError, SelectorError, compile_selector
from .policy import POLICY_DESCRIPTION, POLICY_NAME, Violation, check_stack

__all__ = [
    "POLICY_DESCRIPTION",
    "POLICY_NAME",
    "DeviceContext",
    "SelectorCompileError",
    "SelectorError",
    "Violation",
    "check_stack",
    "compile_selector",
]
