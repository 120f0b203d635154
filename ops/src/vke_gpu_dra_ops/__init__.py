"""Operator tools for DRA GPUs on VKE: `verify`, `demo`, `plan`.

* `procedure` — the VKE DRA procedure's checks, as pure functions of a fetched `Snapshot`;
* `kube`, `verify` — fetching that snapshot from a live cluster, and the `verify` command around it;
* `demo`, `demo_stacks`, `pulumi_workspace` — the `demo` command's stacks (Pulumi Automation API);
* `plan`, `capacity` — the `plan` command and the capacity planner behind it and the capacity policy.
"""
