"""The pack's use of pulumi_policy's private API: one file, pinned to the version it was written for."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pulumi_policy
from pulumi.runtime.proto import analyzer_pb2
from pulumi_policy import ResourceValidationPolicy
from vke_dra_policies import pack, pulumi_policy_private, server

ROOT = Path(__file__).resolve().parents[2]
PACK_DIR = ROOT / "policy" / "vke_dra_policies"
PRIVATE_FILE = PACK_DIR / "pulumi_policy_private.py"
RECHECK = (
    "re-check every use listed in the docstring of policy/vke_dra_policies/pulumi_policy_private.py "
    "against the new pulumi_policy/policy.py and proxy.py (the private servicer's constructor, Analyze, "
    "AnalyzeStack and policy list; the proxies and unknown sentinels), run tests/policy/, then set "
    "WRITTEN_FOR there"
)


def test_installed_pulumi_policy_is_the_version_the_private_use_was_written_for() -> None:
    installed = pulumi_policy_private.installed_version()
    assert installed == pulumi_policy_private.WRITTEN_FOR, (
        f"pulumi-policy {installed} is installed, the pack's private use of it was written for "
        f"{pulumi_policy_private.WRITTEN_FOR}: {RECHECK}"
    )


def test_the_pack_requirements_pin_that_version() -> None:
    pins = re.findall(r"^pulumi[-_]policy==(\S+)", (ROOT / "policy" / "requirements.txt").read_text(), re.M)
    assert pins == [pulumi_policy_private.WRITTEN_FOR], (
        f"policy/requirements.txt pins pulumi-policy {pins}, the pack's private use of it was written for "
        f"{pulumi_policy_private.WRITTEN_FOR}: {RECHECK}"
    )


def _private_uses(path: Path) -> list[str]:
    """pulumi_policy imports of `path` beyond the package's public names (`pulumi_policy.__all__`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("pulumi_policy.")]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module.startswith("pulumi_policy."):
                found.append(node.module)
            elif node.module == "pulumi_policy":
                public = set(pulumi_policy.__all__)
                found += [f"pulumi_policy.{a.name}" for a in node.names if a.name not in public]
    return found


def test_only_one_file_of_the_pack_uses_pulumi_policys_private_api() -> None:
    uses = {
        str(path.relative_to(PACK_DIR)): found
        for path in sorted(PACK_DIR.rglob("*.py"))
        if (found := _private_uses(path))
    }
    assert set(uses) == {PRIVATE_FILE.name}, uses


def test_a_servicer_copy_runs_its_own_policies_and_leaves_the_pack_s_alone() -> None:
    servicer = server.Servicer()
    only = ResourceValidationPolicy("only", "The one policy.", lambda args, report: report("found", args.urn))
    copy = servicer.with_policies([only])
    assert [p.name for p in copy.GetAnalyzerInfo(None, None).policies] == ["only"]
    assert [p.name for p in servicer.GetAnalyzerInfo(None, None).policies] == [p.name for p in pack.POLICIES]
    request = analyzer_pb2.AnalyzeRequest(type="t", name="n", urn="urn:n")
    diagnostics = servicer.analyze_with([only], request, None).diagnostics
    found = [(d.policyName, d.urn, d.message) for d in diagnostics]
    assert found == [("only", "urn:n", "The one policy.\nfound")]
