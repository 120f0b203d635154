"""The GPU instance type catalog (data in gpu_instance_types.yaml, extendable by policy config)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

CATALOG_FILE = "gpu_instance_types.yaml"


@dataclass(frozen=True)
class CatalogEntry:
    """One row: an exact instance type id, or a family matching every size of it."""

    pattern: str
    is_family: bool
    gpu: str
    source: str

    def matches(self, instance_type: str) -> bool:
        if self.is_family:
            return instance_type.startswith(self.pattern + ".")
        return instance_type == self.pattern


def parse_catalog(rows: Any) -> tuple[CatalogEntry, ...]:
    if not isinstance(rows, list):
        raise ValueError(f"{CATALOG_FILE} must be a list of rows, got {type(rows).__name__}")
    entries = []
    for row in rows:
        if not isinstance(row, dict) or ("family" in row) == ("id" in row):
            raise ValueError(f"{CATALOG_FILE} row {row!r} needs exactly one of 'family' or 'id'")
        if not row.get("source"):
            raise ValueError(f"{CATALOG_FILE} row {row!r} needs a 'source'")
        is_family = "family" in row
        entries.append(
            CatalogEntry(
                str(row["family" if is_family else "id"]),
                is_family,
                str(row.get("gpu", "")),
                str(row["source"]),
            )
        )
    return tuple(entries)


@cache
def builtin_catalog() -> tuple[CatalogEntry, ...]:
    text = resources.files(__package__).joinpath(CATALOG_FILE).read_text(encoding="utf-8")
    return parse_catalog(yaml.safe_load(text))


def with_extra(extra: Iterable[str]) -> tuple[CatalogEntry, ...]:
    """The built-in catalog plus config entries ("ecs.x.large" exact; "ecs.x" or "ecs.x.*" a family)."""
    added = []
    for item in extra:
        text = item.strip()
        if text.endswith(".*"):
            added.append(CatalogEntry(text[:-2], True, "", "policy config"))
        elif text.count(".") >= 2:
            added.append(CatalogEntry(text, False, "", "policy config"))
        else:
            added.append(CatalogEntry(text, True, "", "policy config"))
    return builtin_catalog() + tuple(added)


def is_gpu_instance_type(instance_type: str, catalog: Iterable[CatalogEntry]) -> bool:
    return any(entry.matches(instance_type) for entry in catalog)
