"""Machine-readable output of the `vke-gpu-dra` commands: `-o json` or `-o yaml`, the same keys."""

from __future__ import annotations

import json
from typing import Any, Final

import yaml

#: The formats of every command's `-o/--output` (text is each command's own rendering).
OUTPUT_FORMATS: Final = ("text", "json", "yaml")


def render(output: str, doc: Any) -> str:
    """A machine-readable document as JSON or YAML (the same keys)."""
    if output == "yaml":
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1000)
    return json.dumps(doc, indent=2) + "\n"
