"""`vke-gpu-dra verify`: the VKE DRA procedure's validation against a live cluster.

Checks (see `procedure.py`) are retried until they all pass or `--timeout` runs out, with progress on
stderr; the checklist goes to stdout as text or one JSON document. Exit codes: 0 all checks pass,
1 a check fails, 2 usage or connection error (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from vke_gpu_dra_core import facts

from vke_gpu_dra_ops import procedure
from vke_gpu_dra_ops.output import OUTPUT_FORMATS, render

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
DEFAULT_TIMEOUT = 300
DEFAULT_INTERVAL = 5.0


# argparse prefixes these messages with "argument --flag:", so they name the value and what is allowed.


def _non_negative_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"invalid value {value!r}: expected whole seconds, 0 or more")
    return number


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"invalid value {value!r}: expected a whole number, 1 or more")
    return number


def _interval(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0 <= number <= 600:
        raise argparse.ArgumentTypeError(f"invalid value {value!r}: expected seconds from 0 to 600")
    return number


def add_cluster_arguments(parser: argparse.ArgumentParser, *, from_stack: bool = False) -> None:
    """Flags shared by `verify` and `demo up`; with `from_stack` namespaces default to the stack's outputs."""
    default_ns, default_wns = (None, None) if from_stack else (facts.DRIVER_NAMESPACE, "default")
    origin = "the stack's output, else " if from_stack else ""
    parser.add_argument(
        "-n",
        "--namespace",
        default=default_ns,
        help=f"namespace of the DRA driver (default: {origin}{facts.DRIVER_NAMESPACE})",
    )
    parser.add_argument(
        "--workload-namespace",
        default=default_wns,
        help=f"namespace of the sample workload (default: {origin}default)",
    )
    parser.add_argument(
        "--expected-devices-per-node",
        type=_positive_int,
        default=None,
        metavar="N",
        help="devices each DRA node's ResourceSlice must list (default: at least 1)",
    )
    parser.add_argument(
        "--timeout",
        type=_non_negative_int,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="retry failing checks this long (default: %(default)s; 0 checks once)",
    )
    parser.add_argument(
        "--interval", type=_interval, default=DEFAULT_INTERVAL, metavar="SECONDS", help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--node-selector",
        default=None,
        metavar="SELECTOR",
        help="label selector of the GPU nodes to check (default: the nodes the driver's kubelet plugin "
        f"DaemonSet selects, else {procedure.DRA_NODE_SELECTOR}; '' for every node)",
    )
    parser.add_argument(
        "--skip",
        action="append",
        choices=procedure.STEP_IDS,
        default=[],
        metavar="STEP",
        help=f"do not check this step (repeatable): {', '.join(procedure.STEP_IDS)}",
    )
    parser.add_argument(
        "-o", "--output", choices=OUTPUT_FORMATS, default="text", help="checklist format (default: text)"
    )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "verify",
        help="check a cluster against the VKE DRA procedure",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument(
        "--kubeconfig",
        default=None,
        metavar="PATH",
        help="kubeconfig file of the cluster (default: $KUBECONFIG, else ~/.kube/config)",
    )
    parser.add_argument("--context", default=None, help="kubeconfig context (default: its current context)")
    add_cluster_arguments(parser)
    parser.set_defaults(func=main)


def settings_from(args: argparse.Namespace) -> procedure.Settings:
    return procedure.Settings(
        namespace=args.namespace,
        workload_namespace=args.workload_namespace,
        expected_devices_per_node=args.expected_devices_per_node,
        skip=frozenset(args.skip),
        node_selector=args.node_selector,
    )


@dataclass
class Clock:
    """Time source and sleep, replaceable in tests."""

    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


