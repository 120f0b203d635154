"""The VKE cluster: a Kubernetes line VKE documents for DRA (mandatory), a forced undocumented line and a
public API server (advisory)."""

from __future__ import annotations

from collections.abc import Iterable

from vke_gpu_dra_core import facts, vke_releases
from vke_gpu_dra_core import resources as r
from vke_gpu_dra_core.versions import format_version, parse_major_minor

from . import Violation

MIN_K8S = format_version(facts.MIN_KUBERNETES_VERSION)
API_SERVER_PORT = 6443
OPEN_CIDRS = ("0.0.0.0/0", "::/0")


def kubernetes_version(cluster: r.Res, forced: bool = False) -> list[Violation]:
    """The cluster runs a Kubernetes line VKE documents for DRA: 1.34 or later (the procedure's prerequisite),
    one of `vke_releases.OFFERED`; a build VKE reports (`v1.37.2-vke.1`) counts as its line. With the stack
    config's `cluster.forceKubernetesVersion` (`forced`) any line of 1.34 or later passes here, and
    `kubernetes_version_forced` warns about it."""
    version = cluster.get("kubernetesVersion")
    if version is r.UNKNOWN:
        return []
    problem = _version_problem(version, forced)
    if problem is None:
        return []
    fix = (
        f"set kubernetesVersion to a line VKE documents for DRA: {vke_releases.offered_text()} "
        f"({vke_releases.source_text()}; DRA needs resource.k8s.io/v1), or set "
        f"{vke_releases.FORCE_KEY}=true to ask VKE for a line 1.34 or later its docs do not list yet"
    )
    return [Violation(f"{cluster.label}: {problem}; {fix}.", cluster.urn)]


def kubernetes_version_forced(cluster: r.Res, forced: bool) -> list[Violation]:
    """Advisory: the stack forces a line of 1.34 or later that VKE's docs do not list."""
    version = cluster.get("kubernetesVersion")
    if not forced or not isinstance(version, str):
        return []
    line = parse_major_minor(version)
    if line is None or line < facts.MIN_KUBERNETES_VERSION or vke_releases.is_offered(line):
        return []
    return [
        Violation(
            f'{cluster.label}: kubernetesVersion "{version}" is Kubernetes {format_version(line)}, which '
            f"{vke_releases.source_text()} do not list; {vke_releases.FORCE_KEY}=true asks VKE for it "
            f"anyway, and VKE may refuse to create the cluster; use a documented line "
            f"({vke_releases.offered_text()}), or update vke_releases.VKE_DOCS once VKE documents "
            f"{format_version(line)}.",
            cluster.urn,
        )
    ]


def _version_problem(version: object, forced: bool) -> str | None:
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
    if not forced and not vke_releases.is_offered(line):
        return (
            f'kubernetesVersion "{version}" is Kubernetes {format_version(line)}, which VKE\'s docs do not '
            "list"
        )
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
