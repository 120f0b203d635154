from __future__ import annotations

import pytest
from vke_gpu_dra_core.versions import (
    at_least,
    format_version,
    parse_major_minor,
    release_major_minor,
    release_matches,
    runtime_major_minor,
)


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
        ("v1.2+a://3.4x", (1, 2)),  # the scheme is optional: read without one when that fits
        ("v1.2+a://3.4", (3, 4)),
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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.34", (1, 34)),
        ("v1.34", (1, 34)),
        ("1.34.2", (1, 34)),
        ("25.8.1", (25, 8)),
        ("1.4", (1, 4)),
        ("1.34\n", (1, 34)),  # a whole-string match allows a final newline, as stack config's check did
        (" 1.34", None),  # blanks are the caller's to strip
        ("V1.34", None),
        ("1.34.2-vke.3", None),
        ("1.34+build", None),
        ("containerd://2.1", None),
        ("1.34.2.7", None),
        ("1.34.", None),
        ("1", None),
        ("", None),
        ("latest", None),
    ],
)
def test_release_form_is_exactly_v_major_minor_patch(text: str, expected: tuple[int, int] | None) -> None:
    assert release_major_minor(text) == expected


@pytest.mark.parametrize(
    ("runtime", "expected"),
    [
        ("containerd://2.1.3", (2, 1)),
        ("containerd://v2.1.3", (2, 1)),
        ("containerd://1.7.27-vke.1", (1, 7)),
        ("containerd://2.1.3~ds1", (2, 1)),  # distribution builds: whatever follows MINOR is theirs
        ("containerd://2.10", (2, 10)),
        ("containerd://V2.1", None),
        ("Containerd://2.1", None),
        ("docker://2.1", None),
        ("cri-o://1.34.1", None),
        ("2.1.3", None),
        ("containerd://", None),
        ("", None),
    ],
)
def test_runtime_form_needs_the_runtime_scheme(runtime: str, expected: tuple[int, int] | None) -> None:
    assert runtime_major_minor(runtime) == expected


def test_runtime_form_takes_another_runtime_type() -> None:
    assert runtime_major_minor("cri-o://1.34.1", "cri-o") == (1, 34)
    assert runtime_major_minor("containerd://2.1.3", "cri-o") is None


@pytest.mark.parametrize(
    ("live", "desired", "expected"),
    [
        ("2.1", "2.1", True),
        ("2.1.4", "2.1", True),
        ("v2.1.4", "2.1", True),
        ("2.1.4", "2.1.4", True),
        ("2.10.0", "2.1", False),
        ("2.0.5", "2.1", False),
        ("", "2.1", False),
        (None, "2.1", False),
    ],
)
def test_release_matches(live: str | None, desired: str, expected: bool) -> None:
    assert release_matches(live, desired) is expected


def test_format_version() -> None:
    assert format_version((1, 34)) == "1.34"
    assert parse_major_minor(format_version((2, 1))) == (2, 1)
