"""The command line: options checked before anything starts, one control plane per release, the tables."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tests.integration.controlplane import missing_assets
from tests.node.kube import RELEASES, NodePlane
from tests.node.node import missing
from tools import toolchain

from .report import as_json, table
from .runs import PLACEHOLDERS, PluginSpec, Run, measure


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.pod_startup",
        description="Pod start-up on the real node: create -> Running with a GPU claim and without one.",
    )
    parser.add_argument(
        "--kubelet", action="append", choices=sorted(RELEASES), help="a release (default: all)"
    )
    parser.add_argument("--pods", type=int, default=30, help="pods of each kind, one after another (30)")
    parser.add_argument("--burst", type=int, default=16, help="pods of each kind created at once (16)")
    parser.add_argument("--gpus", type=int, default=16, help="the node's simulated GPUs (16; >= --burst)")
    parser.add_argument("--plugin", type=Path, help="another plugin binary, run side by side with ours")
    parser.add_argument(
        "--plugin-args", default="",
        help=f"its arguments, a shell-quoted template of {{{'}, {'.join(PLACEHOLDERS)}}}",
    )  # fmt: skip
    parser.add_argument("--plugin-env", action="append", default=[], help="KEY=VALUE for it (a template)")
    parser.add_argument("--plugin-name", help="its column's title (default: the binary's name)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--logs", type=Path, help="keep each node's logs in a folder of this one")
    args = parser.parse_args(argv)
    for option in ("pods", "burst", "gpus"):
        if getattr(args, option) < 1:
            parser.error(f"--{option} {getattr(args, option)}: must be at least 1")
    if args.gpus < args.burst:
        parser.error(f"--gpus {args.gpus}: must be at least --burst ({args.burst}), one GPU per pod")
    args.plugins = [PluginSpec("ours (vke_gpu_dra)")]
    if args.plugin is None:
        if args.plugin_args or args.plugin_env or args.plugin_name:
            parser.error("--plugin-args, --plugin-env and --plugin-name need --plugin")
        return args
    if not (args.plugin.is_file() and os.access(args.plugin, os.X_OK)):
        parser.error(f"--plugin {args.plugin}: not an executable file")
    env = []
    for item in args.plugin_env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--plugin-env {item!r}: must be KEY=VALUE")
        env.append((key, value))
    template = tuple(shlex.split(args.plugin_args))
    dummy = dict.fromkeys(PLACEHOLDERS, "x")
    allowed = f"allowed: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
    for part in (*template, *(v for _, v in env)):
        try:
            part.format_map(dummy)
        except KeyError as exc:
            parser.error(
                f"--plugin-args/--plugin-env {part!r}: unknown placeholder {{{exc.args[0]}}}; {allowed}"
            )
        except (ValueError, IndexError) as exc:
            parser.error(f"--plugin-args/--plugin-env {part!r}: {exc} (a brace itself is doubled); {allowed}")
    name = args.plugin_name or args.plugin.name
    args.plugins.append(PluginSpec(name, (str(args.plugin.resolve()), *template), tuple(env)))
    return args


def unavailable(releases: Sequence[str]) -> str | None:
    """Why the bench cannot run here, or None."""
    reason = missing()
    if reason:
        return reason
    for minor in releases:
        name = toolchain.KUBERNETES[minor]
        folder = toolchain.locate(name)
        reason = missing_assets(minor, toolchain.kube_assets(minor))
        if reason or folder is None or not (folder / "kubelet").exists():
            return f"{reason or f'no kubelet {minor}'}: scripts/toolchain --only etcd,{name}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    releases = args.kubelet or sorted(RELEASES)
    reason = unavailable(releases)
    if reason:
        print(f"pod_startup: {reason}", file=sys.stderr)
        return 1
    print(f"pod start-up on the real node: {args.pods} pods of each kind one by one, {args.burst} at once; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    results: dict[str, dict[str, Any]] = {}
    for n, minor in enumerate(releases):
        runs: dict[str, Run] = {}
        with ExitStack() as stack:
            assets = toolchain.kube_assets(minor)
            assert assets is not None  # unavailable() said so
            plane = NodePlane(assets, minor)
            plane.start()
            stack.callback(plane.stop)
            # the plugins take turns going first, release by release
            for plugin in args.plugins if n % 2 == 0 else args.plugins[::-1]:
                began = time.monotonic()
                runs[plugin.name] = measure(plane, plugin, args)
                took = time.monotonic() - began
                print(
                    f"  kubelet {RELEASES[minor]}, {plugin.name}: {took:.0f} s, nothing left behind",
                    flush=True,
                )
        runs = {plugin.name: runs[plugin.name] for plugin in args.plugins}
        print("\n" + table(RELEASES[minor], runs, args) + "\n", flush=True)
        results[RELEASES[minor]] = {name: as_json(run) for name, run in runs.items()}
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0
