"""The Kubernetes lines VKE offers for DRA: one table, read by the stack config and the policy pack."""

from __future__ import annotations

import pytest
from vke_gpu_dra_core import facts, vke_releases
from vke_gpu_dra_core.versions import parse_major_minor


def test_the_table_lists_dra_capable_lines_oldest_first() -> None:
    assert vke_releases.OFFERED == ((1, 34), (1, 37))
    assert list(vke_releases.OFFERED) == sorted(set(vke_releases.OFFERED))
    assert vke_releases.OFFERED[0] >= facts.MIN_KUBERNETES_VERSION
    assert (vke_releases.DEFAULT, vke_releases.NEWEST) == ((1, 34), (1, 37))
    assert vke_releases.offered_text() == "1.34, 1.37"


@pytest.mark.parametrize(
    ("written", "offered"),
    [("1.37", True), ("v1.37.2-vke.1", True), ("v1.34.2-vke.3", True), ("1.36", False), ("1.33", False)],
)
def test_a_build_vke_reports_counts_as_its_line(written: str, offered: bool) -> None:
    assert vke_releases.is_offered(parse_major_minor(written)) is offered


def test_is_offered_of_no_version_is_false() -> None:
    assert vke_releases.is_offered(None) is False


@pytest.mark.parametrize("value", ["1.34", "1.37"])
def test_an_offered_line_as_major_minor_has_no_problem(value: str) -> None:
    assert vke_releases.problem(value) is None


@pytest.mark.parametrize(
    ("value", "allowed"),
    [
        (
            "1.36",
            "one of the Kubernetes lines VKE offers for DRA, major.minor: 1.34, 1.37 "
            "(VKE does not offer 1.36)",
        ),
        (
            "1.32",
            "one of the Kubernetes lines VKE offers for DRA, major.minor: 1.34, 1.37 (1.32 cannot run DRA, "
            "which needs 1.34 or later)",
        ),
        ("v1.37", "1.37, without the 'v' (VKE offers 1.34, 1.37, written major.minor)"),
        ("1.37 ", "1.37, without blanks around it (VKE offers 1.34, 1.37)"),
        (
            "1.37.2",
            "1.37 exactly, the line alone: VKE runs the newest 1.37 build itself, and a patch or build "
            "written here would replace the cluster at VKE's next build (VKE offers 1.34, 1.37)",
        ),
        ("1.x", "a Kubernetes line VKE offers for DRA (1.34 or later), major.minor: 1.34, 1.37 (e.g. 1.34)"),
    ],
)
def test_a_refused_value_is_told_what_to_write(value: str, allowed: str) -> None:
    assert vke_releases.problem(value) == allowed
