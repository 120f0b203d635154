"""The Kubernetes lines VKE documents, the ones a VKE stack takes for DRA, and how a stack names one.

VKE runs Kubernetes release lines and names each build `v<major>.<minor>.<patch>-vke.<n>` (`v1.34.2-vke.3`).
A cluster is created with its line, `1.34`: VKE picks the newest build of it and reports that build as the
cluster's `kubernetesVersion`; the volcengine provider treats the written line as unchanged while the
reported build contains it, so VKE's patch builds cause no diff. The field is replace-on-change
(ForceNew): a stack that writes another line asks for a new cluster, which is why a running cluster is
upgraded in VKE first (docs/upgrading.md).

`VKE_DOCS` is what VKE's own documentation lists, with where and when it was read: the one line to update
when VKE documents another line. `OFFERED` are its lines from the DRA procedure's minimum on
(`resource.k8s.io/v1`, 1.34); the older ones (1.30, 1.32) cannot run DRA. A VKE stack takes an offered
line; a line VKE does not document yet (1.34 or later) only with `cluster.forceKubernetesVersion: true`,
which the policy pack's `kubernetes-version-forced` warns about. `OWN_CLUSTERS` are the lines of the
clusters we run ourselves (the toolchain's control planes, the node in a box, kind, an existing cluster:
`target: existing-cluster`), 1.37 and 1.38 among them. `problem` says what the stack key
`cluster.kubernetesVersion` allows for a value it refuses; the policy pack's `kubernetes-version` reads the
same table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .facts import MIN_KUBERNETES_VERSION
from .versions import MajorMinor, format_version, parse_major_minor

#: The key that asks VKE for a line its docs do not list yet.
FORCE_KEY: Final = "cluster.forceKubernetesVersion"


@dataclass(frozen=True)
class Documented:
    """The Kubernetes lines a documentation page lists, oldest first, read from `source` on `checked`."""

    lines: tuple[MajorMinor, ...]
    source: str
    checked: str


#: Where VKE documents its Kubernetes lines (VKE's documentation; its Kubernetes version release notes).
VKE_DOCS_URL: Final = "https://www.volcengine.com/docs/6460"
#: VKE's documented Kubernetes lines (its Kubernetes version release notes). Pages about "VKE 1.36" are
#: Vultr's Kubernetes Engine, not Volcengine's. Update this line when VKE documents another one.
VKE_DOCS: Final = Documented(((1, 30), (1, 32), (1, 34)), VKE_DOCS_URL, checked="2026-12-06")
#: The lines VKE documents that can run DRA: what a VKE stack takes, oldest first.
OFFERED: Final[tuple[MajorMinor, ...]] = tuple(v for v in VKE_DOCS.lines if v >= MIN_KUBERNETES_VERSION)
#: The program's default line: the VKE DRA procedure's.
DEFAULT: Final = OFFERED[0]
NEWEST: Final = OFFERED[-1]
#: The lines of the clusters we run ourselves (tools/toolchain.py builds their control planes and kubelets;
#: kind and an existing cluster with target=existing-cluster), oldest first.
OWN_CLUSTERS: Final[tuple[MajorMinor, ...]] = ((1, 34), (1, 37), (1, 38))


def offered_text() -> str:
    """The offered lines as a stack writes them: `1.34`."""
    return ", ".join(format_version(v) for v in OFFERED)


def source_text() -> str:
    """Where the list comes from: `VKE's docs, https://..., checked 2026-12-06`."""
    return f"VKE's docs, {VKE_DOCS.source}, checked {VKE_DOCS.checked}"


def is_offered(version: MajorMinor | None) -> bool:
    return version in OFFERED


def allowed_text() -> str:
    """The rule as the configuration reference shows it."""
    return (
        f"a Kubernetes line VKE documents for DRA ({format_version(MIN_KUBERNETES_VERSION)} or later), "
        f"major.minor: {offered_text()} ({source_text()}); another line "
        f"{format_version(MIN_KUBERNETES_VERSION)} or later only with {FORCE_KEY}=true"
    )


def problem(value: str, forced: bool = False) -> str | None:  # noqa: PLR0911 (one return per case)
    """What `cluster.kubernetesVersion` allows when `value` is not an offered line written as `major.minor`
    (None when it is, or when `forced` and it is a line of 1.34 or later so written); the text fits the
    value: a line VKE does not document, one too old for DRA, a `v`, a patch or a VKE build."""
    offered = offered_text()
    parsed = parse_major_minor(value)
    if parsed is None:
        return f"{allowed_text()} (e.g. {format_version(DEFAULT)})"
    line = format_version(parsed)
    if parsed < MIN_KUBERNETES_VERSION:
        return (
            f"one of the Kubernetes lines VKE documents for DRA, major.minor: {offered} ({line} cannot run "
            f"DRA, which needs {format_version(MIN_KUBERNETES_VERSION)} or later)"
        )
    if not forced and not is_offered(parsed):
        return (
            f"one of the Kubernetes lines VKE documents for DRA, major.minor: {offered} ({line} is not in "
            f"{source_text()}; {FORCE_KEY}=true asks VKE for it anyway; a cluster of our own takes "
            "target=existing-cluster)"
        )
    if value == line:
        return None
    if value == f"v{line}":
        return f"{line}, without the 'v' (a line is written major.minor)"
    if value.strip() == line:
        return f"{line}, without blanks around it"
    return (
        f"{line} exactly, the line alone: VKE runs the newest {line} build itself, and a patch or build "
        "written here would replace the cluster at VKE's next build"
    )
