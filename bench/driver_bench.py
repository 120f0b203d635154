"""The kubelet-plugin benchmark's command line; its parts are the package `plugin_bench` beside it.

Run from the repository root: `python bench/driver_bench.py [--baseline REV] [--repeats N]
[--cycles N] [--overlap PxC] [--memory-cycles N]` (`--help` lists every option; driver/BENCHMARKS.md
says what each figure is). The bench starts this script again as its own helpers (`--floor-server`,
`--count-fsyncs`). Run as a script, its folder is first on the import path, where `plugin_bench` is; the
names below are the ones a caller that loads this file by path (with that folder on its path) may use.
"""

from __future__ import annotations

import sys
from pathlib import Path

from plugin_bench.cli import main, parse_args
from plugin_bench.figures import Figure, at_most, below, floor_times
from plugin_bench.fsyncs import parse_strace_summary
from plugin_bench.report import Summary, summarize, table
from plugin_bench.settings import TREE_PACKAGES, TREE_SOURCES
from plugin_bench.trees import PluginCommand, check_imports_from, tree_command

__all__ = [
    "TREE_PACKAGES",
    "TREE_SOURCES",
    "Figure",
    "PluginCommand",
    "Summary",
    "at_most",
    "below",
    "check_imports_from",
    "floor_times",
    "main",
    "parse_args",
    "parse_strace_summary",
    "summarize",
    "table",
    "tree_command",
]

if __name__ == "__main__":
    sys.exit(main(script=Path(__file__).resolve()))
