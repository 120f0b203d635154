"""Small builders for the validators' unit tests."""

from __future__ import annotations

from typing import Any

from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r

DRA_LABELS = [{"key": k, "value": v} for k, v in facts.REQUIRED_NODE_LABELS.items()]


def res(type_: str, name: str = "x", props: dict[str, Any] | None = None, **kw: Any) -> r.Res:
    return r.Res(type_, name, f"urn:pulumi:t::p::{type_}::{name}", props or {}, **kw)


def pool(name: str = "gpu", types: Any = ("ecs.gni2.3xlarge",), labels: Any = None, **props: Any) -> r.Res:
    node_config = {"instanceTypeIds": list(types) if isinstance(types, tuple | list) else types}
    kubernetes_config = {"labels": DRA_LABELS if labels is None else labels}
    return res(
        pt.NODE_POOL,
        name,
        {"name": name, "nodeConfig": node_config, "kubernetesConfig": kubernetes_config, **props},
    )


def runtime(version: Any = "2.1", name: str = "rt", **kw: Any) -> r.Res:
    return res(
        pt.NODE_POOL_RUNTIME,
        name,
        {"runtime_type": "containerd", "runtime_version": version, "node_pool_id": "np-1"},
        **kw,
    )
