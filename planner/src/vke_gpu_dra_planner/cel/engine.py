"""The Rust CEL engine of `common-expression-language`, loaded without the rest of its package.

The package's `__init__` also imports its interactive shell (`cel.cli`: prompt_toolkit, rich), which
the planner never uses and which cost as much start-up as the whole planner's own modules. The engine
is the package's extension module `cel.cel`, the one the package re-exports: it is loaded from the
installed package alone and registered under its own name, so a later `import cel` reuses it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ENGINE = "cel.cel"


def load() -> ModuleType:
    """`cel.cel` (compile, Context, bind, ...); the whole `cel` package when it is already imported."""
    for name in ("cel", ENGINE):
        if name in sys.modules:
            return sys.modules[name]
    package = importlib.util.find_spec("cel")
    if package is None or not package.submodule_search_locations:
        raise ModuleNotFoundError(
            "no module named 'cel' (pip install common-expression-language)", name="cel"
        )
    for directory in package.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(directory) / f"cel{suffix}"
            if path.is_file():
                spec = importlib.util.spec_from_file_location(ENGINE, path)
                if spec is None or spec.loader is None:
                    break
                module = importlib.util.module_from_spec(spec)
                sys.modules[ENGINE] = module
                spec.loader.exec_module(module)
                return module
    # not installed (the usual ModuleNotFoundError), or an engine of another shape: the package as it comes
    return importlib.import_module("cel")
