"""A neutral view of the resources a policy looks at, independent of pulumi_policy's classes.

Validators take `Res` objects whose `props` are plain dicts/lists/scalars. Values the engine does
not know yet (during preview) are the `UNKNOWN` sentinel; validators skip them instead of guessing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

from vke_gpu_dra_core import pulumi_types


class Unknown(Enum):
    """A value that is not known until the resource exists (preview); `UNKNOWN` is its only member."""

    UNKNOWN = "<unknown>"

    def __repr__(self) -> str:
        return "<unknown>"

    def __bool__(self) -> bool:
        raise TypeError("an unknown value has no truth value; test `is UNKNOWN` first")


UNKNOWN: Final = Unknown.UNKNOWN

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Res:
    """One resource: its type, name, URN, properties and the options policies care about."""

    type: str
    name: str
    urn: str
    props: Mapping[str, Any]
    protect: bool = False
    parent: str | None = None
    dependencies: tuple[str, ...] = ()
    #: Property paths whose values are secrets (a path covers everything below it).
    secret_paths: frozenset[Path] = field(default_factory=frozenset)

    def get(self, *path: str | int) -> Any:
        return get_path(self.props, path)

    def is_secret(self, path: Path) -> bool:
        return any(path[: len(p)] == p for p in self.secret_paths)

    @property
    def label(self) -> str:
        """How messages name the resource: `<type> "<name>"`."""
        return f'{self.type} "{self.name}"'


def get_path(data: Any, path: Iterable[str | int]) -> Any:
    """The value at `path`, None when absent, UNKNOWN when it or a parent is unknown."""
    current = data
    for key in path:
        if current is UNKNOWN:
            return UNKNOWN
        if isinstance(key, int):
            if not isinstance(current, list) or not -len(current) <= key < len(current):
                return None
            current = current[key]
        else:
            if not isinstance(current, Mapping) or key not in current:
                return None
            current = current[key]
    return current


def of_type(resources: Iterable[Res], *types: str) -> list[Res]:
    return [r for r in resources if r.type in types]


def is_node_pool_runtime(res: Res) -> bool:
    """The program's dynamic resource that pins a node pool's container runtime."""
    return pulumi_types.is_node_pool_runtime(res.type)


def walk_strings(data: Any, path: Path = ()) -> Iterator[tuple[Path, str]]:
    """Every string leaf with its path."""
    if isinstance(data, str):
        yield path, data
    elif isinstance(data, Mapping):
        for key, value in data.items():
            yield from walk_strings(value, (*path, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from walk_strings(value, (*path, index))


def format_path(path: Path) -> str:
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out or "<root>"


def truthy(value: Any) -> bool | None:
    """Booleans as config and Helm values write them (True, "true", "True"); None when unknown."""
    if value is UNKNOWN:
        return None
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return value is True


def as_list(value: Any) -> list[Any]:
    """`value` when it is a list, else [] (absent, unknown or malformed)."""
    return value if isinstance(value, list) else []
