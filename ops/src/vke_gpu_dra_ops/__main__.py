"""`vke-gpu-dra` command line: one subcommand per module (verify, demo, plan).

Each subcommand module exposes `register(subparsers)`, which adds its parser and sets
`func` (a callable taking the parsed namespace and returning the exit code).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from importlib import metadata

#: Subcommand modules, each exposing `register(subparsers)`.
SUBCOMMANDS: tuple[str, ...] = ("verify", "demo", "plan")
DISTRIBUTION = "vke-gpu-dra-ops"
#: The exit status when stdout is closed early (`... | head`): 128 + SIGPIPE, as a shell reports
#: kubectl or any other program that SIGPIPE ends.
EXIT_BROKEN_PIPE = 141

DESCRIPTION = "GPU dynamic resource allocation (DRA) on Volcengine Kubernetes Engine: operator tools."
EPILOG = """\
examples:
  vke-gpu-dra verify                         # the cluster of $KUBECONFIG or ~/.kube/config
  vke-gpu-dra verify --kubeconfig kc.yaml -o json
  vke-gpu-dra plan --stack-config Pulumi.dev.yaml --manifests my-workloads/
  vke-gpu-dra demo up --base-stack dev --ttl 4h
  vke-gpu-dra demo down demo-alice-202611301041-1a2b

Run `vke-gpu-dra <command> --help` for a command's flags. Exit codes: 0 success, 1 a check or
command failed, 2 usage, configuration or connection error, 141 output closed early (as by `| head`).
"""


def version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vke-gpu-dra",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"vke_gpu_dra_ops.{name}").register(sub)
    return parser


def quiet_libraries() -> None:
    """Library chatter never reaches the terminal: each command reports its own errors in one line.

    The kubernetes client logs loader problems on the root logger (`ERROR:root:` without a handler)
    and urllib3 warns about retries and unverified TLS (a kubeconfig's insecure-skip-tls-verify).
    """
    root = logging.getLogger()
    if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
        root.addHandler(logging.NullHandler())
    logging.getLogger("urllib3").setLevel(logging.CRITICAL)
    try:
        from urllib3.exceptions import InsecureRequestWarning  # noqa: PLC0415
    except ModuleNotFoundError:  # urllib3 comes with the Kubernetes client (the `cluster` extra)
        return
    warnings.simplefilter("ignore", InsecureRequestWarning)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            args = build_parser().parse_args(argv)
            quiet_libraries()
            return int(args.func(args))
        finally:
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
    except BrokenPipeError:
        return stdout_closed()


def stdout_closed() -> int:
    """The reader of stdout went away (`vke-gpu-dra plan --output json | head`): stop quietly, as kubectl.

    Python ignores SIGPIPE, so a write raises BrokenPipeError instead of ending the process; stdout
    is pointed at /dev/null so that the interpreter's final flush does not report it again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
