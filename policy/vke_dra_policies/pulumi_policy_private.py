"""Every use of pulumi_policy's private API, in one file, written against pulumi-policy `WRITTEN_FOR`.

pulumi_policy has no public way to serve a pack with anything but its own arguments: the server
`PolicyPack(...)` starts hands each policy properties with the secret markers removed, and no stack
config. The pack needs both, so it extends pulumi_policy's private servicer and reads its proxies.
What this file relies on, to re-check in pulumi_policy's `policy.py` and `proxy.py` whenever the
installed version moves (tests/policy/test_pulumi_policy_private.py fails until then):

* `policy._PolicyAnalyzerServicer`: the gRPC Analyzer servicer, its constructor's arguments (name,
  version, policies, default enforcement level, description), its `Analyze`/`AnalyzeStack`, which
  call `policy.validate(args, report)` for each of its policies, and its policy list, the
  name-mangled attribute `_PolicyAnalyzerServicer__policies`, which `with_policies` replaces on a
  copy of the servicer so one request runs with one run's policies;
* `proxy.UNKNOWN_*_VALUE`: the sentinels the engine sends for values unknown during preview;
* `proxy._DictProxy`, `proxy._ListProxy` and their `"__target"` item: the unknown-checking wrappers
  around the properties pulumi_policy hands to a policy, and the plain value inside.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from importlib import metadata
from typing import Any, Final

from pulumi_policy import EnforcementLevel, Policy
from pulumi_policy import proxy as _proxy
from pulumi_policy.policy import _PolicyAnalyzerServicer

#: The pulumi-policy release this file was written and checked against.
WRITTEN_FOR: Final = "1.21.0"
DISTRIBUTION: Final = "pulumi-policy"
_POLICIES_ATTRIBUTE: Final = "_PolicyAnalyzerServicer__policies"

UNKNOWN_SENTINELS: Final = frozenset(
    {
        _proxy.UNKNOWN_BOOLEAN_VALUE,
        _proxy.UNKNOWN_NUMBER_VALUE,
        _proxy.UNKNOWN_STRING_VALUE,
        _proxy.UNKNOWN_ARRAY_VALUE,
        _proxy.UNKNOWN_ASSET_VALUE,
        _proxy.UNKNOWN_ARCHIVE_VALUE,
        _proxy.UNKNOWN_OBJECT_VALUE,
    }
)


def installed_version() -> str:
    """The version of pulumi-policy installed in the running environment."""
    return metadata.version(DISTRIBUTION)


def unwrap_proxy(value: Any) -> Any:
    """The plain dict or list inside one of pulumi_policy's unknown-checking proxies; others as given."""
    if isinstance(value, _proxy._DictProxy | _proxy._ListProxy):
        return value["__target"]
    return value


class AnalyzerServicer(_PolicyAnalyzerServicer):
    """pulumi_policy's Analyzer servicer, able to answer one request with policies of its own."""

    def __init__(
        self,
        name: str,
        version: str,
        policies: list[Policy],
        default_level: EnforcementLevel,
        *,
        description: str,
    ) -> None:
        super().__init__(name, version, policies, default_level, description=description)
        if not isinstance(getattr(self, _POLICIES_ATTRIBUTE, None), list):
            raise RuntimeError(
                f"pulumi_policy's servicer keeps no policy list in {_POLICIES_ATTRIBUTE} (pulumi-policy "
                f"{installed_version()}; this pack was written for {WRITTEN_FOR}): re-check "
                f"{__name__} against the installed pulumi_policy"
            )

    def with_policies(self, policies: Sequence[Policy]) -> AnalyzerServicer:
        """A copy of this servicer (same policy config, stack tags, name) that runs `policies`."""
        clone = copy.copy(self)
        setattr(clone, _POLICIES_ATTRIBUTE, list(policies))
        return clone

    def analyze_with(self, policies: Sequence[Policy], request: Any, context: Any) -> Any:
        """pulumi_policy's `Analyze` of `request`, with `policies` in place of the pack's own."""
        return _PolicyAnalyzerServicer.Analyze(self.with_policies(policies), request, context)

    def analyze_stack_with(self, policies: Sequence[Policy], request: Any, context: Any) -> Any:
        """pulumi_policy's `AnalyzeStack` of `request`, with `policies` in place of the pack's own."""
        return _PolicyAnalyzerServicer.AnalyzeStack(self.with_policies(policies), request, context)
