"""Words for a YAML error: where it is and what is wrong, on one line (no file contents quoted)."""

from __future__ import annotations

import yaml


def describe(err: yaml.YAMLError) -> str:
    """` at line L, column C: <problem>` for an error with a position, else `: <problem>`."""
    if isinstance(err, yaml.MarkedYAMLError):
        mark = err.problem_mark or err.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return f"{at}: {err.problem or err.context or 'syntax error'}"
    first = str(err).splitlines()[0] if str(err) else type(err).__name__
    return f": {first}"
