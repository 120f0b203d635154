"""The VKE cluster: a Kubernetes line VKE offers for DRA (mandatory), a public API server (advisory)."""

from __future__ import annotations

from collections.abc import Iterable

from vke_gpu_dra_core import facts, vke_releases
from vke_gpu_dra_core import resources as r
from vke_gpu_dra_core.versions import format_version, parse_major_minor

from . import Violation

MIN_K8S = format_version(facts.MIN_KUBERNETES_VERSION)
API_SERVER_PORT = 6443
OPEN_CIDRS = ("0.0.0.0/0", "::/0")


def kubernetes_version(cluster: r.Res) -> list[Violation]:
    """The cluster runs a Kubernetes line VKE offers for DRA: 1.34 or later (the procedure's prerequisite),
    one of `vke_releases.OFFERED`; a build VKE reports (`v1.37.2-vke.1`) counts as its line."""
    version = cluster.get("kubernetesVersion")
    if version is r.UNKNOWN:
        return []
    problem = _version_problem(version)
    if problem is None:
        return []
    fix = (
        f"set kubernetesVersion to a line VKE offers for DRA: {vke_releases.offered_text()} "
        "(DRA needs resource.k8s.io/v1)"
    )
    return [Violation(f"{cluster.label}: {problem}; {fix}.", cluster.urn)]


def _version_problem(version: object) -> str | None:
    """What is wrong with the cluster's kubernetesVersion, or None."""
    if version is None or version == "":
        return "kubernetesVersion is not set, so VKE picks its default"
    if not isinstance(version, str):
        return f"kubernetesVersion {version!r} is not a version string"
    line = parse_major_minor(version)
    if line is None:
        return f'kubernetesVersion "{version}" is not a MAJOR.MINOR version'
    if line < facts.MIN_KUBERNETES_VERSION:
        return f'kubernetesVersion "{version}" is older than {MIN_K8S}'
    if not vke_releases.is_offered(line):
        return f'kubernetesVersion "{version}" is Kubernetes {format_version(line)}, which VKE does not offer'
    return None


def api_server_public(cluster: r.Res) -> list[Violation]:
    """Advisory: a public API server endpoint has no source-address restriction in VKE's cluster API."""
    enabled = r.truthy(cluster.get("clusterConfig", "apiServerPublicAccessEnabled"))
    if not enabled:
        return []
    return [
        Violation(
            f"{cluster.label}: clusterConfig.apiServerPublicAccessEnabled is true, so the API server is "
            "reachable from 0.0.0.0/0; disable public access and use the private kubeconfig (or restrict "
            "the control-plane security group) for stacks that do not need it.",
            cluster.urn,
        )
    ]


def open_api_server_rules(rules: Iterable[r.Res]) -> list[Violation]:
    """Advisory: security group rules opening the API server port to the whole internet."""
    out = []
    for rule in rules:
        direction, cidr = rule.get("direction"), rule.get("cidrIp")
        start, end = rule.get("portStart"), rule.get("portEnd")
        if direction != "ingress" or cidr not in OPEN_CIDRS:
            continue
        if not isinstance(start, int | float) or not isinstance(end, int | float):
            continue
        if start == -1 or start <= API_SERVER_PORT <= end:
            out.append(
                Violation(
                    f"{rule.label}: ingress from {cidr} on ports {int(start)}-{int(end)} opens the API "
                    f"server (port {API_SERVER_PORT}) to 0.0.0.0/0; restrict cidrIp to your office or CI "
                    "ranges.",
                    rule.urn,
                )
            )
    return out
