"""Operator tools for DRA GPUs on VKE: `verify`, `demo`, `plan`.

* `procedure` — the VKE DRA procedure's checks, as pure functions of a fetched `Snapshot`;
* `kube`, `verify` — fetching that snapshot from a live cluster, and the `verify` command around it;
* `demo`, `demo_stacks`, `pulumi_workspace` — the `demo` command's stacks (Pulumi Automation API);
* `plan` — the `plan` command: reads a stack file and manifests, asks the capacity planner
  (`vke_gpu_dra_planner`) and prints its report.
"""