def wait_for_checks(
    fetch: Callable[[], procedure.Snapshot],
    settings: procedure.Settings,
    *,
    timeout: float,
    interval: float,
    progress: TextIO,
    clock: Clock | None = None,
) -> list[procedure.StepResult]:
    """Run the checks until all pass or `timeout` seconds have passed; the last results."""
    clock = clock or Clock()
    start = clock.now()
    while True:
        results = procedure.run_checks(fetch(), settings)
        pending = [r for r in results if not r.ok]
        elapsed = clock.now() - start
        if not pending or elapsed + interval > timeout:
            return results
        progress.write(
            f"[{elapsed:4.0f}s/{timeout:.0f}s] {len(results) - len(pending)}/{len(results)} checks pass; "
            f"waiting for {', '.join(r.id for r in pending)}\n"
        )
        progress.flush()
        clock.sleep(interval)


def render_text(results: Sequence[procedure.StepResult]) -> str:
    lines = []
    for r in results:
        lines.append(f"[{r.status.value.upper()}] {r.title}: {r.found}")
        if r.hint and not r.passed:
            lines.append(f"       fix: {r.hint}")
    passed = sum(r.passed for r in results)
    requested = sum(r.waived and r.found == procedure.SKIPPED_ON_REQUEST for r in results)
    not_applicable = sum(r.waived for r in results) - requested
    verdict = "PASS" if all(r.ok for r in results) else "FAIL"
    lines.append(
        f"{verdict}: {passed}/{len(results)} checks passed"
        + (f", {requested} skipped on request" if requested else "")
        + (f", {not_applicable} not applicable here" if not_applicable else "")
    )
    return "\n".join(lines) + "\n"


def render_json(results: Sequence[procedure.StepResult], context: dict[str, Any]) -> str:
    return json.dumps(result_document(results, context), indent=2) + "\n"


def result_document(results: Sequence[procedure.StepResult], context: dict[str, Any]) -> dict[str, Any]:
    passed = sum(r.passed for r in results)
    return {
        "result": "pass" if all(r.ok for r in results) else "fail",
        "passed": passed,
        "total": len(results),
        **context,
        "steps": [r.as_json() for r in results],
    }


def missing_cluster_client(exc: ModuleNotFoundError) -> str:
    """What to install when the Kubernetes client is not there (`pip install` without the extra)."""
    return (
        f"the Kubernetes client is not installed (no module {exc.name}): "
        "pip install 'vke-gpu-dra-ops[cluster]'"
    )


def run_verify(
    kubeconfig: str | None,
    context: str | None,
    settings: procedure.Settings,
    *,
    timeout: float,
    output: str = "text",
    interval: float = DEFAULT_INTERVAL,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    clock: Clock | None = None,
) -> int:
    """Connect, check, print; the exit code. `kubeconfig` None: what kubectl reads."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    meta = {
        "context": context,
        "namespace": settings.namespace,
        "workloadNamespace": settings.workload_namespace,
    }
    try:
        from vke_gpu_dra_ops import kube  # noqa: PLC0415 (the Kubernetes client is the `cluster` extra)
    except ModuleNotFoundError as exc:
        stderr.write(f"vke-gpu-dra verify: error: {missing_cluster_client(exc)}\n")
        return EXIT_USAGE
    kubeconfig = kubeconfig or kube.default_kubeconfig()
    try:
        api = kube.connect(kubeconfig, context)
        with api:
            fetcher = kube.Fetcher(api, settings)
            settings = fetcher.fit_settings_to_the_driver()
            fetcher.settings = settings
            meta["nodeSelector"] = settings.node_selector
            results = wait_for_checks(
                fetcher.snapshot, settings, timeout=timeout, interval=interval, progress=stderr, clock=clock
            )
    except kube.ClusterError as exc:
        stderr.write(f"vke-gpu-dra verify: error: {exc}\n")
        if output != "text":
            stdout.write(render(output, {"result": "error", "error": str(exc), **meta}))
        return EXIT_USAGE
    stdout.write(render(output, result_document(results, meta)) if output != "text" else render_text(results))
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAIL


def main(args: argparse.Namespace) -> int:
    return run_verify(
        args.kubeconfig,
        args.context,
        settings_from(args),
        timeout=args.timeout,
        output=args.output,
        interval=args.interval,
    )
