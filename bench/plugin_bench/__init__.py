"""Kubelet-plugin benchmark: every performance figure of the plugin, against its target, in one run.

Starts the real plugin process (simulated mode, 8 GPUs) against the project's HTTP fake of the
Kubernetes API on 127.0.0.1, talks to it over its unix sockets like kubelet does, and prints one
Markdown table: start-up (to GetInfo, to the first ResourceSlice), the floor measured in the same run
(a gRPC round trip to a trivial servicer + one GET of a claim of the kind the plugin makes), the
least a prepare that records it durably can take (that servicer doing the GET and one fdatasync'd
record), NodePrepareResources and NodeUnprepareResources latency (1 claim x 1 device), CPU time and fsyncs
per prepare+unprepare cycle, overlapping prepares, ResourceSlice restoration and resident memory.

`--baseline REV` also measures the plugin of commit REV, checked out in a temporary git worktree
and run with `python -m vke_gpu_dra` from it, in runs interleaved with the current plugin's
(`--repeats` of each); the table then shows the medians of both and their ratio.

Run from the repository root: `python bench/driver_bench.py [--baseline REV] [--repeats N]
[--cycles N] [--overlap PxC] [--memory-cycles N]`. The exit code is 0 when every call succeeded
(a missed target is reported in the table, not as a failure).

The parts, each importing only those listed before it: `settings` (paths, bounds, targets), `probes`
(percentiles, memory, CPU time), `timed_fake` (the fake API server that remembers its watch events), `trees`
(the current plugin or a commit's, in a worktree), `plugin` (one plugin process), `workloads` (what kubelet
asks), `floor` (the floor and its trivial servicer), `fsyncs`, `idle` (idle CPU beside a bare gRPC server),
`figures` (one run's rows), `report` (the table over the runs), `runs` (one run, and the runs interleaved)
and `cli` (the command line, `bench/driver_bench.py`).
"""
