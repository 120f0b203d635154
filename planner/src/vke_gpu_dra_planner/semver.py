"""Strict semver 2.0.0 values, as the DRA CEL environment's `semver()` and `version` attributes see them.

Semantic versions follow `github.com/blang/semver/v4` `Parse` (the parser behind `semver()` and `version`
attributes): exactly MAJOR.MINOR.PATCH, no leading zeros, optional `-prerelease` and `+build`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

__all__ = ["Semver", "SemverError", "is_semver", "parse_semver"]


class SemverError(ValueError):
    """A string that is not a strict semver 2.0.0 version."""


_NUMERIC: Final = r"(?:0|[1-9]\d*)"
_IDENT: Final = r"[0-9A-Za-z-]+"
_SEMVER_RE: Final = re.compile(
    rf"^({_NUMERIC})\.({_NUMERIC})\.({_NUMERIC})(?:-({_IDENT}(?:\.{_IDENT})*))?(?:\+({_IDENT}(?:\.{_IDENT})*))?$"
)


@dataclass(frozen=True, order=False)
class Semver:
    """A parsed strict semantic version; build metadata is kept but ignored when comparing."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: tuple[str, ...] = ()

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1 by semver 2.0.0 precedence (build metadata ignored)."""
        left, right = (self.major, self.minor, self.patch), (other.major, other.minor, other.patch)
        if left != right:
            return -1 if left < right else 1
        return _compare_prerelease(self.prerelease, other.prerelease)


def _compare_prerelease(left: tuple[str, ...], right: tuple[str, ...]) -> int:  # noqa: PLR0911 (semver 11.4 rules)
    if left == right:
        return 0
    if not left:  # a release ranks above any of its pre-releases
        return 1
    if not right:
        return -1
    for a, b in zip(left, right, strict=False):
        if a == b:
            continue
        a_num, b_num = a.isdigit(), b.isdigit()
        if a_num and b_num:
            return -1 if int(a) < int(b) else 1
        if a_num != b_num:  # numeric identifiers rank below alphanumeric ones
            return -1 if a_num else 1
        return -1 if a < b else 1
    return -1 if len(left) < len(right) else 1


@lru_cache(maxsize=4096)
def parse_semver(text: str) -> Semver:
    """Parse like blang/semver `Parse`: strict MAJOR.MINOR.PATCH, no leading zeros, no `v` prefix."""
    match = _SEMVER_RE.match(text)
    if match is None:
        raise SemverError(
            f"{text!r} is not a semantic version: expected MAJOR.MINOR.PATCH without leading zeros, "
            "optionally followed by -prerelease and +build (semver.org 2.0.0), e.g. 8.0.0 or 1.2.3-rc.1"
        )
    major, minor, patch, pre, build = match.groups()
    prerelease = tuple(pre.split(".")) if pre else ()
    for ident in prerelease:
        if ident.isdigit() and len(ident) > 1 and ident[0] == "0":
            raise SemverError(
                f"{text!r} is not a semantic version: numeric pre-release identifier {ident!r} "
                "has a leading zero"
            )
    return Semver(int(major), int(minor), int(patch), prerelease, tuple(build.split(".")) if build else ())


def is_semver(text: str) -> bool:
    try:
        parse_semver(text)
    except SemverError:
        return False
    return True
