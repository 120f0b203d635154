"""`vke-gpu-dra demo up|down|list|reap`: short-lived demo environments as Pulumi stacks.

Stacks live in a separate backend (default a local file backend, `file://~/.pulumi-demo`) with the
passphrase secrets provider (PULUMI_CONFIG_PASSPHRASE). `up` creates `demo-<user>-<time>-<rand>`
from a base stack's config, tags it with its expiry, runs `pulumi up` with the policy pack and then
`vke-gpu-dra verify` against the stack's kubeconfig output. Needs the Pulumi CLI.
"""

from __future__ import annotations

import argparse
import functools
import getpass
import os
import secrets
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from vke_gpu_dra_core import facts

from vke_gpu_dra_ops import demo_stacks, procedure, verify
from vke_gpu_dra_ops.output import OUTPUT_FORMATS, render
from vke_gpu_dra_ops.pulumi_workspace import (
    PASSPHRASE_VARS,
    AutomationWorkspace,
    OpenWorkspace,
    PulumiError,
    PulumiUnavailable,
    WorkspaceOptions,
    backend_url,
    find_pulumi_cli,
    missing_cli_message,
)

DEFAULT_BACKEND = "file://~/.pulumi-demo"
BACKEND_ENV = "VKE_GPU_DRA_DEMO_BACKEND_URL"
DEFAULT_BASE_STACK = "dev"
DEFAULT_TTL = "4h"
DEFAULT_KUBECONFIG_OUTPUT = "kubeconfig"
PROG = "vke-gpu-dra demo"


def _ttl(value: str) -> Any:
    try:
        return demo_stacks.parse_ttl(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--backend-url",
        default=os.environ.get(BACKEND_ENV, DEFAULT_BACKEND),
        help=f"Pulumi backend of demo stacks (default: ${BACKEND_ENV} or {DEFAULT_BACKEND})",
    )
    common.add_argument(
        "--project-dir", default=".", type=Path, help="directory of Pulumi.yaml (default: current directory)"
    )
    return common


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo", help="short-lived demo environments (Pulumi stacks)", description=__doc__
    )
    sub = parser.add_subparsers(dest="demo_command", required=True)
    common = _common()

    up = sub.add_parser("up", parents=[common], help="create a demo stack, bring it up and verify it")
    up.add_argument(
        "--base-stack",
        default=DEFAULT_BASE_STACK,
        help="stack whose config to start from (default: %(default)s)",
    )
    up.add_argument(
        "--ttl", type=_ttl, default=DEFAULT_TTL, help=f"{demo_stacks.TTL_FORMS} (default: %(default)s)"
    )
    up.add_argument("--user", default=None, help="owner in the stack name (default: the login name)")
    up.add_argument(
        "--kubeconfig-output",
        default=DEFAULT_KUBECONFIG_OUTPUT,
        help="stack output holding the cluster's kubeconfig (default: %(default)s)",
    )
    up.add_argument(
        "--kubeconfig",
        default=None,
        metavar="PATH",
        help="verify this cluster instead of the stack's kubeconfig output (default for stacks "
        "configured with kubeconfigPath: that path)",
    )
    up.add_argument("--skip-verify", action="store_true", help="do not run verify after pulumi up")
    verify.add_cluster_arguments(up, from_stack=True)
    up.set_defaults(func=main, needs_passphrase=True)

    down = sub.add_parser("down", parents=[common], help="destroy and remove a demo stack")
    down.add_argument("name", help="demo stack name (see demo list)")
    down.add_argument(
        "-y", "--yes", action="store_true", help="do not ask for confirmation (needed without a terminal)"
    )
    down.set_defaults(func=main, needs_passphrase=True)

    listing = sub.add_parser("list", parents=[common], help="list demo stacks with their expiry")
    listing.add_argument("-o", "--output", choices=OUTPUT_FORMATS, default="text", help="list format")
    listing.set_defaults(func=main, needs_passphrase=False)

    reap = sub.add_parser("reap", parents=[common], help="destroy and remove expired demo stacks")
    reap.add_argument("--dry-run", action="store_true", help="only list what would be destroyed")
    reap.set_defaults(func=main, needs_passphrase=True)


def _login_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "user"


