"""A Pulumi provider's input rules, read from its Python SDK: what `provider_double` checks.

Every resource class of a generated Pulumi SDK (`pulumi_volcengine.vke.Cluster`) has an `Args` input type
(`ClusterArgs`): its properties with their Pulumi names and types, and the ones its `__init__` requires.
`ResourceSchema.for_token` reads them for one type token (`volcengine:vke/cluster:Cluster`), importing only
the module the token names; `check` applies them to the inputs the engine sends (a protobuf Struct as a
dict): every required input present, no property the type does not have, each value of its type (string,
whole number, number, boolean, list, map, object, one of an enum's values), nested objects likewise. Values
the engine does not know yet (previews) and secrets are checked through: an unknown passes, a secret's value
is checked.
"""

from __future__ import annotations

import collections.abc
import enum
import importlib
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import pulumi
from pulumi import _types as pulumi_types

#: The engine's sentinel for a value not known during a preview (sdk/go/common/resource/plugin/rpc.go).
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
#: The key that marks a special object in a Struct, and the signatures of the kinds it can be.
SIG = "4dabf18193072939515e22adb298388d"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
OUTPUT_SIG = "d0e6a833031e9bbcd3f4e8bde6ca49a4"
PASS_THROUGH_SIGS = frozenset(
    {
        "5cf8f73096256a8f31e491e813e4eb8e",  # resource reference
        "c44067f5952c0a294b673a41bacd8c17",  # asset
        "0def7320c3a5731c473e5ecbe6d01bc7",  # archive
    }
)


class SchemaError(Exception):
    """The SDK has no resource or function for a token."""


# --- the type model ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scalar:
    kind: str  # string, integer, number, boolean, any
    enum: tuple[str, ...] = ()


@dataclass(frozen=True)
class ListOf:
    item: Kind


@dataclass(frozen=True)
class MapOf:
    value: Kind


@dataclass(frozen=True)
class OneOf:
    options: tuple[Kind, ...]


@dataclass(eq=False)
class Obj:
    """An input type (or a resource's Args): Pulumi name -> kind, and the names that are required."""

    name: str
    properties: dict[str, Kind] = field(default_factory=dict)
    required: frozenset[str] = frozenset()


Kind = Scalar | ListOf | MapOf | OneOf | Obj
ANY = Scalar("any")


@dataclass(frozen=True)
class Failure:
    """One problem with an input: its property path (`clusterConfig.subnetIds[0]`) and why."""

    path: str
    reason: str


_SCALARS: dict[Any, Scalar] = {
    str: Scalar("string"),
    bool: Scalar("boolean"),
    int: Scalar("integer"),
    float: Scalar("number"),
}
_SEQUENCES = (list, collections.abc.Sequence, typing.Sequence)
_MAPPINGS = (dict, collections.abc.Mapping, typing.Mapping)
_UNIONS = (typing.Union, types.UnionType)


class _Reader:
    """Python types of an SDK -> kinds; input types are read once each (they can refer to themselves)."""

    def __init__(self) -> None:
        self._objects: dict[type, Obj] = {}

    def kind(self, tp: Any) -> Kind:
        tp = pulumi_types.unwrap_type(tp)
        if tp in _SCALARS:
            return _SCALARS[tp]
        if inspect.isclass(tp):
            if issubclass(tp, enum.Enum):
                return Scalar("string", tuple(str(m.value) for m in tp))
            return self.obj(tp) if pulumi_types.is_input_type(tp) else ANY
        return self._generic(typing.get_origin(tp), typing.get_args(tp))

    def _generic(self, origin: Any, args: tuple[Any, ...]) -> Kind:
        if origin in _SEQUENCES:
            return ListOf(self.kind(args[0] if args else Any))
        if origin in _MAPPINGS:
            return MapOf(self.kind(args[1]) if len(args) == 2 else ANY)
        if origin in _UNIONS:
            options = tuple(self.kind(a) for a in args if a is not type(None))
            return options[0] if len(options) == 1 else OneOf(options)
        return ANY  # Any, assets and archives, JSON values

    def obj(self, cls: type, required: frozenset[str] | None = None) -> Obj:
        if cls in self._objects:
            return self._objects[cls]
        obj = Obj(cls.__name__)
        self._objects[cls] = obj  # before the properties: a type may contain itself
        names = pulumi_types.input_type_py_to_pulumi_names(cls)
        obj.properties = {name: self.kind(tp) for name, tp in pulumi_types.input_type_types(cls).items()}
        obj.required = required if required is not None else _required(cls, names)
        return obj


