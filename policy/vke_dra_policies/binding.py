"""Rows of the policy table (pack.py) as pulumi_policy policies, for one analyzer run or for none.

A check takes the resource (or the stack's resources) as `Res`, the policy's config and the stack
under analysis. Bound to a `Run`, a policy reads the run's decoded resources (with their secretness)
and the run's stack; bound to none (a direct call), it converts pulumi_policy's own arguments and
uses the stack the process environment names (`context.STACK`, read at each call).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    Severity,
    StackValidationArgs,
    StackValidationPolicy,
)
from vke_gpu_dra_core import resources as r

from . import context, wire
from .checks import Violation
from .context import Run, StackInfo

ResourceCheck: TypeAlias = Callable[[r.Res, Mapping[str, Any], StackInfo], list[Violation]]
StackCheck: TypeAlias = Callable[[list[r.Res], Mapping[str, Any], StackInfo], list[Violation]]


@dataclass(frozen=True)
class ResourceRow:
    """A policy that judges one resource of `types` at a time, before it changes."""

    name: str
    description: str
    types: tuple[str, ...]
    check: ResourceCheck
    level: EnforcementLevel = EnforcementLevel.MANDATORY
    severity: Severity = Severity.HIGH
    config_schema: PolicyConfigSchema | None = None


@dataclass(frozen=True)
class StackRow:
    """A policy that judges the whole stack after the program ran."""

    name: str
    description: str
    check: StackCheck
    level: EnforcementLevel = EnforcementLevel.MANDATORY
    severity: Severity = Severity.HIGH
    config_schema: PolicyConfigSchema | None = None


Row: TypeAlias = ResourceRow | StackRow


def _stack_info(run: Run | None) -> StackInfo:
    return run.stack if run is not None else context.STACK


def _resource(args: ResourceValidationArgs, run: Run | None) -> r.Res:
    if run is not None and args.urn in run.resources:
        return run.resources[args.urn]
    return r.Res(
        args.resource_type,
        args.name,
        args.urn,
        wire.from_proxy(args.props),
        protect=bool(args.opts.protect),
        parent=args.opts.parent,
    )


def _stack(args: StackValidationArgs, run: Run | None) -> list[r.Res]:
    decoded = run.resources if run is not None else {}
    out = []
    for res in args.resources:
        if res.urn in decoded:
            out.append(decoded[res.urn])
            continue
        deps = tuple(d.urn for d in res.dependencies)
        out.append(
            r.Res(
                res.resource_type,
                res.name,
                res.urn,
                wire.from_proxy(res.props),
                protect=bool(res.opts.protect),
                parent=res.parent.urn if res.parent else None,
                dependencies=deps,
            )
        )
    return out


def _report(violations: Sequence[Violation], report: ReportViolation) -> None:
    for v in violations:
        report(v.message, v.urn)


def _resource_policy(row: ResourceRow, run: Run | None) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        if args.resource_type in row.types:
            _report(row.check(_resource(args, run), args.get_config(), _stack_info(run)), report)

    return ResourceValidationPolicy(
        row.name,
        row.description,
        validate,
        enforcement_level=row.level,
        config_schema=row.config_schema,
        severity=row.severity,
    )


def _stack_policy(row: StackRow, run: Run | None) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        _report(row.check(_stack(args, run), args.get_config(), _stack_info(run)), report)

    return StackValidationPolicy(
        row.name,
        row.description,
        validate,
        enforcement_level=row.level,
        config_schema=row.config_schema,
        severity=row.severity,
    )


def bind(rows: Sequence[Row], run: Run | None = None) -> list[Policy]:
    """The rows as pulumi_policy policies that judge `run` (or, without one, their own arguments)."""
    out: list[Policy] = []
    for row in rows:
        out.append(_resource_policy(row, run) if isinstance(row, ResourceRow) else _stack_policy(row, run))
    return out
