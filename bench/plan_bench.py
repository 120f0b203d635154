"""`vke-gpu-dra plan` benchmark: the whole command, this tree's and a previous revision's, side by side.

The job: one GPU node pool of `--nodes` nodes (default 1,000) of an 8-GPU instance type (H20), and
`--templates` ResourceClaimTemplates (default 100, the 20 shapes of capacity_bench.py in turn: counts,
selectors, All, firstAvailable, matchAttribute, distinctAttribute), each used by a 3-replica Deployment
(300 pods). It is written as a stack file and a manifests file into a temporary directory.

Every run is a fresh `python -m vke_gpu_dra_ops plan` process (imports included), timed from start to
exit (wall time, and the CPU time the process used, which other load on the machine disturbs less);
the two trees take turns, `--runs` times each, after one untimed run each that writes bytecode caches.
The previous revision (`--ref`, default the last commit before the planner became a package of its
own) is taken out of git into a temporary directory with `git archive` and run with PYTHONPATH at the
package sources it has (core/src and ops/src, and kube/src and planner/src once they exist). Both must
give the same report (`-o json`, less the selector-cache lookups, a counter of the work done, and less
the fields the previous revision's report does not have yet).

Then the capacity policy's share of a preview: in a fresh process of the pack's environment
(policy/venv when it is there, else this interpreter), the time to import the pack's capacity check and
the time of that check on the job's resources as the engine registers them.

Run: `python bench/plan_bench.py [--nodes N] [--templates N] [--runs N] [--ref REF]`.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml
from capacity_bench import template_documents
from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt

#: The last commit with the planner inside the operator tools (ops/src/vke_gpu_dra_ops/capacity/).
PREVIOUS_REF: Final = "7fb9d7b"
INSTANCE_TYPE: Final = "ecs.hpcpni3ln.45xlarge"  # 8x NVIDIA H20
REPLICAS: Final = 3
PROJECT: Final = "vke-gpu-dra"


def stack_config(nodes: int) -> dict[str, Any]:
    key = f"{PROJECT}:"
    return {
        "config": {
            f"{key}cluster.kubernetesVersion": "1.34",
            f"{key}nodePool.name": "gpu",
            f"{key}nodePool.instanceTypes": [INSTANCE_TYPE],
            f"{key}nodePool.minReplicas": 0,
            f"{key}nodePool.maxReplicas": nodes,
            f"{key}nodePool.desiredReplicas": 0,
            f"{key}sample.enabled": False,
        }
    }


def manifests(templates: int) -> list[dict[str, Any]]:
    """`templates` ResourceClaimTemplates in namespace default, one 3-replica Deployment each."""
    shapes = template_documents()
    docs: list[dict[str, Any]] = []
    for i in range(templates):
        name = f"t{i:03d}"
        template = json.loads(json.dumps(shapes[i % len(shapes)]))
        template["metadata"] = {"name": name, "namespace": "default"}
        docs.append(template)
        docs.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": f"app{i:03d}", "namespace": "default"},
                "spec": {
                    "replicas": REPLICAS,
                    "template": {
                        "spec": {
                            "containers": [{"name": "c", "image": "busybox"}],
                            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": name}],
                        }
                    },
                },
            }
        )
    return docs


def write_job(directory: Path, nodes: int, templates: int) -> tuple[Path, Path]:
    """The stack file and the manifests file of the job, written into `directory`."""
    stack = directory / "Pulumi.bench.yaml"
    stack.write_text(yaml.safe_dump(stack_config(nodes)), encoding="utf-8")
    objects = directory / "workloads.yaml"
    objects.write_text(yaml.safe_dump_all(manifests(templates)), encoding="utf-8")
    return stack, objects


@functools.cache
def repository() -> Path:
    """The work tree this benchmark belongs to, as git names it."""
    here = Path(__file__).resolve().parent
    top = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], cwd=here, capture_output=True, text=True, check=True
    )
    return Path(top.stdout.strip())


#: The packages a revision's `plan` runs from (those that exist at that revision).
SOURCES: Final = ("core/src", "kube/src", "planner/src", "ops/src")


def sources_at(ref: str) -> list[str]:
    """The entries of SOURCES that `ref` has (the planner and kube packages came later)."""
    listed = subprocess.run(
        ["git", "ls-tree", "--name-only", ref, "--", *SOURCES],
        cwd=repository(),
        capture_output=True,
        text=True,
        check=True,
    )
    present = set(listed.stdout.split())
    return [p for p in SOURCES if p in present]


def materialise(ref: str, directory: Path) -> Path:
    """The packages and the pack of `ref`, out of git into `directory` (no work tree is touched)."""
    archive = directory / "previous.tar"
    with archive.open("wb") as out:
        paths = [*sources_at(ref), "policy/vke_dra_policies"]
        subprocess.run(["git", "archive", ref, *paths], cwd=repository(), stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(directory / "previous", filter="data")
    return directory / "previous"


def _env(pythonpath: Sequence[Path]) -> dict[str, str]:
    # bytecode caches are written (an installed copy has them): the untimed first run writes them
    dropped = ("PYTHONPATH", "PYTHONPROFILEIMPORTTIME", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    return env


@dataclass(frozen=True)
class Run:
    """One whole `plan` process: wall and CPU seconds (user + system), its output and exit status."""

    seconds: float
    cpu_seconds: float
    stdout: str
    status: int


def run_plan(pythonpath: Sequence[Path], stack: Path, objects: Path, output: str) -> Run:
    command = [sys.executable, "-m", "vke_gpu_dra_ops", "plan", "--stack-config", str(stack)]
    command += ["--manifests", str(objects), "-o", output]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(command, env=_env(pythonpath), capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"plan exited {proc.returncode}: {proc.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(seconds, cpu, proc.stdout, proc.returncode)


def verdict(report_json: str) -> dict[str, Any]:
    """The report less `selectorChecks` (how much work was done, not what was found)."""
    report = json.loads(report_json)
    report.pop("selectorChecks", None)
    return dict(report)


def _known(value: Any, older: Any) -> Any:
    """`value` less the object fields `older` (the same report of a previous revision) does not have."""
    if isinstance(value, dict) and isinstance(older, dict):
        return {k: _known(v, older[k]) for k, v in value.items() if k in older}
    if isinstance(value, list) and isinstance(older, list) and len(value) == len(older):
        return [_known(v, o) for v, o in zip(value, older, strict=True)]
    return value


def compare(
    trees: dict[str, Sequence[Path]], stack: Path, objects: Path, runs: int
) -> dict[str, dict[str, Any]]:
    """Each tree's report and wall times, `runs` whole processes each, taking turns."""
    figures: dict[str, dict[str, Any]] = {}
    for name, path in trees.items():
        # the first run also writes the tree's bytecode caches, as any installed copy has them
        first = run_plan(path, stack, objects, "json")
        figures[name] = {"verdict": verdict(first.stdout), "status": first.status, "seconds": [], "cpu": []}
    for _ in range(runs):
        for name, path in trees.items():
            run = run_plan(path, stack, objects, "text")
            figures[name]["seconds"].append(run.seconds)
            figures[name]["cpu"].append(run.cpu_seconds)
    return figures


