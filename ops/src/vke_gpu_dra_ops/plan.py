"""`vke-gpu-dra plan`: does every claim template fit the stack's GPU node pools? (no cloud access)

Reads a stack config file (program defaults from the Pulumi.yaml beside it), the stack's DeviceClasses,
ResourceClaimTemplates and workloads from manifests (or the program's sample workload), and prints per
template whether it fits, how many replicas fit at the pool's minimum and maximum size, and which devices
the first replica would get. Exit status: 0 everything fits, 1 something does not, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from .capacity.catalog import CatalogError
from .capacity.claims import ClaimTemplate, ManifestError
from .capacity.planner import FitResult, Planner, template_subject
from .capacity.policy import check_model
from .capacity.stack import StackModel, add_object, default_classes, pools_from_config, sample_objects


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
    parser.add_argument("--output", choices=("text", "json"), default="text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        model = load_model(args.stack_config, args.manifests)
    except (PlanInputError, ManifestError, CatalogError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = build_report(model)
    if args.output == "json":
        json.dump(report, out, indent=2)
        out.write("\n")
    else:
        out.write(render_text(report))
    return 0 if report["fits"] else 1


def _read_yaml(path: Path) -> list[Any]:
    try:
        return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    except OSError as exc:
        raise PlanInputError(f"{path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise PlanInputError(f"{path}: not valid YAML ({exc})") from None


def _defaults(stack_file: Path) -> dict[str, Any]:
    project = stack_file.parent / "Pulumi.yaml"
    if not project.is_file():
        return {}
    docs = _read_yaml(project)
    config = (docs[0] or {}).get("config") or {} if docs and isinstance(docs[0], Mapping) else {}
    return {k: v.get("default") if isinstance(v, Mapping) else v for k, v in config.items()}


def load_model(stack_file: Path, manifests: Sequence[Path] | None) -> StackModel:
    docs = _read_yaml(stack_file)
    if not docs or not isinstance(docs[0], Mapping) or not isinstance(docs[0].get("config", {}), Mapping):
        raise PlanInputError(f"{stack_file}: expected a Pulumi stack file with a 'config:' map")
    config = docs[0].get("config") or {}
    defaults = _defaults(stack_file)
    model = StackModel(classes=default_classes())
    model.pools = [pools_from_config(config, defaults)]
    objects: list[Mapping[str, Any]]
    if manifests is None:
        objects = list(sample_objects(config, defaults))
    else:
        objects = []
        for path in _manifest_files(manifests):
            objects.extend(d for d in _read_yaml(path) if isinstance(d, Mapping))
    for obj in objects:
        add_object(model, obj)
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


def _wanted(model: StackModel, template: ClaimTemplate) -> int | None:
    total, used = 0, False
    for workload in model.workloads:
        for ref in workload.claims:
            if model.template_for(workload, ref) is template:
                used = True
                if workload.replicas is None:
                    total += sum(max(p.max_nodes for p in variants) for variants in model.pools)
                else:
                    total += 1 if template.shared else workload.replicas
    return total if used else None


def build_report(model: StackModel) -> dict[str, Any]:
    planner = Planner(model.classes)
    templates = []
    for template in model.templates.values():
        wanted = _wanted(model, template)
        result = planner.fit(
            template_subject(template),
            [(template.name, template.spec)],
            model.pools,
            wanted if wanted is not None else 1,
        )
        templates.append(_template_report(template, wanted, result))
    violations = [v.message for v in check_model(model)]
    return {
        "pools": [
            {
                "name": p.name,
                "instanceType": p.instance_type,
                "product": p.product,
                "gpusPerNode": p.gpus_per_node,
                "minNodes": p.min_nodes,
                "maxNodes": p.max_nodes,
                "notes": list(p.notes),
            }
            for variants in model.pools
            for p in variants
        ],
        "templates": templates,
        "violations": violations,
        "fits": not violations and all(t["fits"] for t in templates),
        "selectorChecks": planner.cache.stats.checks,
    }


def _template_report(template: ClaimTemplate, wanted: int | None, result: FitResult) -> dict[str, Any]:
    first = next((p for p in result.pools if p.chosen), None)
    return {
        "name": template.name,
        "namespace": template.namespace,
        "kind": "ResourceClaim" if template.shared else "ResourceClaimTemplate",
        "replicasWanted": wanted,
        "fits": result.fits,
        "replicasAtMin": result.at_min,
        "replicasAtMax": result.at_max,
        "perNode": {p.pool.label: p.per_node for p in result.pools},
        "devices": [{"request": r, "device": d} for _, r, d in (first.chosen if first else ())],
        "reasons": result.reasons(),
        "error": result.error,
    }


def render_text(report: Mapping[str, Any]) -> str:
    lines = ["GPU node pools:"]
    for p in report["pools"]:
        lines.append(
            f"  {p['name']}: {p['instanceType']} = {p['gpusPerNode']}x {p['product']}, "
            f"{p['minNodes']}..{p['maxNodes']} nodes"
        )
        lines.extend(f"    note: {n}" for n in p["notes"])
    lines.append("Claim templates:")
    if not report["templates"]:
        lines.append("  (none)")
    for t in report["templates"]:
        status = "FITS" if t["fits"] else "DOES NOT FIT"
        wanted = "unused" if t["replicasWanted"] is None else f"{t['replicasWanted']} replica(s) wanted"
        lines.append(
            f"  {t['namespace']}/{t['name']}: {status} ({wanted}; fit at min size: "
            f"{t['replicasAtMin']}, at max size: {t['replicasAtMax']})"
        )
        if t["devices"]:
            lines.append(
                "    first replica gets: "
                + ", ".join(f"{d['request']} -> {d['device']}" for d in t["devices"])
            )
        lines.extend(f"    reason: {r}" for r in t["reasons"])
    if report["violations"]:
        lines.append("Violations:")
        lines.extend(f"  - {v}" for v in report["violations"])
    lines.append("Result: " + ("everything fits" if report["fits"] else "NOT everything fits"))
    return "\n".join(lines) + "\n"