def _required(cls: type, py_to_pulumi: Mapping[str, str]) -> frozenset[str]:
    """The Pulumi names of the parameters `cls.__init__` takes without a default."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # type: ignore[misc]
    return frozenset(
        py_to_pulumi.get(p.name, p.name)
        for p in params
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    )


# --- reading resources and functions from an SDK ----------------------------------------------------


def sdk_module(package: str) -> str:
    """The SDK's top-level module: `volcengine` -> pulumi_volcengine, `docker-build` ->
    pulumi_docker_build."""
    return "pulumi_" + package.replace("-", "_")


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _token_module(package: str, token: str) -> str:
    """The SDK module that defines a token's resource or function, as the SDK generator names it:
    `volcengine:vke/cluster:Cluster` -> pulumi_volcengine.vke.cluster,
    `docker-build:index:Image` -> pulumi_docker_build.image."""
    parts = token.split(":")
    if len(parts) != 3 or parts[0] != package:
        raise SchemaError(f"{token}: not a type token of {package}")
    path = [p for p in parts[1].split("/") if p != "index"] or [parts[2]]
    if len(path) == 1 and parts[1] != "index" and "/" not in parts[1]:
        path.append(parts[2])
    return ".".join([sdk_module(package), *(_snake(p) for p in path)])


_TOKEN_IN_SOURCE = re.compile(r"""['"]([\w-]+:[\w/.-]+:\w+)['"]""")


def _classes(module_name: str, token: str) -> list[type]:
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        package = module_name.split(".", maxsplit=1)[0]
        raise SchemaError(
            f"{token}: no resource of {package} has this type token (no {module_name})"
        ) from None
    return [obj for obj in vars(module).values() if inspect.isclass(obj)]


@dataclass(frozen=True)
class ResourceSchema:
    token: str
    inputs: Obj

    @classmethod
    def for_token(cls, package: str, token: str) -> ResourceSchema:
        for resource in _classes(_token_module(package, token), token):
            if not issubclass(resource, pulumi.CustomResource):
                continue
            if token in _TOKEN_IN_SOURCE.findall(inspect.getsource(resource)):
                args = vars(inspect.getmodule(resource)).get(f"{resource.__name__}Args")
                if args is None:
                    raise SchemaError(f"{token}: {resource.__name__} has no {resource.__name__}Args")
                return cls(token, _Reader().obj(args))
        raise SchemaError(f"{token}: no resource of {sdk_module(package)} has this type token")

    @classmethod
    def provider(cls, package: str) -> ResourceSchema:
        """The provider's own configuration (its `Provider` resource's `ProviderArgs`)."""
        module = importlib.import_module(sdk_module(package))
        return cls(f"pulumi:providers:{package}", _Reader().obj(module.ProviderArgs, frozenset()))

    def check(self, inputs: Mapping[str, Any]) -> list[Failure]:
        return check(self.inputs, dict(inputs), "")


@dataclass(frozen=True)
class FunctionSchema:
    """A data source (`get_*` function): its token and the Pulumi names of its arguments."""

    token: str
    arguments: frozenset[str]

    @classmethod
    def for_token(cls, package: str, token: str) -> FunctionSchema:
        module = importlib.import_module(_token_module(package, token))
        for obj in vars(module).values():
            if not inspect.isfunction(obj) or obj.__name__.endswith("_output"):
                continue
            source = inspect.getsource(obj)
            if f"'{token}'" in source or f'"{token}"' in source:
                return cls(token, frozenset(re.findall(r"__args__\['(\w+)'\]", source)))
        raise SchemaError(f"{token}: no function of {sdk_module(package)} has this token")

    def check(self, args: Mapping[str, Any]) -> list[Failure]:
        return [
            Failure(
                name,
                f"{self.token} has no argument {name}; its arguments: {', '.join(sorted(self.arguments))}",
            )
            for name in sorted(args)
            if name not in self.arguments
        ]


