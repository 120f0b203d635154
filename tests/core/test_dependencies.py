"""core depends on the standard library and PyYAML only: every import in its sources, read with ast.

The import contract (pyproject.toml, `lint-imports`) keeps the project's other packages out of core;
this keeps third-party packages out, so the program's and the policy pack's environments can install
core without the driver's runtime dependencies.
"""

from __future__ import annotations

import ast
import importlib.metadata
import sys
from pathlib import Path

import pytest
import vke_gpu_dra_core

CORE_SRC = Path(vke_gpu_dra_core.__file__).parent
#: Top-level modules core may import beyond the standard library.
ALLOWED = frozenset({"vke_gpu_dra_core", "yaml"})


def top_level_imports(source: str) -> set[str]:
    """Top-level module names of the absolute imports in `source` (relative imports stay in the package)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def foreign(names: set[str]) -> set[str]:
    return {n for n in names if n not in ALLOWED and n not in sys.stdlib_module_names}


def test_core_imports_the_standard_library_and_yaml_only() -> None:
    sources = sorted(CORE_SRC.rglob("*.py"))
    assert len(sources) > 10, CORE_SRC
    found = {str(p.relative_to(CORE_SRC)): foreign(top_level_imports(p.read_text())) for p in sources}
    assert {path: names for path, names in found.items() if names} == {}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import grpc", {"grpc"}),
        ("import prometheus_client.core as p", {"prometheus_client"}),
        ("from pynvml import nvmlInit", {"pynvml"}),
        ("def f():\n    from vke_gpu_dra.config import Config", {"vke_gpu_dra"}),
        ("if TYPE_CHECKING:\n    import pulumi", {"pulumi"}),
        ("import yaml, re\nfrom . import facts\nfrom .model import Device", set()),
        ("from vke_gpu_dra_core.device_model import Device\nfrom __future__ import annotations", set()),
    ],
)
def test_the_walk_finds_every_kind_of_import(source: str, expected: set[str]) -> None:
    assert foreign(top_level_imports(source)) == expected


def test_core_declares_pyyaml_as_its_only_dependency() -> None:
    assert importlib.metadata.requires("vke-gpu-dra-core") == ["PyYAML<7,>=6"]
