"""Decode the Analyzer's wire properties into `Res`, keeping what pulumi_policy drops.

pulumi_policy unwraps secrets before policies see them, so a policy cannot tell a secret kubeconfig
from a plaintext one. The engine does send secretness (values wrapped in a signature object), so
this module decodes the raw request itself: secret values are unwrapped and their paths recorded,
unknown values become `UNKNOWN`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from google.protobuf import json_format, struct_pb2
from vke_gpu_dra_core import resources as r

from .pulumi_policy_private import UNKNOWN_SENTINELS, unwrap_proxy

SIG_KEY: Final = "4dabf18193072939515e22adb298388d"
SECRET_SIG: Final = "1b47061264138c4ac30d75fd1eb44270"


def decode(value: Any, path: r.Path = (), secrets: set[r.Path] | None = None) -> Any:
    """Plain data from wire JSON; secret paths go into `secrets`."""
    if isinstance(value, str):
        return r.UNKNOWN if value in UNKNOWN_SENTINELS else value
    if isinstance(value, list):
        return [decode(v, (*path, i), secrets) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        if value.get(SIG_KEY) == SECRET_SIG:
            if secrets is not None:
                secrets.add(path)
            return decode(value.get("value"), path, secrets)
        return {k: decode(v, (*path, k), secrets) for k, v in value.items()}
    return value


def decode_struct(struct: struct_pb2.Struct) -> tuple[dict[str, Any], frozenset[r.Path]]:
    secrets: set[r.Path] = set()
    props = decode(json_format.MessageToDict(struct), (), secrets)
    return props, frozenset(secrets)


def from_request(req: Any) -> r.Res:
    """A `Res` from an AnalyzeRequest or AnalyzerResource message."""
    props, secrets = decode_struct(req.properties)
    deps: list[str] = list(getattr(req, "dependencies", []))
    for prop_deps in getattr(req, "propertyDependencies", {}).values():
        deps.extend(prop_deps.urns)
    parent = getattr(req, "parent", "") or req.options.parent or None
    return r.Res(
        req.type,
        req.name,
        req.urn,
        props,
        protect=req.options.protect,
        parent=parent,
        dependencies=tuple(dict.fromkeys(deps)),
        secret_paths=secrets,
    )


def config_from_request(config: Mapping[str, Any]) -> dict[str, Any]:
    """Stack config from ConfigureStack: a map of strings (JSON-ish values, secrets already plain)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        out[key] = decode(json_format.MessageToDict(value)) if isinstance(value, struct_pb2.Value) else value
    return out


def from_proxy(value: Any) -> Any:
    """Plain data from pulumi_policy's proxies (used when policies run without the raw request)."""
    value = unwrap_proxy(value)
    if isinstance(value, str):
        return r.UNKNOWN if value in UNKNOWN_SENTINELS else value
    if isinstance(value, Mapping):
        return {k: from_proxy(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return [from_proxy(v) for v in value]
    return value


def parse_config_env(raw: str | None) -> dict[str, Any]:
    """PULUMI_CONFIG as the CLI hands it to a policy pack (a JSON object of strings)."""
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
