"""Pure validators: plain resources in, violations out. No pulumi_policy imports here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    """One finding; the message names the resource, the value found and the fix."""

    message: str
    urn: str | None = None
