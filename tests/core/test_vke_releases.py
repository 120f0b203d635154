"""The Kubernetes lines VKE documents for DRA: one table, read by the stack config and the policy pack."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from vke_gpu_dra_core import facts, vke_releases
from vke_gpu_dra_core.versions import parse_major_minor

from tools import toolchain

DOCS = f"VKE's docs, {vke_releases.VKE_DOCS.source}, checked {vke_releases.VKE_DOCS.checked}"


def test_the_table_is_what_vke_documents_with_its_source_and_date() -> None:
    assert vke_releases.VKE_DOCS.lines == ((1, 30), (1, 32), (1, 34))
    assert vke_releases.VKE_DOCS.source.startswith("https://www.volcengine.com/docs/")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", vke_releases.VKE_DOCS.checked)
    assert vke_releases.source_text() == DOCS


def test_a_vke_stack_takes_the_documented_lines_that_run_dra() -> None:
    assert vke_releases.OFFERED == ((1, 34),)
    assert list(vke_releases.OFFERED) == sorted(set(vke_releases.OFFERED))
    assert vke_releases.OFFERED[0] >= facts.MIN_KUBERNETES_VERSION
    assert (vke_releases.DEFAULT, vke_releases.NEWEST) == ((1, 34), (1, 34))
    assert vke_releases.offered_text() == "1.34"


def test_our_own_clusters_run_the_toolchain_lines() -> None:
    """1.37 and 1.38 are the clusters we run ourselves (the toolchain's control planes and kubelets)."""
    assert tuple(parse_major_minor(v) for v in toolchain.KUBERNETES) == vke_releases.OWN_CLUSTERS
    assert set(vke_releases.OFFERED) <= set(vke_releases.OWN_CLUSTERS)


@pytest.mark.parametrize(
    ("written", "offered"),
    [("1.34", True), ("v1.34.2-vke.3", True), ("1.37", False), ("v1.37.2-vke.1", False), ("1.33", False)],
)
def test_a_build_vke_reports_counts_as_its_line(written: str, offered: bool) -> None:
    assert vke_releases.is_offered(parse_major_minor(written)) is offered


def test_is_offered_of_no_version_is_false() -> None:
    assert vke_releases.is_offered(None) is False


def test_a_documented_line_as_major_minor_has_no_problem() -> None:
    assert vke_releases.problem("1.34") is None
    assert vke_releases.problem("1.34", forced=True) is None


@pytest.mark.parametrize("value", ["1.35", "1.37", "1.38", "2.0"])
def test_a_forced_line_of_dra_age_has_no_problem(value: str) -> None:
    assert vke_releases.problem(value, forced=True) is None


NOT_LISTED = (
    "one of the Kubernetes lines VKE documents for DRA, major.minor: 1.34 ({line} is not in "
    f"{DOCS}; cluster.forceKubernetesVersion=true asks VKE for it anyway; a cluster of our own takes "
    "target=existing-cluster)"
)


@pytest.mark.parametrize(
    ("value", "forced", "allowed"),
    [
        ("1.37", False, NOT_LISTED.format(line="1.37")),
        ("1.36", False, NOT_LISTED.format(line="1.36")),
        ("v1.37", False, NOT_LISTED.format(line="1.37")),
        (
            "1.32",
            False,
            "one of the Kubernetes lines VKE documents for DRA, major.minor: 1.34 (1.32 cannot run DRA, "
            "which needs 1.34 or later)",
        ),
        (
            "1.32",
            True,
            "one of the Kubernetes lines VKE documents for DRA, major.minor: 1.34 (1.32 cannot run DRA, "
            "which needs 1.34 or later)",
        ),
        ("v1.34", False, "1.34, without the 'v' (a line is written major.minor)"),
        ("v1.37", True, "1.37, without the 'v' (a line is written major.minor)"),
        ("1.34 ", False, "1.34, without blanks around it"),
        (
            "1.37.2",
            True,
            "1.37 exactly, the line alone: VKE runs the newest 1.37 build itself, and a patch or build "
            "written here would replace the cluster at VKE's next build",
        ),
        (
            "1.x",
            False,
            "a Kubernetes line VKE documents for DRA (1.34 or later), major.minor: 1.34 "
            f"({DOCS}); another line 1.34 or later only with cluster.forceKubernetesVersion=true (e.g. 1.34)",
        ),
    ],
)
def test_a_refused_value_is_told_what_to_write(value: str, forced: bool, allowed: str) -> None:
    assert vke_releases.problem(value, forced=forced) == allowed


@pytest.mark.parametrize("doc", ["docs/environments.md", "docs/upgrading.md"])
def test_the_docs_name_the_list_its_source_and_the_day_it_was_checked(doc: str) -> None:
    """Updating `VKE_DOCS` is one line of code; this keeps the docs that describe the list in step."""
    text = " ".join((Path(__file__).resolve().parents[2] / doc).read_text().split())
    assert vke_releases.VKE_DOCS.source in text and f"checked {vke_releases.VKE_DOCS.checked}" in text
    assert "cluster.forceKubernetesVersion" in text
