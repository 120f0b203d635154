"""The plugin's code: the current tree's console script, or another commit's tree in a git worktree run
with `python -m vke_gpu_dra`."""

from __future__ import annotations

import compileall
import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from .settings import CONSOLE_SCRIPT, GIT_S, HERE, TREE_PACKAGES, TREE_SOURCES, WAIT_S


@dataclass(frozen=True)
class PluginCommand:
    """How to start one version of the plugin: the command before its flags, and its environment."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] | None = None  # None: the bench's own
    sources: tuple[Path, ...] = ()  # the folders of its packages, compiled to bytecode before it runs

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`python ARGS` in this version's environment (for helpers that must import its code)."""
        return subprocess.run(
            [sys.executable, *args], env=self.env, capture_output=True, text=True, timeout=WAIT_S, check=False
        )


def current_command() -> PluginCommand:
    if not CONSOLE_SCRIPT.exists():
        raise SystemExit(f"{CONSOLE_SCRIPT} not found: install the driver (pip install -e ./driver)")
    sources = []
    for package in TREE_PACKAGES:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, package
        sources.append(Path(next(iter(spec.submodule_search_locations))))
    return PluginCommand("current", (str(CONSOLE_SCRIPT),), sources=tuple(sources))


def tree_command(name: str, tree: Path, environ: Mapping[str, str]) -> PluginCommand:
    """The plugin of the source tree `tree`: `python -m vke_gpu_dra` with the tree's source folders
    first on PYTHONPATH (before the editable installs of the current tree in site-packages)."""
    paths = [str(tree / source) for source in TREE_SOURCES]
    if environ.get("PYTHONPATH"):
        paths.append(environ["PYTHONPATH"])
    env = {**environ, "PYTHONPATH": os.pathsep.join(paths)}
    sources = tuple(tree / source for source in TREE_SOURCES)
    return PluginCommand(name, (sys.executable, "-m", "vke_gpu_dra"), env, sources)


def compile_sources(command: PluginCommand) -> None:
    """Bytecode for the plugin's own modules, as an installed copy has it (pip compiles at install; the
    image runs with PYTHONDONTWRITEBYTECODE=1, as this machine may): without it every start would compile
    them from source."""
    for folder in command.sources:
        if not compileall.compile_dir(str(folder), quiet=1):
            raise RuntimeError(f"{command.name}: cannot compile the modules in {folder}")


def check_imports_from(command: PluginCommand, tree: Path) -> None:
    """Fails unless a child started like `command` imports the plugin's packages from `tree`."""
    code = "import importlib\n" + "".join(
        f"print(importlib.import_module({package!r}).__file__)\n" for package in TREE_PACKAGES
    )
    proc = command.run("-c", code)
    files = proc.stdout.split()
    if proc.returncode != 0 or len(files) != len(TREE_PACKAGES):
        raise RuntimeError(f"{command.name}: cannot import {', '.join(TREE_PACKAGES)}:\n{proc.stderr}")
    outside = [f for f in files if not Path(f).resolve().is_relative_to(tree.resolve())]
    if outside:
        raise RuntimeError(f"{command.name}: imports {', '.join(outside)}, not the code in {tree}")


def git(*args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(HERE), *args], capture_output=True, text=True, timeout=GIT_S, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def resolve_commit(rev: str) -> str | None:
    """The commit id `rev` names in this repository, None when it names none."""
    try:
        return git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except (RuntimeError, OSError):
        return None


@contextlib.contextmanager
def worktree(commit: str) -> Iterator[Path]:
    """`commit` checked out (detached) in a temporary git worktree, removed afterwards."""
    parent = Path(tempfile.mkdtemp(prefix="drab-base-"))
    tree = parent / "tree"
    try:
        git("worktree", "add", "--detach", "--quiet", str(tree), commit)
        yield tree
    finally:
        with contextlib.suppress(RuntimeError):
            git("worktree", "remove", "--force", str(tree))
        shutil.rmtree(parent, ignore_errors=True)
        if f"worktree {tree}\n" in git("worktree", "list", "--porcelain") + "\n":
            git("worktree", "prune")  # its folder is gone: drop the worktree's record too
