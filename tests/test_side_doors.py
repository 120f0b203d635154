"""No package finds another package's files by path arithmetic, and nothing outside tests edits sys.path.

Packages import each other as installed packages (the import contract, pyproject.toml) and read only
their own data; the program names repository files relative to the Pulumi project directory
(`components/project_files.py`). Tests may locate the repository: they run from its root.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Everything that is not a test: the packages, the program, the pack, the benchmarks and the tools.
SOURCES = (
    "__main__.py", "components", "core/src", "driver/src", "ops/src",
    "policy", "support/src", "bench", "tools",
)  # fmt: skip


def side_doors(source: str) -> list[str]:
    """Lines that climb directories from a module's own path, or change the import path."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute | ast.Subscript):
            continue
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            inner = node.value
            if isinstance(inner.value, ast.Name) and (inner.value.id, inner.attr) == ("sys", "path"):
                found.append(f"line {node.lineno}: sys.path.{node.attr}")
            climbs = (inner.attr, node.attr) == ("parent", "parent")
        else:
            climbs = (
                isinstance(node, ast.Subscript)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "parents"
            )
        if climbs and "__file__" in ast.unparse(node):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return sorted(set(found))


def sources() -> list[Path]:
    files: list[Path] = []
    for name in SOURCES:
        path = ROOT / name
        files.extend([path] if path.is_file() else path.rglob("*.py"))
    return sorted(p for p in files if "venv" not in p.relative_to(ROOT).parts[:2])


def test_no_source_climbs_to_another_package_or_edits_the_import_path() -> None:
    found = {}
    for path in sources():
        rel = path.relative_to(ROOT).as_posix()
        if doors := side_doors(path.read_text(encoding="utf-8")):
            found[rel] = doors
    assert len(sources()) > 100
    assert found == {}, found


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("ROOT = Path(__file__).resolve().parents[1]", ["line 1: Path(__file__).resolve().parents[1]"]),
        ("ROOT = Path(__file__).parent.parent / 'x'", ["line 1: Path(__file__).parent.parent"]),
        ("sys.path.insert(0, str(ROOT))", ["line 1: sys.path.insert"]),
        ("if p not in sys.path:\n    sys.path.append(p)", ["line 2: sys.path.append"]),
        ("DATA = Path(__file__).with_name('data.yaml')", []),
        ("HERE = Path(__file__).parent / 'data.yaml'", []),
        ("[sys.executable, __file__, '--serve']", []),
    ],
)
def test_what_counts_as_a_side_door(source: str, found: list[str]) -> None:
    assert side_doors(source) == found