_POLICY_PROBE = """
import json, sys, time
from types import SimpleNamespace
started = time.perf_counter()
from vke_dra_policies.checks.capacity import check_stack
imported = time.perf_counter() - started
job = json.loads(sys.stdin.read())
resources = [SimpleNamespace(**r) for r in job]
started, cpu = time.perf_counter(), time.process_time()
violations = check_stack(resources, kubernetes_version="1.34")
checked, checked_cpu = time.perf_counter() - started, time.process_time() - cpu
print(json.dumps({
    "import": imported, "check": checked, "check_cpu": checked_cpu, "violations": len(violations),
}))
"""


def registered_resources(nodes: int, templates: int) -> list[dict[str, Any]]:
    """The job as the engine registers it: a node pool, the templates and the Deployments (inputs)."""
    pool = {
        "resource_type": pt.NODE_POOL,
        "name": "gpu",
        "urn": f"urn:pulumi:bench::{PROJECT}::{pt.NODE_POOL}::gpu",
        "props": {
            "name": "gpu",
            "nodeConfig": {"instanceTypeIds": [INSTANCE_TYPE]},
            "kubernetesConfig": {
                "labels": [{"key": k, "value": v} for k, v in facts.REQUIRED_NODE_LABELS.items()],
                "cordon": False,
            },
            "autoScaling": {"enabled": True, "minReplicas": 0.0, "maxReplicas": float(nodes)},
        },
    }
    types = {"ResourceClaimTemplate": pt.RESOURCE_CLAIM_TEMPLATE, "Deployment": pt.DEPLOYMENT}
    out = [pool]
    for doc in manifests(templates):
        type_, name = types[doc["kind"]], doc["metadata"]["name"]
        urn = f"urn:pulumi:bench::{PROJECT}::{type_}::{name}"
        out.append({"resource_type": type_, "name": name, "urn": urn, "props": doc})
    return out


