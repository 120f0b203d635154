"""Kubernetes `resource.Quantity` and strict semver 2.0.0 values, as the DRA CEL environment sees them.

Quantities are parsed exactly by the driver package's `vke_gpu_dra.quantity` (one grammar for the driver
and these tools), so `quantity("200M").compareTo(quantity("0.2G")) == 0` and `quantity("50M")` is less
than `quantity("50Mi")`, as in `k8s.io/apimachinery/pkg/api/resource`; this module adds the apiserver's
conversions (`AsInt64`), readable formatting and semver.
Semantic versions follow `github.com/blang/semver/v4` `Parse` (the parser behind `semver()` and `version`
attributes): exactly MAJOR.MINOR.PATCH, no leading zeros, optional `-prerelease` and `+build`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Final

from vke_gpu_dra.quantity import (
    ALLOWED_QUANTITY_FORMS,
    BINARY_SUFFIXES,
    NANO,
    QuantityError,
    parse_quantity,
    round_to_nano,
)

__all__ = [
    "ALLOWED_QUANTITY_FORMS",
    "QuantityError",
    "Semver",
    "SemverError",
    "format_bytes",
    "format_quantity",
    "is_quantity",
    "is_semver",
    "parse_quantity",
    "parse_semver",
    "quantity_as_int64",
    "round_to_nano",
]

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


class SemverError(ValueError):
    """A string that is not a strict semver 2.0.0 version."""


def is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def quantity_as_int64(value: Fraction) -> int | None:
    """`Quantity.AsInt64`: the value when it is a whole number within int64, else None."""
    if value.denominator != 1 or not _INT64_MIN <= value.numerator <= _INT64_MAX:
        return None
    return value.numerator


def format_quantity(value: Fraction | int) -> str:
    """A readable canonical form: the largest binary suffix that divides a whole value, else decimal."""
    value = Fraction(value)
    if value.denominator == 1:
        number = value.numerator
        for suffix, size in reversed(BINARY_SUFFIXES.items()):
            if number and number % size == 0:
                return f"{number // size}{suffix}"
        return str(number)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return f"{(value / NANO).numerator}n"


def format_bytes(value: Fraction | int) -> str:
    """Bytes for messages: exact binary form when possible, otherwise GiB with two decimals."""
    exact = Fraction(value)
    text = format_quantity(exact)
    if exact.denominator == 1 and (text.endswith(("Gi", "Ti", "Pi", "Ei")) or exact < 2**30):
        return text
    return f"{float(exact) / 2**30:.2f}Gi"


# --- semver -----------------------------------------------------------------------------------

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
