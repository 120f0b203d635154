"""Capacity planning: prove every device claim fits the GPU node pools before a GPU is paid for.

* `cel` — the DRA CEL environment (quantity(), semver(), type-checked like the apiserver);
* `claims`, `placement` — DeviceClasses, claims and pod claim references; where a workload's pods may run;
* `inventory`, `selection` — the devices a pool publishes; which of them a selector accepts (cached);
* `allocator` — resource.k8s.io/v1 structured allocation on one node;
* `stack_model` — what a stack asks for and buys (from its registered resources, or a stack file and
  manifests);
* `planner` — replicas of claim templates against pools (each alone on an empty pool);
* `scheduler` — a whole stack's pods placed as kube-scheduler's default profile places them, and bounds;
* `admission`, `versions` — what the API server refuses, per Kubernetes version (feature-gate defaults);
* `stack_plan` — the stack plan (`plan_model`) and the capacity policy's violations of it.

The GPU catalog, quantities and semver are the shared contract's (`vke_gpu_dra_core`).

The names below are the package's public entry point: what the policy pack uses (the stack policy and
the CEL environment its DeviceClass checks compile selectors in). Other packages import them from here,
never from the modules (the import contract in pyproject.toml holds the pack to that).
"""

from .cel.environment import DeviceContext, SelectorCompileError, SelectorError, compile_selector
from .stack_plan import Violation, check_stack

__all__ = [
    "DeviceContext",
    "SelectorCompileError",
    "SelectorError",
    "Violation",
    "check_stack",
    "compile_selector",
]
