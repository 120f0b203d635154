"""A neutral view of a stack's registered resources, read one way by the policy pack and the planner.

`Res` is one resource: its type token (`pulumi_types`), name, URN, properties as plain dicts, lists and
scalars, and the options policies care about. Values the engine does not know yet (during preview) are
the `UNKNOWN` sentinel; readers test `is UNKNOWN` (or `is_known`) and skip them instead of guessing.

The policy pack decodes the engine's wire format into `Res` itself (secretness included); `read` turns
anything else shaped like a Pulumi resource (`resource_type` or `type`, `props`, `urn`, `name`,
`dependencies`) into one, every value that is not plain JSON counting as unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

from . import pulumi_types


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


_JSON_SCALARS: Final = (str, int, float, bool, type(None))


def is_known(value: Any) -> bool:
    """True when `value` is plain JSON all the way down (nothing unknown in it)."""
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and is_known(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(is_known(v) for v in value)
    return isinstance(value, _JSON_SCALARS)


def plain(value: Any) -> Any:
    """`value` as plain JSON data, with `UNKNOWN` for every part that is not."""
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            return UNKNOWN
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value if isinstance(value, _JSON_SCALARS) else UNKNOWN


def read(resource: Any) -> Res:
    """`resource` as a `Res`: a `Res` as it is, else its `resource_type` (or `type`), `props`, `urn`,
    `name` and `dependencies` (URNs, or resources with a `urn`)."""
    if isinstance(resource, Res):
        return resource
    props = plain(getattr(resource, "props", None) or {})
    dependencies = tuple(
        d if isinstance(d, str) else str(getattr(d, "urn", ""))
        for d in getattr(resource, "dependencies", None) or ()
    )
    return Res(
        str(getattr(resource, "resource_type", None) or getattr(resource, "type", "") or ""),
        str(getattr(resource, "name", "") or ""),
        str(getattr(resource, "urn", "") or ""),
        props if isinstance(props, Mapping) else {},
        dependencies=dependencies,
    )


def kubernetes_object(res: Res) -> dict[str, Any]:
    """The object a `kubernetes:<group>/<version>:<Kind>` resource registers: its props, with the
    token's apiVersion and kind where the props lack them (or do not know them yet)."""
    api_version, kind = pulumi_types.kubernetes_api_version_kind(res.type)
    obj = dict(res.props)
    if not isinstance(obj.get("apiVersion"), str):
        obj["apiVersion"] = api_version
    if not isinstance(obj.get("kind"), str):
        obj["kind"] = kind
    return obj


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