# --- checking values ----------------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_SCALAR_WORDS: Final = {
    "integer": "a whole number",
    "number": "a number",
    "boolean": "a boolean",
    "string": "a string",
    "any": "any value",
}
_SCALAR_OK: Final[dict[str, Callable[[Any], bool]]] = {
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: _is_number(v) and float(v).is_integer(),
    "number": _is_number,
    "any": lambda v: True,
}


def _describe(kind: Kind) -> str:
    if isinstance(kind, Scalar):
        return "one of " + ", ".join(kind.enum) if kind.enum else _SCALAR_WORDS[kind.kind]
    if isinstance(kind, OneOf):
        return " or ".join(_describe(o) for o in kind.options)
    if isinstance(kind, Obj):
        return f"an object ({kind.name})"
    return "a list" if isinstance(kind, ListOf) else "a map"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _show(value: Any) -> str:
    """A value as JSON (the engine sends every number as a float: 3.0 is shown 3)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return json.dumps(value)


def _not(kind: Kind, value: Any, path: str) -> list[Failure]:
    return [Failure(path, f"{_show(value)} is not {_describe(kind)}")]


def check(kind: Kind, value: Any, path: str) -> list[Failure]:
    """The problems of `value` (a Struct value as Python data) against `kind`."""
    if value == UNKNOWN or value is None:
        return []
    if isinstance(value, dict) and SIG in value:
        if value[SIG] in (SECRET_SIG, OUTPUT_SIG):
            return check(kind, value.get("value"), path)
        if value[SIG] in PASS_THROUGH_SIGS:
            return []
    return _CHECKS[type(kind)](kind, value, path)


def _check_scalar(kind: Scalar, value: Any, path: str) -> list[Failure]:
    ok = _SCALAR_OK[kind.kind](value) and (not kind.enum or value in kind.enum)
    return [] if ok else _not(kind, value, path)


def _check_list(kind: ListOf, value: Any, path: str) -> list[Failure]:
    if not isinstance(value, list):
        return _not(kind, value, path)
    return [f for i, v in enumerate(value) for f in check(kind.item, v, f"{path}[{i}]")]


def _check_map(kind: MapOf, value: Any, path: str) -> list[Failure]:
    if not isinstance(value, dict):
        return _not(kind, value, path)
    return [f for k, v in sorted(value.items()) for f in check(kind.value, v, _join(path, k))]


def _check_one_of(kind: OneOf, value: Any, path: str) -> list[Failure]:
    return [] if any(not check(o, value, path) for o in kind.options) else _not(kind, value, path)


def _check_object(obj: Obj, value: Any, path: str) -> list[Failure]:
    if not isinstance(value, dict):
        return _not(obj, value, path)
    failures = [
        Failure(_join(path, name), f"missing required property {name} of {obj.name}")
        for name in sorted(obj.required)
        if value.get(name) is None
    ]
    for name, item in sorted(value.items()):
        if name.startswith("__"):
            continue  # the engine's own keys (__defaults, __meta)
        if name not in obj.properties:
            known = ", ".join(sorted(obj.properties)) or "none"
            failures.append(
                Failure(_join(path, name), f"{obj.name} has no property {name}; its properties: {known}")
            )
            continue
        failures += check(obj.properties[name], item, _join(path, name))
    return failures


_CHECKS: Final[dict[type, Callable[[Any, Any, str], list[Failure]]]] = {
    Scalar: _check_scalar,
    ListOf: _check_list,
    MapOf: _check_map,
    OneOf: _check_one_of,
    Obj: _check_object,
}
