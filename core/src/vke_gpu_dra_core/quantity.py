"""Kubernetes `resource.Quantity` strings parsed exactly (`k8s.io/apimachinery/pkg/api/resource`).

The grammar and suffix tables of `resource.ParseQuantity`, kept exact with `fractions.Fraction`, so
`parse_quantity("200M") == parse_quantity("0.2G")` and `parse_quantity("50M") < parse_quantity("50Mi")`.
Values finer than the nano precision a Quantity keeps are rounded up (away from zero), as Quantity does.
Also the apiserver's conversions (`AsInt64`) and a readable form for messages.
Pure logic, standard library only: the driver's opaque configs and the operator tools' CEL values use it.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache
from typing import Final

#: Binary suffixes and their factors.
BINARY_SUFFIXES: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
#: Decimal suffixes (the empty suffix included) and their factors.
DECIMAL_SUFFIXES: Final = {
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
NANO: Final = Fraction(1, 10**9)
#: Decimal exponents beyond this are refused (apimachinery cannot hold them either).
MAX_EXPONENT: Final = 10_000
ALLOWED_QUANTITY_FORMS: Final = (
    "a decimal number with an optional suffix Ki, Mi, Gi, Ti, Pi, Ei (binary), n, u, m, k, M, G, T, P, E "
    "(decimal) or a decimal exponent e<N>/E<N>, e.g. 40Gi, 1.5G, 500m, 1e3"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


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
        if abs(power) > MAX_EXPONENT:
            raise QuantityError(f"quantity {text!r}: exponent {power} is out of range")
        value *= Fraction(10) ** power
    elif suffix in BINARY_SUFFIXES:
        value *= BINARY_SUFFIXES[suffix]
    else:
        value *= DECIMAL_SUFFIXES[suffix or ""]
    if sign == "-":
        value = -value
    return round_to_nano(value)


def round_to_nano(value: Fraction) -> Fraction:
    """Round away from zero to a multiple of 1n, as Quantity does with values below its precision."""
    steps = value / NANO
    if steps.denominator == 1:
        return value
    return (math.ceil(steps) if value > 0 else math.floor(steps)) * NANO


def quantity_value(text: str) -> int:
    """`Quantity.Value()`: the quantity rounded up to a whole number."""
    return math.ceil(parse_quantity(text))


# --- conversions and formatting (the apiserver's AsInt64, readable output) --------------------

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


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
