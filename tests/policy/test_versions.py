from __future__ import annotations

import pytest
from vke_dra_policies.versions import at_least, parse_major_minor


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1.34", (1, 34)),
        ("v1.34.2-vke.3", (1, 34)),
        ("1.4", (1, 4)),
        ("1.35.0", (1, 35)),
        (" 2.1 ", (2, 1)),
        ("containerd://2.1.3", (2, 1)),
        ("2.1.0-rc.1", (2, 1)),
        ("V1.34", (1, 34)),
        ("latest", None),
        ("1", None),
        ("", None),
        ("1.x", None),
        ("1.34.2.7", None),
    ],
)
def test_parse_major_minor(raw: str, expected: tuple[int, int] | None) -> None:
    assert parse_major_minor(raw) == expected


@pytest.mark.parametrize(
    ("raw", "ok"),
    [
        ("1.34", True),
        ("v1.34.2-vke.3", True),
        ("1.35", True),
        ("2.0", True),
        ("1.33", False),
        ("1.4", False),
        ("v1.30.5-vke.12", False),
        ("main", None),
    ],
)
def test_at_least_compares_minor_numerically(raw: str, ok: bool | None) -> None:
    assert at_least(raw, (1, 34)) is ok
