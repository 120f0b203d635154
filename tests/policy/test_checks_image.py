"""The driver image validators on hand-built releases (digest pin, reachable registry, unknowns)."""

from __future__ import annotations

from typing import Any

import pytest
from vke_dra_policies.checks import image
from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r

from .helpers import res

DIGEST = "sha256:" + "ab" * 32
REPO = "cr1-cn-beijing.cr.volces.com/vke-gpu-dra/dra-gpu-kubelet-plugin"
CLUSTER = res(pt.CLUSTER, "vke-cluster", {"kubernetesVersion": "1.34"})


def release(values: Any, chart: str = "./driver/chart") -> r.Res:
    return res(pt.HELM_RELEASE, "dra-driver-release", {"chart": chart, "values": values})


def test_digest_pinned_release_passes_both_checks() -> None:
    stack = [CLUSTER, release({"image": {"repository": REPO, "digest": DIGEST}})]
    assert image.pinned_by_digest(stack) == []
    assert image.registry_reachable(stack) == []


def test_a_tag_is_not_a_pin() -> None:
    (v,) = image.pinned_by_digest([release({"image": {"repository": REPO, "tag": "0.1.0"}})])
    assert f"{REPO}:0.1.0" in v.message and "image.digest" in v.message
    assert v.urn == f"urn:pulumi:t::p::{pt.HELM_RELEASE}::dra-driver-release"


def test_no_image_values_fall_back_to_the_chart_placeholder() -> None:
    stack = [CLUSTER, release({})]
    (v,) = image.registry_reachable(stack)
    assert "registry.example.com/vke-gpu-dra/dra-gpu-kubelet-plugin" in v.message
    assert "placeholder domain" in v.message
    (pin,) = image.pinned_by_digest(stack)
    assert "the chart's appVersion tag" in pin.message


@pytest.mark.parametrize(
    ("repository", "vke", "bad"),
    [
        ("registry.example.org/x/y", False, True),
        ("example.com/x", True, True),
        ("cr.example.net/x", True, True),
        ("notexample.com/x", True, False),
        ("localhost/vke-gpu-dra/dra-gpu-kubelet-plugin", False, False),
        ("localhost:5000/x", True, True),
        ("busybox", True, False),
    ],
)
def test_registry_domains(repository: str, vke: bool, bad: bool) -> None:
    stack = ([CLUSTER] if vke else []) + [release({"image": {"repository": repository, "digest": DIGEST}})]
    assert bool(image.registry_reachable(stack)) is bad


def test_unknown_values_and_other_charts_are_not_judged() -> None:
    unknown = [CLUSTER, release(r.UNKNOWN), release({"image": {"repository": r.UNKNOWN, "digest": DIGEST}})]
    assert image.pinned_by_digest(unknown) == [] and image.registry_reachable(unknown) == []
    unknown_digest = [release({"image": {"repository": REPO, "digest": r.UNKNOWN}})]
    assert image.pinned_by_digest(unknown_digest) == []
    nvidia = [CLUSTER, release({}, chart=facts.NVIDIA_CHART)]
    assert image.pinned_by_digest(nvidia) == [] and image.registry_reachable(nvidia) == []
