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
    "__main__.py", "components", "core/src", "kube/src", "driver/src", "planner/src", "ops/src",
    "policy", "support/src", "bench", "tools",
)  # fmt: skip


#: How a path derived from `__file__` may be taken up a level (os.path and pathlib spellings).
_SAME_LEVEL_CALLS = frozenset(
    {"Path", "PurePath", "PosixPath", "str", "abspath", "realpath", "normpath", "fspath"}
)
_SAME_LEVEL_METHODS = frozenset({"resolve", "absolute", "expanduser"})
_PATH_EDITS = frozenset({"insert", "append", "extend", "remove", "pop", "clear", "__setitem__"})


class _SideDoors(ast.NodeVisitor):
    """Finds climbs above a module's own directory and edits of the import path.

    A path's depth counts the levels it has gone up from the module file: `__file__` is 0, its folder 1
    (where a module's own data sits), anything at 2 or more reaches another package's files. Names bound
    to such a path carry its depth, so a climb split over two statements is found too.
    """

    def __init__(self) -> None:
        self.found: set[str] = set()
        self.depths: dict[str, int] = {}
        self.path_aliases: set[str] = set()

    def _mark(self, node: ast.AST, before: int | None, after: int | None) -> int | None:
        if after is not None and after >= 2 and (before is None or before < 2):
            self.found.add(f"line {node.lineno}: {ast.unparse(node)}")  # type: ignore[attr-defined]
        return after

    def _depth(self, node: ast.AST) -> int | None:  # noqa: PLR0911, PLR0912 (one case per spelling)
        if isinstance(node, ast.Name):
            return 0 if node.id == "__file__" else self.depths.get(node.id)
        if isinstance(node, ast.Attribute):
            inner = self._depth(node.value)
            if inner is not None and node.attr == "parent":
                return self._mark(node, inner, inner + 1)
            return None
        if isinstance(node, ast.Subscript):
            if isinstance(node.value, ast.Attribute) and node.value.attr == "parents":
                inner = self._depth(node.value.value)
                index = node.slice.value if isinstance(node.slice, ast.Constant) else 1
                if inner is not None and isinstance(index, int):
                    return self._mark(node, inner, inner + index + 1)
            return None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            inner = self._depth(node.left)
            if inner is None:
                return None
            part = node.right.value if isinstance(node.right, ast.Constant) else ""
            ups = str(part).split("/").count("..") if isinstance(part, str) else 0
            return self._mark(node, inner, inner + ups)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _SAME_LEVEL_METHODS
        ):
            return self._depth(node.func.value)
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            inner = self._depth(node.args[0])
            if inner is None:
                return None
            if name in _SAME_LEVEL_CALLS:
                return inner
            if name == "dirname":
                return self._mark(node, inner, inner + 1)
            if name == "join":
                ups = sum(1 for a in node.args[1:] if isinstance(a, ast.Constant) and a.value == "..")
                return self._mark(node, inner, inner + ups)
        return None

    def _is_sys_path(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.path_aliases
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "path"
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
        )

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module == "sys" and any(a.name == "path" for a in node.names):
            self.path_aliases.update(a.asname or a.name for a in node.names if a.name == "path")
            self.found.add(f"line {node.lineno}: from sys import path")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._store(target, node.lineno)
        value_depth = self._depth(node.value)
        if value_depth is not None:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.depths[target.id] = value_depth
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._store(node.target, node.lineno)
        self.generic_visit(node)

    def _store(self, target: ast.AST, lineno: int) -> None:
        base = target.value if isinstance(target, ast.Subscript) else target
        if self._is_sys_path(base):
            self.found.add(f"line {lineno}: sys.path assignment")

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute):
            if func.attr in _PATH_EDITS and self._is_sys_path(func.value):
                shown = "sys.path" if isinstance(func.value, ast.Attribute) else func.value.id  # type: ignore[attr-defined]
                self.found.add(f"line {node.lineno}: {shown}.{func.attr}")
            if func.attr == "addsitedir":
                self.found.add(f"line {node.lineno}: site.addsitedir")
        self._depth(node)
        self.generic_visit(node)

    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Attribute | ast.Subscript | ast.BinOp):
            self._depth(node)
        super().generic_visit(node)


def side_doors(source: str) -> list[str]:
    """Lines that climb directories from a module's own path, or change the import path."""
    finder = _SideDoors()
    finder.visit(ast.parse(source))
    return sorted(finder.found)


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
        (
            "HERE = os.path.dirname(os.path.dirname(__file__))",
            ["line 1: os.path.dirname(os.path.dirname(__file__))"],
        ),
        ("UP = Path(__file__).parent / '..'", ["line 1: Path(__file__).parent / '..'"]),
        ("UP = Path(__file__).parent / '../x'", ["line 1: Path(__file__).parent / '../x'"]),
        ("HERE = Path(__file__).resolve().parent\nROOT = HERE.parent", ["line 2: HERE.parent"]),
        (
            "UP = os.path.join(os.path.dirname(__file__), '..', 'x')",
            ["line 1: os.path.join(os.path.dirname(__file__), '..', 'x')"],
        ),
        ("sys.path[:0] = [p]", ["line 1: sys.path assignment"]),
        ("sys.path += [p]", ["line 1: sys.path assignment"]),
        ("from sys import path\npath.insert(0, p)", ["line 1: from sys import path", "line 2: path.insert"]),
        ("site.addsitedir(p)", ["line 1: site.addsitedir"]),
        ("DATA = Path(__file__).with_name('data.yaml')", []),
        ("HERE = os.path.dirname(__file__)", []),
        ("if p in sys.path: pass", []),
        ("HERE = Path(__file__).parent / 'data.yaml'", []),
        ("[sys.executable, __file__, '--serve']", []),
    ],
)
def test_what_counts_as_a_side_door(source: str, found: list[str]) -> None:
    assert side_doors(source) == found
