import itertools
from fractions import Fraction

import pytest
from vke_gpu_dra_core.quantity import (
    QuantityError,
    format_quantity,
    is_quantity,
    parse_quantity,
    quantity_as_int64,
)
from vke_gpu_dra_planner.semver import SemverError, parse_semver


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1Ki", 1024),
        ("1Mi", 2**20),
        ("40Gi", 40 * 2**30),
        ("1Ti", 2**40),
        ("1Pi", 2**50),
        ("2Ei", 2 * 2**60),
        ("1k", 1000),
        ("1M", 10**6),
        ("1G", 10**9),
        ("1T", 10**12),
        ("1P", 10**15),
        ("1E", 10**18),
        ("500m", Fraction(1, 2)),
        ("1.5Gi", 3 * 2**29),
        ("0.2G", 2 * 10**8),
        ("1e3", 1000),
        ("1E-3", Fraction(1, 1000)),
        ("12e+2", 1200),
        ("-5", -5),
        ("+7", 7),
        (".5", Fraction(1, 2)),
        ("3n", Fraction(3, 10**9)),
        ("1u", Fraction(1, 10**6)),
        ("81559Mi", 81559 * 2**20),
    ],
)
def test_quantity_suffixes_and_forms(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text", ["", "Mi", "200K", "1 Gi", "1,5G", "Three", "1e", "1.2.3", "1Gb", "--1", "1mi"]
)
def test_invalid_quantities_are_rejected_naming_the_value(text):
    assert not is_quantity(text)
    with pytest.raises(QuantityError, match="40Gi"):
        parse_quantity(text)


def test_precision_below_nano_rounds_up():
    assert parse_quantity("0.1n") == Fraction(1, 10**9)
    assert parse_quantity("-0.1n") == Fraction(-1, 10**9)


def test_decimal_and_binary_compare_exactly():
    assert parse_quantity("200M") == parse_quantity("0.2G")
    assert parse_quantity("50M") < parse_quantity("50Mi")


def test_as_int64_and_format():
    assert quantity_as_int64(parse_quantity("50k")) == 50000
    assert quantity_as_int64(parse_quantity("500m")) is None
    assert quantity_as_int64(parse_quantity("9999999999999999999999G")) is None
    assert format_quantity(parse_quantity("24Gi")) == "24Gi"
    assert format_quantity(parse_quantity("1500m")) == "1500m"


@pytest.mark.parametrize(
    "text", ["8.0.0", "0.0.0", "535.129.3", "1.2.3-rc.1", "1.2.3+build.05", "1.2.3-alpha-1.0+b"]
)
def test_strict_semver_accepts(text):
    assert str(parse_semver(text)) == text


@pytest.mark.parametrize(
    "text", ["8.0", "v1.2.3", "535.129.03", "01.2.3", "1.2.3-", "1.2.3-01", "1.2.3.4", "1..3"]
)
def test_strict_semver_rejects(text):
    with pytest.raises(SemverError, match=r"MAJOR\.MINOR\.PATCH|leading zero"):
        parse_semver(text)


def test_semver_precedence_ignores_build_and_ranks_prereleases():
    order = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "1.0.1",
        "1.10.0",
        "2.0.0",
    ]
    for low, high in itertools.pairwise(order):
        assert parse_semver(low).compare(parse_semver(high)) == -1
        assert parse_semver(high).compare(parse_semver(low)) == 1
    assert parse_semver("1.0.0+a").compare(parse_semver("1.0.0+b")) == 0
