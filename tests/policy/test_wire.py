"""Decoding the Analyzer's wire properties, and running policies directly as pulumi_policy does."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2
from pulumi.runtime.proto import analyzer_pb2
from pulumi_policy import PolicyResourceOptions, ResourceValidationArgs, StackValidationArgs
from pulumi_policy.policy import PolicyCustomTimeouts, PolicyResource
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy
from vke_dra_policies import context, pack, wire
from vke_gpu_dra_core import policy_names as names
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r

from .stacks import secret

OPTS = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])


def test_decode_records_secret_paths_and_unknowns() -> None:
    props, secrets = wire.decode_struct(
        json_format.ParseDict(
            {"a": secret({"b": ["x", secret("y")]}), "c": UNKNOWN_STRING_VALUE, "d": 1.0}, struct_pb2.Struct()
        )
    )
    assert props == {"a": {"b": ["x", "y"]}, "c": r.UNKNOWN, "d": 1.0}
    assert secrets == {("a",), ("a", "b", 1)}
    res = r.Res("t", "n", "u", props, secret_paths=secrets)
    assert res.is_secret(("a", "b", 0)) and not res.is_secret(("c",))


def test_from_request_keeps_options_and_dependencies() -> None:
    request = analyzer_pb2.AnalyzerResource(
        type="t",
        name="n",
        urn="u",
        properties=json_format.ParseDict({"k": "v"}, struct_pb2.Struct()),
        options=analyzer_pb2.AnalyzerResourceOptions(protect=True),
        parent="p",
        dependencies=["d1"],
    )
    request.propertyDependencies["k"].urns.append("d2")
    res = wire.from_request(request)
    assert (res.protect, res.parent, res.dependencies, res.props) == (True, "p", ("d1", "d2"), {"k": "v"})


def test_from_proxy_turns_unknowns_into_the_sentinel() -> None:
    proxied = unknown_checking_proxy({"a": {"b": [UNKNOWN_STRING_VALUE, "x"]}})
    assert wire.from_proxy(proxied) == {"a": {"b": [r.UNKNOWN, "x"]}}


def test_stack_config_sources() -> None:
    assert wire.parse_config_env('{"p:production": "true"}') == {"p:production": "true"}
    assert wire.parse_config_env("not json") == {}
    info = context.StackInfo(project="p", config={"p:production": "true", "q:production": "false"})
    assert info.config_value("production") == "true"
    assert context.StackInfo(config={"x:production": "true"}).config_value("production") == "true"
    with pytest.raises(KeyError, match="productoin is not a stack config key"):
        info.config_value("productoin")  # a misspelt key in the pack fails loudly, never reads as unset


def _policy(name: str) -> Any:  # the pack's ResourceValidationPolicy / StackValidationPolicy
    return next(p for p in pack.POLICIES if p.name == name)


def test_resource_policy_called_directly_with_an_unknown_version() -> None:
    reports: list[str] = []
    args = ResourceValidationArgs(
        pt.CLUSTER,
        unknown_checking_proxy({"kubernetesVersion": UNKNOWN_STRING_VALUE}),
        "urn:c",
        "c",
        OPTS,
        None,
    )
    _policy(names.KUBERNETES_VERSION).validate(args, lambda msg, urn=None: reports.append(msg))
    assert reports == []
    args = ResourceValidationArgs(
        pt.CLUSTER, unknown_checking_proxy({"kubernetesVersion": "1.33"}), "urn:c", "c", OPTS, None
    )
    _policy(names.KUBERNETES_VERSION).validate(args, lambda msg, urn=None: reports.append(msg))
    assert len(reports) == 1 and '"1.33"' in reports[0]


def test_production_comes_from_policy_config_or_stack_config() -> None:
    reports: list[str] = []
    report = lambda msg, urn=None: reports.append(msg)  # noqa: E731
    cluster = unknown_checking_proxy({"kubernetesVersion": "1.34"})
    policy = _policy(names.PRODUCTION_PROTECTION)
    policy.validate(
        ResourceValidationArgs(pt.CLUSTER, cluster, "urn:c", "c", OPTS, None, {"production": True}), report
    )
    assert len(reports) == 1
    policy.validate(
        ResourceValidationArgs(pt.CLUSTER, cluster, "urn:c", "c", OPTS, None, {"production": False}), report
    )
    saved = context.STACK.config
    try:
        context.STACK.config = {"vke-gpu-dra:production": "true"}
        context.STACK.project = "vke-gpu-dra"
        policy.validate(ResourceValidationArgs(pt.CLUSTER, cluster, "urn:c", "c", OPTS, None), report)
    finally:
        context.STACK.config = saved
    assert len(reports) == 2


def test_stack_policy_called_directly() -> None:
    pool = PolicyResource(
        pt.NODE_POOL,
        unknown_checking_proxy(
            {"nodeConfig": {"instanceTypeIds": ["ecs.gni2.xlarge"]}, "kubernetesConfig": {"labels": []}}
        ),
        "urn:pool",
        "pool",
        OPTS,
        None,
        None,
        [],
        {},
    )
    reports: list[str] = []
    _policy(names.NODE_POOL_RUNTIME).validate(
        StackValidationArgs([pool]), lambda msg, urn=None: reports.append(msg)
    )
    assert len(reports) == 1 and "no NodePoolRuntime" in reports[0]
