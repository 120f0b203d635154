"""The capacity planner: prove every device claim fits the GPU node pools before a GPU is paid for.

Modules, from the ground up (each imports only those above it and core):

* `semver`, `cel` — strict semantic versions; the DRA CEL environment (quantity(), semver(),
  type-checked like the apiserver);
* `claims`, `inventory` — DeviceClasses, claims and pod claim references; the devices a pool publishes
  (and how they are shared with the driver gate ConsumableShares, or partitioned with DynamicMIG);
* `placement`, `selection` — where a workload's pods may run; which devices a selector accepts (cached);
* `gates`, `mig` — feature-gate defaults per Kubernetes version (and the operator's overrides); MIG
  claims per profile that fit a partitioned pool;
* `allocator` — resource.k8s.io/v1 structured allocation on one node (shared counters included);
* `admission` — what the API server refuses;
* `stack` — what a stack asks for and buys (from its registered resources, or a stack file and manifests);
* `fit` — how many replicas of one claim set fit a pool (alone on an empty pool), and why not;
* `scheduler` — a whole stack's pods placed as kube-scheduler's default profile places them, and bounds;
* `verdict` — the stack's verdict (`plan_model`: every workload and template) and the capacity
  policy's violations of it (`check_stack`).

The GPU catalog, quantities and the device model are the shared contract's (`vke_gpu_dra_core`).

The names below are the package's public entry point: what the policy pack uses (the stack policy and
the CEL environment its DeviceClass checks compile selectors in). The pack imports them from here,
never from the modules (the import contract in pyproject.toml holds it to that); `vke-gpu-dra plan`
(ops/) uses the modules.
"""

from .cel.environment import DeviceContext, SelectorCompileError, SelectorError, compile_selector
from .verdict import Violation, check_stack

__all__ = [
    "DeviceContext",
    "SelectorCompileError",
    "SelectorError",
    "Violation",
    "check_stack",
    "compile_selector",
]
