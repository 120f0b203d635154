"""The VKE DRA procedure's checks ("Step 3" and "Validating results") as pure functions.

Every check takes a `Snapshot` of already fetched Kubernetes objects (plain JSON dicts, as the
API returns them) and returns a `StepResult`; nothing here talks to a cluster, so each check is
unit-testable with hand-written objects. `kube.py` fetches the snapshot, `verify.py` runs the
checks until they pass or time out and prints the checklist.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.objects import lookup
from vke_gpu_dra_core.versions import format_version

from vke_gpu_dra_ops import taint_rules

#: The resource.k8s.io group version and the resources the procedure expects it to serve.
RESOURCE_GROUP = "resource.k8s.io"
RESOURCE_VERSION = "v1"
RESOURCE_GROUP_VERSION = f"{RESOURCE_GROUP}/{RESOURCE_VERSION}"
REQUIRED_API_RESOURCES = ("deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices")

#: The procedure's sample workload ("Validating results").
SAMPLE_DEPLOYMENT = facts.SAMPLE_DEPLOYMENT
SAMPLE_CLAIM_TEMPLATE = facts.SAMPLE_CLAIM_TEMPLATE
#: The program's second sample, written for the device plugin (`nvidia.com/gpu: 1`, no claim): deployed where
#: gpu.nvidia.com maps nvidia.com/gpu, its pods get GPUs through the claim the scheduler makes for them.
CLASSIC_DEPLOYMENT = facts.SAMPLE_CLASSIC_DEPLOYMENT

#: Label selector of the nodes DRA GPUs are scheduled on.
DRA_NODE_SELECTOR = f"{facts.LABEL_GPU_SCHEDULE}={facts.LABEL_GPU_SCHEDULE_DRA}"

#: `nvidia-smi -L` line of a whole GPU, e.g. "GPU 0: NVIDIA A30 (UUID: GPU-c8133a35-…)".
GPU_LINE = re.compile(r"^GPU \d+: .+ \(UUID: GPU-[0-9A-Za-z-]+\)\s*$", re.MULTILINE)

JSON = dict[str, Any]


class Status(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"  # not checked because a step it depends on failed


@dataclass(frozen=True)
class StepResult:
    """Outcome of one check: what was found and, unless it passed, how to fix it."""

    id: str
    title: str
    status: Status
    found: str
    hint: str = ""
    #: Not checked and not failing the run: skipped on request (--skip), or a check that cannot apply
    #: (sample-log with simulated GPUs).
    waived: bool = False
    #: Structured findings for the JSON output (device-health: one row per device with a problem).
    details: tuple[JSON, ...] = ()

    @property
    def passed(self) -> bool:
        return self.status is Status.PASS

    @property
    def ok(self) -> bool:
        return self.passed or self.waived

    def as_json(self) -> JSON:
        return {
            "id": self.id,
            "title": self.title,
            "status": self.status.value,
            "found": self.found,
            "hint": self.hint,
            "waived": self.waived,
            **({"details": list(self.details)} if self.details else {}),
        }


@dataclass(frozen=True)
class Snapshot:
    """Everything the checks look at, fetched in one pass.

    `None` means "not fetched": the resource.k8s.io/v1 objects are not fetched when the
    group version is not served. Objects are Kubernetes JSON (camelCase keys).
    """

    api_resources: frozenset[str] | None  # resource names served by resource.k8s.io/v1
    nodes: Sequence[JSON] = ()  # nodes labelled vke.node.gpu.schedule=nvidia-dra
    driver_pods: Sequence[JSON] = ()  # pods of the driver namespace
    device_classes: Sequence[JSON] | None = None
    resource_slices: Sequence[JSON] | None = None
    sample_deployment: JSON | None = None
    sample_pods: Sequence[JSON] = ()  # pods selected by the sample Deployment
    claims: Sequence[JSON] | None = None  # ResourceClaims of the workload namespace
    pod_logs: Mapping[str, str] = field(default_factory=dict)  # pod name -> log of its GPU container
    classic_deployment: JSON | None = None  # the classic sample, where the stack deploys it
    classic_pods: Sequence[JSON] = ()  # pods selected by the classic sample Deployment
    #: DeviceTaintRules (None: not read, `taint_rules_source` says why) and the group version they came from.
    device_taint_rules: Sequence[JSON] | None = None
    taint_rules_source: str = "not read"


@dataclass(frozen=True)
class Settings:
    namespace: str = facts.DRIVER_NAMESPACE
    workload_namespace: str = "default"
    expected_devices_per_node: int | None = None
    sample_deployment: str = SAMPLE_DEPLOYMENT
    sample_claim_template: str = SAMPLE_CLAIM_TEMPLATE
    classic_deployment: str = CLASSIC_DEPLOYMENT
    skip: frozenset[str] = frozenset()  # step ids not to check
    # Label selector of the nodes that must have DRA GPUs; None: what the kubelet plugin DaemonSet selects.
    node_selector: str | None = DRA_NODE_SELECTOR
    device_source: str = ""  # the kubelet plugin's DEVICE_SOURCE when known: "nvml" or "simulated"


#: The kubelet plugin DaemonSet: this repository's chart labels it with the component; NVIDIA's names it.
KUBELET_PLUGIN_COMPONENT = "kubelet-plugin"
_SELECTOR_OPERATORS = {"In": "in", "NotIn": "notin"}


def _selector_of_pod_spec(spec: JSON) -> str | None:
    """The pod spec's required node selection as one label selector; None when it cannot be one (OR, Gt)."""
    parts = [f"{k}={v}" for k, v in sorted((spec.get("nodeSelector") or {}).items())]
    terms = (
        lookup(
            spec,
            "affinity",
            "nodeAffinity",
            "requiredDuringSchedulingIgnoredDuringExecution",
            "nodeSelectorTerms",
        )
        or []
    )
    if len(terms) > 1 or any(t.get("matchFields") for t in terms):
        return None
    for expr in (terms[0].get("matchExpressions") or []) if terms else []:
        key, op, values = expr.get("key", ""), expr.get("operator"), list(expr.get("values") or [])
        if op == "In" and len(values) == 1:
            parts.append(f"{key}={values[0]}")
        elif op in _SELECTOR_OPERATORS:
            parts.append(f"{key} {_SELECTOR_OPERATORS[op]} ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
        else:
            return None
    return ",".join(parts)


def kubelet_plugin(daemonsets: Sequence[JSON]) -> JSON | None:
    """The DRA driver's kubelet plugin DaemonSet among `daemonsets` (of the driver namespace)."""
    for ds in daemonsets:
        labels = lookup(ds, "metadata", "labels") or {}
        if labels.get("app.kubernetes.io/component") == KUBELET_PLUGIN_COMPONENT or _name(ds).endswith(
            "-kubelet-plugin"
        ):
            return ds
    return None


def fit_to_driver(settings: Settings, daemonsets: Sequence[JSON]) -> Settings:
    """Settings for the cluster as its driver was deployed: the nodes its kubelet plugin selects (unless
    --node-selector was given) and its device source (simulated GPUs print no nvidia-smi line)."""
    plugin = kubelet_plugin(daemonsets)
    spec = lookup(plugin, "spec", "template", "spec") or {} if plugin else {}
    selector = settings.node_selector
    if selector is None:
        selector = _selector_of_pod_spec(spec) if plugin else None
    env = {e.get("name"): e.get("value") for c in spec.get("containers") or [] for e in c.get("env") or []}
    return replace(
        settings,
        node_selector=DRA_NODE_SELECTOR if selector is None else selector,
        device_source=str(env.get("DEVICE_SOURCE") or settings.device_source),
    )


# --------------------------------------------------------------------------- helpers


def _name(obj: JSON) -> str:
    return str(obj.get("metadata", {}).get("name", "?"))


def _pod_problem(pod: JSON) -> str | None:
    """None when the pod is Running with every container ready; else a short description."""
    phase = lookup(pod, "status", "phase") or "Unknown"
    statuses = lookup(pod, "status", "containerStatuses") or []
    for cs in statuses:
        waiting = lookup(cs, "state", "waiting")
        if waiting:
            reason = waiting.get("reason", "Waiting")
            restarts = cs.get("restartCount", 0)
            return f"{reason} (container {cs.get('name', '?')}, {restarts} restarts)"
    if phase != "Running":
        reason = lookup(pod, "status", "reason")
        unscheduled = [
            c.get("message", "")
            for c in lookup(pod, "status", "conditions") or []
            if c.get("type") == "PodScheduled" and c.get("status") == "False"
        ]
        detail = reason or (unscheduled[0] if unscheduled and unscheduled[0] else "")
        return f"{phase}{': ' + detail if detail else ''}"
    not_ready = [cs.get("name", "?") for cs in statuses if not cs.get("ready")]
    if not_ready or not statuses:
        return f"Running but not Ready (containers not ready: {', '.join(not_ready) or 'no status'})"
    return None


def _live(pods: Sequence[JSON]) -> list[JSON]:
    """Pods that are not being deleted (a rollout leaves terminating pods behind)."""
    return [p for p in pods if not lookup(p, "metadata", "deletionTimestamp")]


def _join(items: Sequence[str], limit: int = 4) -> str:
    shown = list(items[:limit])
    if len(items) > limit:
        shown.append(f"… {len(items) - limit} more")
    return "; ".join(shown)


def _skip(step_id: str, title: str, reason: str) -> StepResult:
    return StepResult(step_id, title, Status.SKIP, f"not checked: {reason}")


# --------------------------------------------------------------------------- checks

API_TITLE = f"{RESOURCE_GROUP_VERSION} API resources"


def check_api_resources(snap: Snapshot, settings: Settings) -> StepResult:
    step = "api-resources"
    if snap.api_resources is None:
        return StepResult(
            step,
            API_TITLE,
            Status.FAIL,
            f"the API server does not serve {RESOURCE_GROUP_VERSION}",
            f"DRA needs Kubernetes {format_version(facts.MIN_KUBERNETES_VERSION)} or later "
            "(resource.k8s.io/v1 is served by default there): upgrade the cluster "
            "(stack config cluster.kubernetesVersion)",
        )
    missing = [r for r in REQUIRED_API_RESOURCES if r not in snap.api_resources]
    if missing:
        return StepResult(
            step,
            API_TITLE,
            Status.FAIL,
            f"{RESOURCE_GROUP_VERSION} lacks {', '.join(missing)}",
            "check the API server version and its --runtime-config; "
            "`kubectl api-resources | grep resource.k8s.io` lists what is served",
        )
    return StepResult(step, API_TITLE, Status.PASS, ", ".join(REQUIRED_API_RESOURCES))


def _no_nodes(settings: Settings) -> str:
    return f"no node labelled {settings.node_selector}" if settings.node_selector else "no nodes"


NO_NODES_HINT = (
    f"label the GPU node pool {DRA_NODE_SELECTOR} and {facts.LABEL_GPU_PRESENT}="
    f"{facts.LABEL_GPU_PRESENT_VALUE} (procedure step 1) and wait for its nodes to join"
)


def no_nodes_hint(settings: Settings) -> str:
    """What to do when no node is selected, for the selection in use."""
    if settings.node_selector == DRA_NODE_SELECTOR:
        return NO_NODES_HINT
    if not settings.node_selector:
        return "the cluster has no nodes: `kubectl get nodes`; wait for its nodes to join"
    return (
        f"no node matches {settings.node_selector}: label the nodes the driver should use, or pass "
        "--node-selector ('' for every node); `kubectl get nodes --show-labels` shows their labels"
    )


def check_driver_pods(snap: Snapshot, settings: Settings) -> StepResult:
    step, title = "driver-pods", "driver pods Running and Ready on DRA nodes"
    ns = settings.namespace
    if not snap.nodes:
        return StepResult(step, title, Status.FAIL, _no_nodes(settings), no_nodes_hint(settings))
    problems: list[str] = []
    hints: list[str] = []
    healthy: list[str] = []
    for node in snap.nodes:
        node_name = _name(node)
        pods = [p for p in _live(snap.driver_pods) if lookup(p, "spec", "nodeName") == node_name]
        if not pods:
            problems.append(f"node {node_name}: no driver pod in namespace {ns}")
            hints.append(
                f"`kubectl -n {ns} get daemonsets,pods -o wide`: the kubelet plugin's node affinity must "
                f"select {settings.node_selector or 'the node'}, and the chart must be installed into {ns}"
            )
            continue
        for pod in pods:
            problem = _pod_problem(pod)
            if problem:
                problems.append(f"node {node_name}: pod {_name(pod)} is {problem}")
                hints.append(
                    f"`kubectl -n {ns} describe pod {_name(pod)}` and "
                    f"`kubectl -n {ns} logs {_name(pod)} --all-containers`"
                )
            else:
                healthy.append(_name(pod))
    if problems:
        return StepResult(step, title, Status.FAIL, _join(problems), _join(sorted(set(hints)), 2))
    return StepResult(
        step, title, Status.PASS, f"{len(healthy)} pod(s) on {len(snap.nodes)} node(s): {_join(healthy)}"
    )


def check_device_classes(snap: Snapshot, settings: Settings) -> StepResult:
    step = "device-classes"
    wanted = [spec.name for spec in facts.DEVICE_CLASSES]
    title = f"DeviceClasses {', '.join(wanted)}"
    if snap.device_classes is None:
        return _skip(step, title, f"{RESOURCE_GROUP_VERSION} is not served")
    present = {_name(dc) for dc in snap.device_classes}
    missing = [name for name in wanted if name not in present]
    if missing:
        return StepResult(
            step,
            title,
            Status.FAIL,
            f"missing DeviceClass {', '.join(missing)} (present: {', '.join(sorted(present)) or 'none'})",
            "the driver chart creates them: check its release (`helm -n "
            f"{settings.namespace} list`) or apply them; `kubectl get deviceclass` lists what exists",
        )
    return StepResult(step, title, Status.PASS, ", ".join(wanted))


def _devices_per_node(slices: Sequence[JSON]) -> dict[str, list[str]]:
    """Device names of the driver per node, from the newest generation of each node's pool."""
    newest: dict[str, int] = {}
    for s in slices:
        node, gen = lookup(s, "spec", "nodeName"), lookup(s, "spec", "pool", "generation") or 0
        if node:
            newest[node] = max(newest.get(node, gen), gen)
    devices: dict[str, list[str]] = {}
    for s in slices:
        node, gen = lookup(s, "spec", "nodeName"), lookup(s, "spec", "pool", "generation") or 0
        if node and gen == newest[node]:
            devices.setdefault(node, []).extend(
                str(d.get("name", "?")) for d in lookup(s, "spec", "devices") or []
            )
    return devices


def check_resource_slices(snap: Snapshot, settings: Settings) -> StepResult:
    step = "resource-slices"
    expected = settings.expected_devices_per_node
    want = f"{expected} device(s)" if expected is not None else "at least 1 device"
    title = f"ResourceSlice of {facts.DRIVER_NAME} on each DRA node ({want})"
    if snap.resource_slices is None:
        return _skip(step, title, f"{RESOURCE_GROUP_VERSION} is not served")
    if not snap.nodes:
        return StepResult(step, title, Status.FAIL, _no_nodes(settings), no_nodes_hint(settings))
    ours = [s for s in snap.resource_slices if lookup(s, "spec", "driver") == facts.DRIVER_NAME]
    per_node = _devices_per_node(ours)
    problems: list[str] = []
    found: list[str] = []
    for node in snap.nodes:
        node_name = _name(node)
        devices = per_node.get(node_name)
        if devices is None:
            problems.append(f"node {node_name}: no ResourceSlice of {facts.DRIVER_NAME}")
        elif expected is not None and len(devices) != expected:
            problems.append(
                f"node {node_name}: {len(devices)} device(s) ({_join(devices)}), expected {expected}"
            )
        elif not devices:
            problems.append(f"node {node_name}: ResourceSlice lists no devices")
        else:
            found.append(f"{node_name}: {len(devices)} ({_join(devices)})")
    if problems:
        return StepResult(
            step,
            title,
            Status.FAIL,
            _join(problems),
            f"the kubelet plugin on the node publishes the slice: check its logs "
            f"(`kubectl -n {settings.namespace} logs <plugin pod on the node>`)"
            + (
                " and its SIMULATED_GPUS setting"
                if settings.device_source == "simulated"
                else " and the GPUs the node sees (`nvidia-smi -L` on the node)"
            )
            + "; `kubectl get resourceslice -o yaml` shows what is published",
        )
    return StepResult(step, title, Status.PASS, _join(found))


#: The kubelet plugin's health reporting (docs/health.md): NVIDIA's taint keys on the slice's devices, and
#: an annotation on the node's slices listing devices with problems (the only place an unhealthy device
#: shows on servers without device taints, where it is left out of the slice).
HEALTH_ANNOTATION = facts.health_annotation_key()
HEALTH_TAINT_KEYS = {facts.health_taint_key(k): k for k in facts.HEALTH_PROBLEMS}
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def _newest(slices: Sequence[JSON]) -> list[JSON]:
    newest: dict[str, int] = {}
    for s in slices:
        node, gen = lookup(s, "spec", "nodeName"), lookup(s, "spec", "pool", "generation") or 0
        if node:
            newest[node] = max(newest.get(node, gen), gen)
    return [
        s
        for s in slices
        if lookup(s, "spec", "nodeName")
        and (lookup(s, "spec", "pool", "generation") or 0) == newest[lookup(s, "spec", "nodeName")]
    ]


def device_health_rows(slices: Sequence[JSON]) -> list[JSON]:
    """One row per (node, device, problem): from the devices' taints and the health annotation.

    Row: node, device, reason (xid, gpu-lost, unmonitored), xid (or None), since, effect (the taint's,
    or "left out" when the device is not in the slice), blocking (not allocatable to new pods).
    """
    rows: dict[tuple[str, str, str], JSON] = {}
    for s in _newest([s for s in slices if lookup(s, "spec", "driver") == facts.DRIVER_NAME]):
        node = str(lookup(s, "spec", "nodeName"))
        present = {str(d.get("name")) for d in lookup(s, "spec", "devices") or []}
        for dev in lookup(s, "spec", "devices") or []:
            for taint in dev.get("taints") or []:
                taint_key, value = str(taint.get("key")), taint.get("value")
                # Another key (not the plugin's health): shown as key=value.
                reason = HEALTH_TAINT_KEYS.get(taint_key) or (f"{taint_key}={value}" if value else taint_key)
                rows[(node, str(dev.get("name")), reason)] = {
                    "node": node,
                    "device": str(dev.get("name")),
                    "reason": reason,
                    "xid": int(value) if reason == "xid" and str(value).isdigit() else None,
                    "since": taint.get("timeAdded"),
                    "effect": taint.get("effect"),
                    "blocking": taint.get("effect") in BLOCKING_EFFECTS,
                }
        try:
            noted = json.loads((lookup(s, "metadata", "annotations") or {}).get(HEALTH_ANNOTATION) or "[]")
        except ValueError:
            noted = []
        for entry in noted if isinstance(noted, list) else []:
            device = str(entry.get("device"))
            for problem in entry.get("problems") or []:
                key = (node, device, str(problem.get("reason")))
                if key in rows or (device in present and entry.get("health") != "unhealthy"):
                    continue  # shown by its taint, or informational on a published device
                rows[key] = {
                    "node": node,
                    "device": device,
                    "reason": str(problem.get("reason")),
                    "xid": problem.get("xid"),
                    "since": problem.get("since"),
                    "effect": None if device in present else "left out",
                    "blocking": entry.get("health") == "unhealthy",
                }
    return [rows[k] for k in sorted(rows)]


def drain_rule(row: JSON) -> str:
    """A DeviceTaintRule that drains the GPU of a device-health row, as one line of YAML: its
    `deviceSelector` names the driver, the pool (the plugin names its pool after its node) and the device,
    so it means the same on 1.37 and 1.38 (a rule without one selects no device, docs/health.md)."""
    node, device = str(row["node"]), str(row["device"])
    value = f"xid-{row['xid']}" if row["reason"] == "xid" and row["xid"] is not None else str(row["reason"])
    name = f"drain-{node}-{device}".lower()
    return (
        f"{{apiVersion: resource.k8s.io/v1, kind: DeviceTaintRule, metadata: {{name: {name}}}, spec: "
        f"{{deviceSelector: {{driver: {facts.DRIVER_NAME}, pool: {node}, device: {device}}}, "
        f"taint: {{key: example.com/drain, value: {value}, effect: NoExecute}}}}}}"
    )


def _health_text(row: JSON) -> str:
    reason = f"xid {row['xid']}" if row["reason"] == "xid" and row["xid"] is not None else row["reason"]
    how = "left out of the slice" if row["effect"] == "left out" else f"taint {row['effect']}"
    return f"{row['node']}: {row['device']} {reason} since {row['since'] or '?'} ({how})"


def check_device_health(snap: Snapshot, settings: Settings) -> StepResult:
    step, title = "device-health", "No unhealthy or tainted GPU devices"
    if snap.resource_slices is None:
        return _skip(step, title, f"{RESOURCE_GROUP_VERSION} is not served")
    rows = device_health_rows(snap.resource_slices)
    blocking = [r for r in rows if r["blocking"]]
    if blocking:
        return StepResult(
            step,
            title,
            Status.FAIL,
            _join([_health_text(r) for r in blocking], limit=8),
            "these GPUs reported a fatal XID or stopped answering NVML: the scheduler does not give them "
            "to new pods until they recover (the plugin's recovery window, docs/health.md); check "
            "`nvidia-smi -q` on the node and the plugin's logs "
            f"(`kubectl -n {settings.namespace} logs <plugin pod>`); to evict the pods still using them "
            "(Kubernetes 1.37 and later), create a DeviceTaintRule with effect NoExecute and an explicit "
            f"deviceSelector, e.g. `kubectl apply -f - <<< '{drain_rule(blocking[0])}'`",
            details=tuple(rows),
        )
    found = "none" if not rows else "none unhealthy; " + _join([_health_text(r) for r in rows], limit=8)
    return StepResult(step, title, Status.PASS, found, details=tuple(rows))


def _published_devices(slices: Sequence[JSON]) -> list[taint_rules.PublishedDevice]:
    return [
        taint_rules.PublishedDevice(
            pool=str(lookup(s, "spec", "pool", "name")),
            device=str(d.get("name")),
            node=str(lookup(s, "spec", "nodeName")),
        )
        for s in _newest([s for s in slices if lookup(s, "spec", "driver") == facts.DRIVER_NAME])
        for d in lookup(s, "spec", "devices") or []
    ]


def check_device_taint_rules(snap: Snapshot, settings: Settings) -> StepResult:
    step, title = "device-taint-rules", "No DeviceTaintRule keeps GPU devices from pods"
    if snap.resource_slices is None:
        return _skip(step, title, f"{RESOURCE_GROUP_VERSION} is not served")
    if snap.device_taint_rules is None:
        return StepResult(step, title, Status.PASS, f"not checked: {snap.taint_rules_source}")
    found = taint_rules.findings(
        snap.device_taint_rules, _published_devices(snap.resource_slices), facts.DRIVER_NAME
    )
    details = tuple(f.as_json() for f in found)
    blocking = [f for f in found if f.blocking]
    if blocking:
        return StepResult(
            step,
            title,
            Status.FAIL,
            _join([f.text() for f in blocking], limit=8),
            "while the rule exists, the scheduler gives these GPUs to no new pod that does not tolerate its "
            "taint (NoSchedule) and their pods are evicted (NoExecute): `kubectl get devicetaintrules` and "
            "`kubectl get devicetaintrule <name> -o yaml` (status.conditions) show it; delete the rule once "
            "the GPU is fit again (docs/health.md)",
            details=details,
        )
    text = "none" if not found else "none blocking; " + _join([f.text() for f in found], limit=8)
    return StepResult(step, title, Status.PASS, f"{text} ({snap.taint_rules_source})", details=details)


def check_no_device_plugin_capacity(snap: Snapshot, settings: Settings) -> StepResult:
    step, title = "no-device-plugin-capacity", f"DRA nodes expose no {facts.GPU_EXTENDED_RESOURCE} capacity"
    if not snap.nodes:
        return _skip(step, title, _no_nodes(settings))
    problems = []
    for node in snap.nodes:
        for part in ("capacity", "allocatable"):
            value = (lookup(node, "status", part) or {}).get(facts.GPU_EXTENDED_RESOURCE)
            if value is not None:
                problems.append(f"node {_name(node)}: {part} {facts.GPU_EXTENDED_RESOURCE}={value}")
    if problems:
        return StepResult(
            step,
            title,
            Status.FAIL,
            _join(problems),
            "the NVIDIA device plugin runs on (or ran on) the node: DRA nodes need "
            f"{DRA_NODE_SELECTOR} (not {' or '.join(facts.LABEL_GPU_SCHEDULE_CONFLICTING)}) and no device "
            "plugin; clear a stale value with `kubectl patch node <node> --subresource=status --type=json "
            '-p \'[{"op":"remove","path":"/status/capacity/nvidia.com~1gpu"}]\'`',
        )
    return StepResult(step, title, Status.PASS, f"none on {len(snap.nodes)} node(s)")


def _sample_ref(settings: Settings) -> str:
    return f"Deployment {settings.workload_namespace}/{settings.sample_deployment}"


def _sample_missing(snap: Snapshot, settings: Settings) -> tuple[str, str] | None:
    """(found, hint) when the sample Deployment or its pods are missing."""
    apply_hint = (
        f"deploy the sample: ResourceClaimTemplate {settings.sample_claim_template} and "
        f'{_sample_ref(settings)} (procedure "Validating results"; the program\'s sample workload)'
    )
    if snap.sample_deployment is None:
        return f"{_sample_ref(settings)} not found", apply_hint
    if not _live(snap.sample_pods):
        return (
            f"{_sample_ref(settings)} has no pods",
            f"`kubectl -n {settings.workload_namespace} describe deployment {settings.sample_deployment}`",
        )
    return None


def _claim_name_of(pod: JSON, template: str) -> tuple[str | None, str | None]:
    """(pod claim entry name, generated ResourceClaim name) for the entry using `template`."""
    entries = [
        e.get("name")
        for e in lookup(pod, "spec", "resourceClaims") or []
        if e.get("resourceClaimTemplateName") == template
    ]
    if not entries:
        return None, None
    for st in lookup(pod, "status", "resourceClaimStatuses") or []:
        if st.get("name") == entries[0]:
            return entries[0], st.get("resourceClaimName")
    return entries[0], None


def _classic_ref(settings: Settings) -> str:
    return f"Deployment {settings.workload_namespace}/{settings.classic_deployment}"


def _classic_pods(snap: Snapshot, settings: Settings) -> tuple[list[JSON], list[str]]:
    """The classic sample's live pods, and a problem when it is deployed without any (nothing when absent)."""
    if snap.classic_deployment is None:
        return [], []
    pods = _live(snap.classic_pods)
    return pods, [] if pods else [f"{_classic_ref(settings)} has no pods"]


def _gpu_class_mapping(snap: Snapshot) -> str | None:
    """The extended resource the gpu.nvidia.com DeviceClass maps, as the API server keeps it."""
    for dc in snap.device_classes or ():
        if _name(dc) == facts.DEVICE_CLASS_GPU.name:
            value = lookup(dc, "spec", "extendedResourceName")
            return str(value) if value else None
    return None


@dataclass
class _Findings:
    problems: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    found: list[str] = field(default_factory=list)

    def result(self, step: str, title: str) -> StepResult:
        if self.problems:
            return StepResult(
                step, title, Status.FAIL, _join(self.problems), _join(sorted(set(self.hints)), 2)
            )
        return StepResult(step, title, Status.PASS, _join(self.found))


def _check_claim(out: _Findings, claim: JSON, claim_name: str, pod: JSON, ns: str) -> None:
    """The claim `claim_name` of `pod` is allocated and reserved for the pod."""
    pod_name = _name(pod)
    results = lookup(claim, "status", "allocation", "devices", "results") or []
    reserved = lookup(claim, "status", "reservedFor") or []
    pod_uid = lookup(pod, "metadata", "uid")
    if not lookup(claim, "status", "allocation"):
        out.problems.append(f"claim {claim_name} (pod {pod_name}) is not allocated")
        out.hints.append(
            f"`kubectl -n {ns} describe pod {pod_name}` shows why the scheduler cannot allocate: "
            f"check the ResourceSlices and DeviceClass {facts.DEVICE_CLASS_GPU.name}"
        )
    elif not any(r.get("name") == pod_name or (pod_uid and r.get("uid") == pod_uid) for r in reserved):
        out.problems.append(f"claim {claim_name} is allocated but not reserved for pod {pod_name}")
        out.hints.append(f"`kubectl -n {ns} describe resourceclaim {claim_name}`")
    else:
        devices = ", ".join(f"{r.get('device')}@{r.get('pool')}" for r in results) or "no devices"
        out.found.append(f"{claim_name}: allocated {devices}, reserved for {pod_name}")


def _check_classic_claims(
    out: _Findings, snap: Snapshot, settings: Settings, claims: Mapping[str, JSON]
) -> None:
    """Each classic sample pod has the claim the scheduler makes for its nvidia.com/gpu (KEP-5004)."""
    ns = settings.workload_namespace
    pods, problems = _classic_pods(snap, settings)
    out.problems.extend(problems)
    for pod in pods:
        pod_name = _name(pod)
        claim_name = lookup(pod, "status", "extendedResourceClaimStatus", "resourceClaimName")
        claim = claims.get(claim_name or "")
        if claim_name and claim is not None:
            _check_claim(out, claim, claim_name, pod, ns)
            continue
        if claim_name:
            out.problems.append(
                f"pod {pod_name}: its {facts.GPU_EXTENDED_RESOURCE} claim {claim_name} is gone"
            )
            out.hints.append(f"`kubectl -n {ns} describe pod {pod_name}`")
            continue
        out.problems.append(
            f"pod {pod_name} ({facts.GPU_EXTENDED_RESOURCE}: 1, no claim): "
            "the scheduler has made no claim for it"
        )
        mapped = _gpu_class_mapping(snap)
        if mapped != facts.GPU_EXTENDED_RESOURCE:
            out.hints.append(
                f"DeviceClass {facts.DEVICE_CLASS_GPU.name} maps {mapped or 'no extended resource'}, not "
                f"{facts.GPU_EXTENDED_RESOURCE}: API servers before 1.36 drop extendedResourceName unless "
                "their DRAExtendedResource gate is on (`kubectl get deviceclass "
                f"{facts.DEVICE_CLASS_GPU.name} -o yaml`); set driver.extendedResource to auto or off there"
            )
        else:
            out.hints.append(f"`kubectl -n {ns} describe pod {pod_name}` shows why it is not scheduled")


def check_sample_claim(snap: Snapshot, settings: Settings) -> StepResult:
    step = "sample-claim"
    title = f"sample ResourceClaim (template {settings.sample_claim_template}) allocated and reserved"
    if snap.classic_deployment is not None:
        title += f", and the claim the scheduler made for {_classic_ref(settings)}"
    if snap.claims is None:
        return _skip(step, title, f"{RESOURCE_GROUP_VERSION} is not served")
    missing = _sample_missing(snap, settings)
    if missing:
        return StepResult(step, title, Status.FAIL, *missing)
    ns = settings.workload_namespace
    claims = {_name(c): c for c in snap.claims}
    out = _Findings()
    for pod in _live(snap.sample_pods):
        pod_name = _name(pod)
        entry, claim_name = _claim_name_of(pod, settings.sample_claim_template)
        if entry is None:
            out.problems.append(
                f"pod {pod_name} uses no claim from template {settings.sample_claim_template}"
            )
            out.hints.append(
                "the pod spec needs resourceClaims[].resourceClaimTemplateName: "
                f"{settings.sample_claim_template}"
            )
            continue
        claim = claims.get(claim_name or "")
        if claim is None:
            out.problems.append(f"pod {pod_name}: no ResourceClaim generated for {entry!r} yet")
            out.hints.append(
                f"`kubectl -n {ns} get resourceclaimtemplate {settings.sample_claim_template}` and "
                f"`kubectl -n {ns} describe pod {pod_name}`"
            )
            continue
        _check_claim(out, claim, str(claim_name), pod, ns)
    _check_classic_claims(out, snap, settings, claims)
    return out.result(step, title)


def check_sample_pod(snap: Snapshot, settings: Settings) -> StepResult:
    step, title = "sample-pod", f"sample pod ({_sample_ref(settings)}) Running"
    if snap.classic_deployment is not None:
        title = f"sample pods ({_sample_ref(settings)}, {_classic_ref(settings)}) Running"
    missing = _sample_missing(snap, settings)
    if missing:
        return StepResult(step, title, Status.FAIL, *missing)
    classic, problems = _classic_pods(snap, settings)
    found = []
    for pod in _live(snap.sample_pods) + classic:
        problem = _pod_problem(pod)
        if problem:
            problems.append(f"pod {_name(pod)} is {problem}")
        else:
            found.append(f"{_name(pod)} on {lookup(pod, 'spec', 'nodeName')}")
    if problems:
        return StepResult(
            step,
            title,
            Status.FAIL,
            _join(problems),
            f"`kubectl -n {settings.workload_namespace} describe pod <pod>`: events show scheduling "
            "(claim allocation) and container start (CDI injection) errors",
        )
    return StepResult(step, title, Status.PASS, _join(found))


def check_sample_log(snap: Snapshot, settings: Settings) -> StepResult:
    step, title = "sample-log", "sample pod log lists a GPU (nvidia-smi -L)"
    missing = _sample_missing(snap, settings)
    if missing:
        return _skip(step, title, missing[0])
    pods = _live(snap.sample_pods) + _classic_pods(snap, settings)[0]
    running = [p for p in pods if _pod_problem(p) is None]
    if not running:
        return _skip(step, title, "no sample pod is Running")
    if settings.device_source == "simulated":
        return StepResult(
            step,
            title,
            Status.SKIP,
            "not checked: the driver simulates its GPUs (DEVICE_SOURCE=simulated), so no nvidia-smi runs",
            waived=True,
        )
    problems, found = [], []
    for pod in running:
        log = snap.pod_logs.get(_name(pod), "")
        match = GPU_LINE.search(log)
        if match:
            found.append(f"{_name(pod)}: {match.group(0).strip()}")
        else:
            first = next((line.strip() for line in log.splitlines() if line.strip()), "")
            problems.append(
                f"pod {_name(pod)}: no 'GPU <n>: <name> (UUID: GPU-…)' line"
                + (f" (log starts {first[:120]!r})" if first else " (log is empty)")
            )
    if problems:
        return StepResult(
            step,
            title,
            Status.FAIL,
            _join(problems),
            "the container sees no GPU: check the claim's devices and the kubelet plugin's logs on the "
            f"pod's node (`kubectl -n {settings.namespace} logs <plugin pod>`; CDI spec injection)",
        )
    return StepResult(step, title, Status.PASS, _join(found))


CHECKS: tuple[Callable[[Snapshot, Settings], StepResult], ...] = (
    check_api_resources,
    check_driver_pods,
    check_device_classes,
    check_resource_slices,
    check_device_health,
    check_device_taint_rules,
    check_no_device_plugin_capacity,
    check_sample_claim,
    check_sample_pod,
    check_sample_log,
)


#: Step ids, in checklist order.
STEP_IDS = (
    "api-resources",
    "driver-pods",
    "device-classes",
    "resource-slices",
    "device-health",
    "device-taint-rules",
    "no-device-plugin-capacity",
    "sample-claim",
    "sample-pod",
    "sample-log",
)


#: What a step skipped with --skip reports.
SKIPPED_ON_REQUEST = "skipped on request (--skip)"


def run_checks(snap: Snapshot, settings: Settings) -> list[StepResult]:
    results = []
    for check in CHECKS:
        result = check(snap, settings)
        if result.id in settings.skip:
            result = StepResult(result.id, result.title, Status.SKIP, SKIPPED_ON_REQUEST, waived=True)
        results.append(result)
    return results
