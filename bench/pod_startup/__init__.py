"""Pod start-up on the real node: pod create -> Running with a GPU claim and without one (the floor).

The node tier's node (`tests/node`: containerd 2.1.9 with CDI, runc 1.4.4, the CNI bridge, in namespaces of
its own) runs the real kubelet of each release asked for, registered with a control plane of that release
(kube-apiserver, kube-scheduler, kube-controller-manager, etcd from the toolchain); the chart's objects and
a one-GPU ResourceClaimTemplate come from `tests/node/test_dra.py`'s `gpu_node`, with our plugin as a host
process standing for its DaemonSet pod (simulated GPUs), or another plugin binary given by path. Per
kubelet release and plugin, on a fresh node:

* `--pods` pods with one GPU claim and as many without any claim, created one after another, alternating
  (floor, GPU, GPU, floor, ...); each is deleted once Running and gone before the next is created, so
  each starts alone on the node. One untimed pod of each kind first.
* `--burst` GPU pods created at once (one thread each, released together), then as many pods without
  claims: the time from the first create to the last pod Running, and each pod's own time.

A pod's time runs from just before its create request to the watch event that shows it Running (a
watch on the namespace's pods, this process's monotonic clock). Percentiles are nearest-rank. Prints one
Markdown table per kubelet release, one column per plugin; `--json` writes the figures and samples,
`--logs` keeps each node's logs.

Run as root from the repository root (`__main__.py`; the parts: `watch`, `runs`, `report`, `cli`, each
importing only those before it), with the toolchain's node binaries and kubelets built:
`nice python -m bench.pod_startup [--kubelet 1.34] [--pods 30] [--burst 16] [--plugin PATH --plugin-args
TEMPLATE]` (driver/BENCHMARKS.md, "Pod start-up on the real node").
"""

from __future__ import annotations

from .cli import main, parse_args, unavailable
from .report import failures, percentile
from .runs import PLACEHOLDERS, failed_prepares
from .watch import POD_TIMEOUT

__all__ = [
    "PLACEHOLDERS", "POD_TIMEOUT", "failed_prepares", "failures", "main", "parse_args", "percentile",
    "unavailable",
]  # fmt: skip
