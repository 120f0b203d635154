"""Reading Kubernetes objects as the API returns them (plain JSON maps)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def lookup(obj: Any, *path: str) -> Any:
    """The value at `path` in nested maps; None where a key is missing or a parent is not a map."""
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj
