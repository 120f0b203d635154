"""Kubernetes `resource.Quantity` and strict semver 2.0.0 values, as the DRA CEL environment sees them.

Quantities are kept exact (`fractions.Fraction`), so `quantity("200M").compareTo(quantity("0.2G")) == 0`
and `quantity("50M")` is less than `quantity("50Mi")`, as in `k8s.io/apimachinery/pkg/api/resource`.
Semantic versions follow `github.com/blang/semver/v4` `Parse` (the parser behind `semver()` and `version`
attributes): exactly MAJOR.MINOR.PATCH, no leading zeros, optional `-prerelease` and `+build`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Final

_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
# sign, digits with an optional fraction (at least one digit), then a suffix or a decimal exponent.
_QUANTITY_RE: Final = re.compile(
    r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)
#: Quantities are stored with nano precision; finer values are rounded up (away from zero).
_NANO: Final = Fraction(1, 10**9)
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
ALLOWED_QUANTITY_FORMS: Final = (
    "a decimal number with an optional suffix Ki, Mi, Gi, Ti, Pi, Ei (binary), n, u, m, k, M, G, T, P, E "
    "(decimal) or a decimal exponent e<N>/E<N>, e.g. 40Gi, 1.5G, 500m, 1e3"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


class SemverError(ValueError):
    """A string that is not a strict semver 2.0.0 version."""


@lru_cache(maxsize=4096)
def parse_quantity(text: str) -> Fraction:
    """The exact value of a Kubernetes quantity string (`resource.ParseQuantity`)."""
    match = _QUANTITY_RE.match(text)
    if match is None:
        raise QuantityError(
            f"quantities must match the regular expression of resource.Quantity: {text!r} is not "
            f"{ALLOWED_QUANTITY_FORMS}"
        )
    sign, number, exponent, suffix = match.groups()
    value = Fraction(number)
    if exponent is not None:
        power = int(exponent[1:])
        if abs(power) > 10_000:
            raise QuantityError(f"quantity {text!r}: exponent {power} is out of range")
        value *= Fraction(10) ** power
    elif suffix in _BINARY:
        value *= _BINARY[suffix]
    else:
        value *= _DECIMAL[suffix or ""]
    if sign == "-":
        value = -value
    return round_to_nano(value)


def round_to_nano(value: Fraction) -> Fraction:
    """Round away from zero to a multiple of 1n, as Quantity does with values below its precision."""
    steps = value / _NANO
    if steps.denominator == 1:
        return value
    return (math.ceil(steps) if value > 0 else math.floor(steps)) * _NANO


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
        for suffix, size in reversed(_BINARY.items()):
            if number and number % size == 0:
                return f"{number // size}{suffix}"
        return str(number)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return f"{(value / _NANO).numerator}n"


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