def measure_policy(
    nodes: int, templates: int, policy: Path | None = None, pythonpath: Sequence[Path] = ()
) -> dict[str, Any]:
    """Import and check time of the pack's capacity check, in a fresh process of the pack's environment.

    `policy`: the pack's directory (default this tree's; a previous revision's with `pythonpath` at its
    core and ops).
    """
    pack_python = repository() / "policy" / "venv" / "bin" / "python"
    python = str(pack_python) if pack_python.is_file() else sys.executable
    proc = subprocess.run(
        [python, "-c", _POLICY_PROBE],
        cwd=policy or repository() / "policy",
        env=_env(pythonpath),
        input=json.dumps(registered_resources(nodes, templates)),
        capture_output=True,
        text=True,
        check=True,
    )
    figures: dict[str, Any] = json.loads(proc.stdout)
    return figures


def _summary(seconds: Sequence[float]) -> str:
    return f"median {statistics.median(seconds):.2f} s, best {min(seconds):.2f} s, worst {max(seconds):.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--templates", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ref", default=PREVIOUS_REF, help="the previous revision (default: %(default)s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="plan-bench-") as tmp:
        directory = Path(tmp)
        stack, objects = write_job(directory, args.nodes, args.templates)
        previous = materialise(args.ref, directory)
        previous_path = [previous / path for path in sources_at(args.ref)]
        trees: dict[str, Sequence[Path]] = {"this tree": [], args.ref: previous_path}
        figures = compare(trees, stack, objects, args.runs)
        policies = {
            "this tree": measure_policy(args.nodes, args.templates),
            args.ref: measure_policy(args.nodes, args.templates, previous / "policy", previous_path),
        }
    print(
        f"job: 1 pool of {args.nodes:,} nodes x 8 GPUs ({INSTANCE_TYPE}), {args.templates} claim "
        f"templates, {args.templates * REPLICAS} pods; {args.runs} whole `vke-gpu-dra plan` processes each"
    )
    for name, f in figures.items():
        print(
            f"  {name:<12} wall {_summary(f['seconds'])}; "
            f"CPU median {statistics.median(f['cpu']):.2f} s (exit {f['status']})"
        )
    now, before = (figures[name] for name in trees)
    same = (
        _known(now["verdict"], before["verdict"]) == before["verdict"] and now["status"] == before["status"]
    )
    print(
        f"  speed-up: {statistics.median(before['seconds']) / statistics.median(now['seconds']):.1f}x; "
        f"reports {'identical' if same else 'DIFFER'}"
    )
    print("capacity policy of a preview (the pack's check on the job's resources, its environment):")
    for name, policy in policies.items():
        print(
            f"  {name:<12} import {policy['import']:.2f} s, check {policy['check']:.2f} s "
            f"(CPU {policy['check_cpu']:.2f} s; {policy['violations']} violations)"
        )


if __name__ == "__main__":
    main()
