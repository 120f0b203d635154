from __future__ import annotations

import pytest
from vke_dra_policies.checks import cluster
from vke_gpu_dra_core import facts, vke_releases
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r
from vke_gpu_dra_core.versions import format_version

from .helpers import res

MIN_K8S = format_version(facts.MIN_KUBERNETES_VERSION)


def _cluster(**props: object) -> r.Res:
    return res(pt.CLUSTER, "vke-cluster", dict(props))


@pytest.mark.parametrize("version", ["1.34", "v1.34.2-vke.3", "v1.34.2"])
def test_lines_vke_documents_pass_as_written_or_as_vke_reports_its_build(version: str) -> None:
    assert cluster.kubernetes_version(_cluster(kubernetesVersion=version)) == []
    assert cluster.kubernetes_version_forced(_cluster(kubernetesVersion=version), forced=True) == []


@pytest.mark.parametrize(
    ("version", "line"),
    [("1.35", "1.35"), ("1.36", "1.36"), ("v1.36.0-vke.1", "1.36"), ("1.37", "1.37"), ("1.38", "1.38")],
)
def test_lines_vke_does_not_document_fail_with_the_documented_ones_and_the_force_key(
    version: str, line: str
) -> None:
    (v,) = cluster.kubernetes_version(_cluster(kubernetesVersion=version))
    assert v.message == (
        f'{pt.CLUSTER} "vke-cluster": kubernetesVersion "{version}" is Kubernetes {line}, which VKE\'s docs '
        "do not list; set kubernetesVersion to a line VKE documents for DRA: 1.34 (VKE's docs, "
        f"{vke_releases.VKE_DOCS.source}, checked {vke_releases.VKE_DOCS.checked}; DRA needs "
        "resource.k8s.io/v1), or set cluster.forceKubernetesVersion=true to ask VKE for a line 1.34 or "
        "later its docs do not list yet."
    )
    assert cluster.kubernetes_version_forced(_cluster(kubernetesVersion=version), forced=False) == []


@pytest.mark.parametrize(("version", "line"), [("1.37", "1.37"), ("v1.37.2-vke.1", "1.37"), ("1.38", "1.38")])
def test_a_forced_line_passes_and_gets_the_advisory(version: str, line: str) -> None:
    assert cluster.kubernetes_version(_cluster(kubernetesVersion=version), forced=True) == []
    (v,) = cluster.kubernetes_version_forced(_cluster(kubernetesVersion=version), forced=True)
    assert v.message.startswith(
        f'{pt.CLUSTER} "vke-cluster": kubernetesVersion "{version}" is Kubernetes {line}, which VKE\'s docs, '
        f"{vke_releases.VKE_DOCS.source}, checked {vke_releases.VKE_DOCS.checked} do not list; "
        "cluster.forceKubernetesVersion=true asks VKE for it anyway"
    )
    assert v.urn is not None and v.urn.endswith("::vke-cluster")


@pytest.mark.parametrize("version", ["1.33", "v1.30.5-vke.12", "latest", None, "", 1.34, r.UNKNOWN])
def test_forcing_never_takes_a_line_too_old_for_dra_nor_a_malformed_one(version: object) -> None:
    assert cluster.kubernetes_version_forced(_cluster(kubernetesVersion=version), forced=True) == []
    if version is not r.UNKNOWN:
        assert len(cluster.kubernetes_version(_cluster(kubernetesVersion=version), forced=True)) == 1


@pytest.mark.parametrize(
    ("version", "found"),
    [
        ("1.33", f'"1.33" is older than {MIN_K8S}'),
        ("1.4", f'"1.4" is older than {MIN_K8S}'),
        ("v1.30.5-vke.12", f"older than {MIN_K8S}"),
        ("latest", "is not a MAJOR.MINOR version"),
        (None, "is not set"),
        ("", "is not set"),
        (1.34, "is not a version string"),
    ],
)
def test_old_missing_or_malformed_versions_fail(version: object, found: str) -> None:
    (v,) = cluster.kubernetes_version(_cluster(kubernetesVersion=version))
    assert found in v.message
    assert f'{pt.CLUSTER} "vke-cluster"' in v.message
    assert "set kubernetesVersion" in v.message
    assert v.urn is not None and v.urn.endswith("::vke-cluster")


def test_unknown_version_during_preview_is_not_judged() -> None:
    assert cluster.kubernetes_version(_cluster(kubernetesVersion=r.UNKNOWN)) == []


def test_public_api_server_is_advised_against() -> None:
    public = _cluster(clusterConfig={"apiServerPublicAccessEnabled": True})
    (v,) = cluster.api_server_public(public)
    assert "0.0.0.0/0" in v.message and "disable public access" in v.message
    assert cluster.api_server_public(_cluster(clusterConfig={"apiServerPublicAccessEnabled": False})) == []
    assert cluster.api_server_public(_cluster()) == []
    assert (
        cluster.api_server_public(_cluster(clusterConfig={"apiServerPublicAccessEnabled": r.UNKNOWN})) == []
    )


def _rule(cidr: str, start: int, end: int, direction: str = "ingress") -> r.Res:
    return res(
        pt.SECURITY_GROUP_RULE,
        "rule",
        {"direction": direction, "cidrIp": cidr, "portStart": start, "portEnd": end},
    )


def test_security_group_rules_opening_6443_to_everyone() -> None:
    flagged = cluster.open_api_server_rules(
        [
            _rule("0.0.0.0/0", 6443, 6443),
            _rule("0.0.0.0/0", -1, -1),
            _rule("0.0.0.0/0", 1, 65535),
        ]
    )
    assert len(flagged) == 3
    assert "ports 6443-6443" in flagged[0].message
    quiet = cluster.open_api_server_rules(
        [
            _rule("10.0.0.0/8", 6443, 6443),
            _rule("0.0.0.0/0", 22, 22),
            _rule("0.0.0.0/0", -1, -1, "egress"),
        ]
    )
    assert quiet == []
