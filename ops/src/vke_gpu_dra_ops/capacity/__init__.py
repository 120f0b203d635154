"""Capacity planning: prove every device claim fits the GPU node pools before a GPU is paid for.

* `catalog` — GPU ECS instance types (data in gpu_catalog.yaml, extendable from stack config);
* `quantity`, `celenv` — the DRA CEL environment (quantity(), semver(), type-checked like the apiserver);
* `allocator` — resource.k8s.io/v1 structured allocation on one node;
* `planner`, `stack` — replicas of claim templates against pools (each alone on an empty pool);
* `scheduler` — a whole stack's pods placed as kube-scheduler's default profile places them, and bounds;
* `admission`, `versions` — what the API server refuses, per Kubernetes version (feature-gate defaults);
* `policy` — the stack plan (`plan_model`) and the stack policy's violations.
"""

from .catalog import CatalogError, InstanceType, gpu_instance_types, load_catalog
from .policy import POLICY_DESCRIPTION, POLICY_NAME, Violation, check_stack

__all__ = [
    "POLICY_DESCRIPTION",
    "POLICY_NAME",
    "CatalogError",
    "InstanceType",
    "Violation",
    "check_stack",
    "gpu_instance_types",
    "load_catalog",
]