def _preflight(args: argparse.Namespace, find_cli: Callable[[], str | None]) -> tuple[Path, str | None]:
    """Project dir and Pulumi install root; raises DemoError/PulumiUnavailable with one line.

    The command line is checked first (a wrong --project-dir is named even without a Pulumi CLI)."""
    project_dir = args.project_dir.expanduser().resolve()
    if not (project_dir / "Pulumi.yaml").is_file():
        raise demo_stacks.DemoError(
            f"--project-dir {args.project_dir}: no Pulumi.yaml there "
            "(run from the repository root or pass the project's directory)"
        )
    root = find_cli()
    if root is None:
        raise PulumiUnavailable(missing_cli_message())
    if args.needs_passphrase and not any(os.environ.get(v) for v in PASSPHRASE_VARS):
        raise demo_stacks.DemoError(
            "PULUMI_CONFIG_PASSPHRASE is not set: demo stacks use the passphrase secrets provider; "
            "export PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE) "
            "with the base stack's passphrase"
        )
    return project_dir, root or None


def confirm_on(stdin: TextIO, err: TextIO) -> Callable[[str], bool]:
    """Ask on the terminal before destroying; without one, refuse (DemoError) and name --yes."""

    def confirm(name: str) -> bool:
        if not stdin.isatty():
            raise demo_stacks.DemoError(
                f"not destroying {name} without confirmation: stdin is not a terminal; pass --yes"
            )
        err.write(f"Destroy demo stack {name} and all its resources? Type the stack name to confirm: ")
        err.flush()
        return stdin.readline().strip() == name

    return confirm


def run(
    args: argparse.Namespace,
    *,
    open_workspace: OpenWorkspace = AutomationWorkspace,
    find_cli: Callable[[], str | None] = find_pulumi_cli,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stdin: TextIO | None = None,
    demo_kwargs: dict[str, Any] | None = None,
) -> int:
    out, err = stdout or sys.stdout, stderr or sys.stderr
    command = args.demo_command
    try:
        project_dir, root = _preflight(args, find_cli)
        workspace = open_workspace(WorkspaceOptions(project_dir, backend_url(args.backend_url), root))
        json_output = command == "up" and args.output != "text"
        demo = demo_stacks.Demo(
            workspace, project_dir, out, err, json_output=json_output, **(demo_kwargs or {})
        )
        if command == "up":
            return demo.up(
                base_stack=args.base_stack,
                ttl=args.ttl,
                user=args.user or _login_name(),
                suffix=secrets.token_hex(2),
                kubeconfig_output=args.kubeconfig_output,
                verify=None if args.skip_verify else functools.partial(_verify, args, out, err),
                kubeconfig_path=args.kubeconfig,
            )
        if command == "down":
            return demo.down(args.name, None if args.yes else confirm_on(stdin or sys.stdin, err))
        if command == "list":
            demos, now = demo.demos(), demo.now()
            if args.output != "text":
                out.write(render(args.output, [d.as_json(now) for d in demos]))
            else:
                out.write(demo_stacks.render_list(demos, now))
            return 0
        return demo.reap(dry_run=args.dry_run)
    except (PulumiUnavailable, demo_stacks.DemoError) as exc:
        err.write(f"{PROG} {command}: {exc}\n")
        return 2
    except PulumiError as exc:
        err.write(f"{PROG} {command}: pulumi failed: {exc}\n")
        return 1


def settings_from_stack(args: argparse.Namespace, values: Mapping[str, Any]) -> procedure.Settings:
    """Verify settings: flags first, then the stack's outputs (driverNamespace, sample), then defaults."""
    raw_sample = values.get("sample")
    sample: Mapping[str, Any] = raw_sample if isinstance(raw_sample, Mapping) else {}
    return procedure.Settings(
        namespace=args.namespace or values.get("driverNamespace") or facts.DRIVER_NAMESPACE,
        workload_namespace=args.workload_namespace or sample.get("namespace") or "default",
        expected_devices_per_node=args.expected_devices_per_node,
        sample_deployment=sample.get("deployment") or procedure.SAMPLE_DEPLOYMENT,
        sample_claim_template=sample.get("resourceClaimTemplate") or procedure.SAMPLE_CLAIM_TEMPLATE,
        skip=frozenset(args.skip),
        node_selector=args.node_selector,
    )


def _verify(
    args: argparse.Namespace, out: TextIO, err: TextIO, kubeconfig: str, values: Mapping[str, Any]
) -> int:
    return verify.run_verify(
        kubeconfig,
        None,
        settings_from_stack(args, values),
        timeout=args.timeout,
        output=args.output,
        interval=args.interval,
        stdout=out,
        stderr=err,
    )


def main(args: argparse.Namespace) -> int:
    return run(args)
