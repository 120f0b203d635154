"""`vke-gpu-dra` command line: one subcommand per module (verify, demo, plan).

Each subcommand module exposes `register(subparsers)`, which adds its parser and sets
`func` (a callable taking the parsed namespace and returning the exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: Subcommand modules, each exposing `register(subparsers)`.
SUBCOMMANDS: tuple[str, ...] = ("verify", "demo", "plan")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vke-gpu-dra", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        importlib.import_module(f"vke_gpu_dra_ops.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
