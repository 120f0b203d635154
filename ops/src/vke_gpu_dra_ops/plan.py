"""`vke-gpu-dra plan`: does every claim template fit the stack's GPU node pools? (no cloud access)

Reads a stack config file through the program's own loader (defaults from the Pulumi.yaml beside it, as
the CLI passes them; a value the program refuses is bad input), the stack's DeviceClasses,
ResourceClaimTemplates, Namespaces and workloads from manifests (or the program's sample workload), and
prints per workload how many pods are wanted, placed by the default kube-scheduler and left pending (and
why), with the bounds other placements give; then per template what fits alone on an empty pool. Claims
the API server refuses for the chosen Kubernetes version are reported as refused (see
docs/capacity-planning.md). Exit status: 0 everything fits, 1 something does not or is undecided, 2 bad
input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TextIO

import yaml
from vke_gpu_dra_core import facts, yamlerrors
from vke_gpu_dra_core.catalog import CatalogError
from vke_gpu_dra_core.config import (
    ALL_KEYS,
    PROJECT,
    TARGET_EXISTING,
    PulumiYamlLoader,
    StackConfig,
    StackConfigError,
    project_defaults,
    raw_from_stack_file,
)
from vke_gpu_dra_core.config import read as read_config
from vke_gpu_dra_planner.admission import REFUSED, UNKNOWN, counters_dropped
from vke_gpu_dra_planner.claims import ManifestError
from vke_gpu_dra_planner.gates import GATES, VersionError, feature_gates, with_overrides
from vke_gpu_dra_planner.inventory import GpuPool
from vke_gpu_dra_planner.mig import pool_profiles
from vke_gpu_dra_planner.stack import (
    StackModel,
    add_object,
    consumable_shares,
    default_classes,
    dynamic_mig,
    pools_from_config,
    sample_objects,
)
from vke_gpu_dra_planner.verdict import StackPlan, TemplatePlan, WorkloadPlan, plan_model, plan_violations

from .cluster_pools import ClusterReadError, read_cluster
from .output import OUTPUT_FORMATS, render


class PlanInputError(ValueError):
    """Input the plan cannot read; the message names the file and what is wrong."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="check that every claim template fits the GPU node pools",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("--stack-config", required=True, type=Path, help="Pulumi.<stack>.yaml of the stack")
    parser.add_argument(
        "--manifests",
        nargs="+",
        type=Path,
        default=None,
        help="YAML files or directories with DeviceClasses, ResourceClaimTemplates and workloads "
        "(default: the program's sample workload)",
    )
    parser.add_argument("-o", "--output", choices=OUTPUT_FORMATS, default="text", help="report format")
    parser.add_argument(
        "--kubernetes-version",
        default=None,
        help=f"feature-gate defaults of this version ({', '.join(GATES)}; default: the stack's "
        "cluster.kubernetesVersion)",
    )
    parser.add_argument(
        "--kubernetes-feature-gates",
        default="",
        help="Kubernetes gates the cluster's operator set, Name=true|false,... (e.g. "
        "DRAPartitionableDevices=true on 1.34); default: the version's defaults",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        model = load_model(args.stack_config, args.manifests)
        version = getattr(args, "kubernetes_version", None)
        where = "--kubernetes-version"
        if version is None:
            version, where = model.kubernetes_version, f"config {PROJECT}:cluster.kubernetesVersion"
            if any(note.startswith(CLUSTER_NOTE) for note in model.notes):
                where = CLUSTER_VERSION
        gates = with_overrides(
            feature_gates(version, where), getattr(args, "kubernetes_feature_gates", "") or ""
        )
    except (PlanInputError, ManifestError, CatalogError, VersionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = build_report(plan_model(model, gates, templates_alone=True))
    if args.output != "text":
        out.write(render(args.output, report))
    else:
        out.write(render_text(report))
    return 0 if report["fits"] else 1


#: Manifests are plain YAML: libyaml's safe loader reads them when PyYAML has it (same documents, faster).
_MANIFEST_LOADER: Final[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read_yaml(path: Path, loader: Any = _MANIFEST_LOADER) -> list[Any]:
    try:
        return [d for d in yaml.load_all(path.read_text(encoding="utf-8"), Loader=loader) if d is not None]
    except OSError as exc:
        raise PlanInputError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise PlanInputError(f"{path}: not UTF-8 text (invalid byte at offset {exc.start})") from None
    except yaml.YAMLError as exc:
        raise PlanInputError(f"{path}: not valid YAML{yamlerrors.describe(exc)}") from None


#: Keys only a deployment needs (their rows say `deploy_only`): the plan reads none of them, so it does
#: not stop at a problem the program reports for one of them.
DEPLOYMENT_ONLY_KEYS: Final = frozenset(k.name for k in ALL_KEYS if k.deploy_only)


def _project_defaults(stack_file: Path) -> dict[str, Any]:
    """The defaults of the Pulumi.yaml beside the stack file, which the CLI passes to the program too."""
    project = stack_file.parent / "Pulumi.yaml"
    if not project.is_file():
        return {}
    docs = _read_yaml(project, PulumiYamlLoader)
    return project_defaults(docs[0]) if docs and isinstance(docs[0], Mapping) else {}


def load_stack_config(stack_file: Path) -> StackConfig:
    """The stack's config as the program loads it (its project defaults under the stack file's values).

    A problem the program reports is an input error naming the key, unless the key is deployment-only.
    """
    docs = _read_yaml(stack_file, PulumiYamlLoader)
    if not docs or not isinstance(docs[0], Mapping) or not isinstance(docs[0].get("config", {}), Mapping):
        raise PlanInputError(f"{stack_file}: expected a Pulumi stack file with a 'config:' map")
    values = {**_project_defaults(stack_file), **(docs[0].get("config") or {})}
    try:
        raw = raw_from_stack_file(values)
    except StackConfigError as exc:
        raise PlanInputError(f"{stack_file}: {exc}") from None
    cfg, issues = read_config(raw)
    blocking = [i for i in issues if i.key.strip("()") not in DEPLOYMENT_ONLY_KEYS]
    if blocking:
        raise PlanInputError(f"{stack_file}: {StackConfigError(blocking)}")
    return cfg


#: Where the Kubernetes version of a stack on an existing cluster comes from, and the note that says so.
CLUSTER_VERSION = "the cluster's /version"
CLUSTER_NOTE = "target=existing-cluster: the GPU nodes and Kubernetes"


def load_model(stack_file: Path, manifests: Sequence[Path] | None) -> StackModel:
    cfg = load_stack_config(stack_file)
    model = StackModel(classes=default_classes())
    model.consumable_shares = consumable_shares(cfg)
    model.dynamic_mig = dynamic_mig(cfg)
    if cfg.target == TARGET_EXISTING:
        # No node pool of its own: the GPU nodes and the version are the cluster's.
        try:
            cluster = read_cluster(
                cfg, consumable_shares=model.consumable_shares, dynamic_mig=model.dynamic_mig
            )
        except ClusterReadError as exc:
            raise PlanInputError(f"{stack_file}: {exc}") from None
        if not cluster.pools:
            raise PlanInputError(
                f"{stack_file}: no node of the cluster at {cluster.server} publishes {facts.DRIVER_NAME} "
                "devices (ResourceSlices): nothing to plan on; `vke-gpu-dra verify` says why"
            )
        model.pools = [[pool] for pool in cluster.pools]
        model.kubernetes_version = cluster.kubernetes_version
        model.notes.append(f"{CLUSTER_NOTE} {cluster.kubernetes_version} read from {cluster.server}")
    else:
        model.pools = [pools_from_config(cfg)]
        model.kubernetes_version = cfg.cluster.kubernetes_version
    objects: list[Mapping[str, Any]]
    if manifests is None:
        objects = list(sample_objects(cfg))
    else:
        objects = []
        for path in _manifest_files(manifests):
            objects.extend(d for d in _read_yaml(path) if isinstance(d, Mapping))
    for obj in objects:
        add_object(model, obj)
    if manifests is not None and not model.workloads and not model.templates:
        named = ", ".join(str(p) for p in manifests)
        raise PlanInputError(
            f"--manifests: no workload (Pod, Deployment, ...) or ResourceClaimTemplate in {named}: "
            "nothing to plan"
        )
    return model


def _manifest_files(paths: Sequence[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml")))
        elif path.is_file():
            files.append(path)
        else:
            raise PlanInputError(f"--manifests: {path} is neither a file nor a directory")
    return files


def build_report(plan: StackPlan) -> dict[str, Any]:
    """The plan's results as JSON-ready data: workloads first (the verdict), then templates alone."""
    model = plan.model
    templates = [_template_report(t) for t in plan.templates]
    violations = [v.message for v in plan_violations(plan)]
    workloads = [_workload_report(w) for w in plan.workloads]
    return {
        "kubernetesVersion": plan.gates.version,
        "featureGates": plan.gates.by_name(),
        "consumableShares": model.consumable_shares,
        "dynamicMIG": model.dynamic_mig,
        "pools": [
            {
                "name": p.name,
                "instanceType": p.instance_type,
                "product": p.product,
                "gpusPerNode": p.gpus_per_node,
                "minNodes": p.min_nodes,
                "maxNodes": p.max_nodes,
                "notes": [*p.notes, *_mig_notes(p, plan)],
                "migProfiles": pool_profiles(p, plan.gates),
                "migLeft": plan.mig_left.get(p.label, {}),
            }
            for variants in model.pools
            for p in variants
        ],
        "notes": list(model.notes),
        "workloads": workloads,
        "templates": templates,
        "violations": violations,
        "fits": plan.fits,
        "undecided": plan.undecided,
        "selectorChecks": plan.planner.cache.stats.checks,
    }


def _mig_notes(pool: GpuPool, plan: StackPlan) -> list[str]:
    """Why a pool's GPUs are or are not MIG partitions, and what the API server does to their counters."""
    if not pool.dynamic_mig:
        return []
    if not pool.partitionable:
        return [f"DynamicMIG: {pool.product} has no MIG profiles in the catalog; GPUs published whole"]
    dropped = counters_dropped(pool, plan.gates)
    return [f"DynamicMIG: {dropped}"] if dropped else []


def _workload_report(plan: WorkloadPlan) -> dict[str, Any]:
    w = plan.workload
    return {
        "kind": w.kind,
        "namespace": w.namespace,
        "name": w.name,
        "status": plan.status,
        "wanted": plan.wanted,
        "placed": plan.placed,
        "pending": plan.pending,
        "guaranteed": plan.guaranteed,
        "bestCase": plan.best,
        "perPool": plan.per_pool,
        "instanceTypeMix": plan.mix,
        "reasons": plan.reasons,
        "hints": plan.hints,
    }


def _template_report(plan: TemplatePlan) -> dict[str, Any]:
    template, wanted, result, admission = plan.template, plan.wanted, plan.alone, plan.admission
    first = next((p for p in result.pools if p.chosen), None)
    refused = admission.status == REFUSED
    return {
        "name": template.name,
        "namespace": template.namespace,
        "kind": "ResourceClaim" if template.shared else "ResourceClaimTemplate",
        "scope": ALONE,
        "admission": admission.status,
        "admissionMessage": admission.message or None,
        "admissionDropped": list(admission.dropped),
        "replicasWanted": wanted,
        "fitsAlone": result.fits and not refused,
        "replicasAtMin": 0 if refused else result.at_min,
        "replicasAtMax": 0 if refused else result.at_max,
        "perNode": {p.pool.label: p.per_node for p in result.pools},
        "devices": []
        if refused
        else [{"request": r, "device": d} for _, r, d in (first.chosen if first else ())],
        "reasons": [] if refused else result.reasons(),
        "error": None if refused else result.error,
    }


ALONE = "alone on an empty pool"
_STATUS = {
    "fits": "FITS",
    "pending": "PENDING",
    REFUSED: "REFUSED",
    UNKNOWN: "UNKNOWN",
    "missing": "MISSING",
}


def _workload_lines(report: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    lines.append("Workloads (pods placed as the default kube-scheduler places them, pools at maximum size):")
    if not report["workloads"]:
        lines.append("  (none)")
    for w in report["workloads"]:
        lines.append(
            f"  {w['kind']} {w['namespace']}/{w['name']}: {_STATUS[w['status']]} (wanted {w['wanted']}, "
            f"placed {w['placed']}, pending {w['pending']}; guaranteed {w['guaranteed']}, "
            f"best case {w['bestCase']})"
        )
        if w["perPool"] and w["placed"]:
            lines.append("    placed on: " + ", ".join(f"{k}: {v}" for k, v in w["perPool"].items()))
        if w["instanceTypeMix"]:
            lines.append(
                "    instance-type mix, placed with every node of: "
                + ", ".join(f"{k}: {v}" for k, v in w["instanceTypeMix"].items())
            )
        lines.extend(f"    why: {r}" for r in w["reasons"])
        lines.extend(f"    note: {h}" for h in w["hints"])
    return lines


def render_text(report: Mapping[str, Any]) -> str:
    gates = ", ".join(f"{k} {'on' if v else 'off'}" for k, v in report["featureGates"].items())
    lines = [f"Kubernetes {report['kubernetesVersion']} ({gates})"]
    lines.extend(f"note: {n}" for n in report.get("notes", []))
    lines.append("GPU node pools:")
    for p in report["pools"]:
        lines.append(
            f"  {p['name']}: {p['instanceType']} = {p['gpusPerNode']}x {p['product']}, "
            f"{p['minNodes']}..{p['maxNodes']} nodes"
        )
        lines.extend(f"    note: {n}" for n in p["notes"])
        if p["migProfiles"]:
            lines.append(
                "    MIG claims that fit an empty node (each profile alone): "
                + ", ".join(f"{k}: {v['perNode']}" for k, v in p["migProfiles"].items())
            )
        if p["migLeft"]:
            lines.append(
                "    MIG claims that still fit after the workloads, pool at maximum size: "
                + ", ".join(f"{k}: {v}" for k, v in p["migLeft"].items())
            )
    lines.extend(_workload_lines(report))
    lines.append(f"Claim templates, each {ALONE}:")
    if not report["templates"]:
        lines.append("  (none)")
    for t in report["templates"]:
        wanted = "unused" if t["replicasWanted"] is None else f"{t['replicasWanted']} replica(s) wanted"
        if t["admission"] == REFUSED:
            lines.append(f"  {t['namespace']}/{t['name']}: REFUSED by the API server ({wanted})")
            lines.append(f"    reason: {t['admissionMessage']}")
            continue
        status = "fits alone" if t["fitsAlone"] else "does not fit alone"
        lines.append(
            f"  {t['namespace']}/{t['name']}: {status} ({wanted}; {ALONE}: "
            f"{t['replicasAtMin']} at min size, {t['replicasAtMax']} at max size)"
        )
        if t["devices"]:
            lines.append(
                "    first replica gets: "
                + ", ".join(f"{d['request']} -> {d['device']}" for d in t["devices"])
            )
        if t["admission"] == UNKNOWN:
            lines.append(f"    admission unknown: {t['admissionMessage']}")
        lines.extend(f"    reason: {r}" for r in t["reasons"])
    if report["violations"]:
        lines.append("Violations:")
        lines.extend(f"  - {v}" for v in report["violations"])
    if report["fits"]:
        result = "everything fits"
    elif report["undecided"]:
        result = "UNDECIDED (admission depends on Namespaces outside the stack and the manifests)"
    else:
        result = "NOT everything fits"
    lines.append("Result: " + result)
    return "\n".join(lines) + "\n"
