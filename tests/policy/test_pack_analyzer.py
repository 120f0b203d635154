"""The real pack over gRPC: every example stack passes, each broken stack fails exactly one way."""

from __future__ import annotations

import pytest
from pulumi.runtime.proto import analyzer_pb2

from .analyzer_client import Diagnostic, PackProcess
from .stacks import example_stacks, program_stack

MANDATORY_POLICIES = {
    "kubernetes-version",
    "gpu-node-pool-labels",
    "gpu-node-pool-instance-types",
    "gpu-node-pool-runtime",
    "no-device-plugin-beside-dra",
    "dra-driver-values",
    "device-classes",
    "claim-references",
    "secrets",
    "production-protection",
}
ADVISORY_POLICIES = {"api-server-public-access", "node-pool-auto-scaling"}


def mandatory(diags: list[Diagnostic]) -> list[Diagnostic]:
    return [d for d in diags if d.level == "mandatory"]


def test_analyzer_info_lists_every_policy(analyzer: PackProcess) -> None:
    info = analyzer.info()
    assert info.name == "vke-gpu-dra"
    levels = {p.name: p.enforcementLevel for p in info.policies}
    assert set(levels) == MANDATORY_POLICIES | ADVISORY_POLICIES
    assert {n for n, lvl in levels.items() if lvl == analyzer_pb2.MANDATORY} == MANDATORY_POLICIES


@pytest.mark.parametrize(("stack", "implementation"), list(example_stacks()))
def test_example_stacks_have_no_mandatory_violation(
    analyzer: PackProcess, stack: str, implementation: str
) -> None:
    diags = analyzer.run(program_stack(stack, implementation))
    assert mandatory(diags) == []
    # Preview-only notes ("can't run policy during preview") would mean a policy touched an unknown.
    assert not [d for d in diags if "during preview" in d.message]


def test_dev_stack_gets_the_public_api_server_advisory(analyzer: PackProcess) -> None:
    diags = analyzer.run(program_stack("dev", "python"))
    assert [(d.policy, d.level) for d in diags] == [("api-server-public-access", "advisory")]
    assert "0.0.0.0/0" in diags[0].message
