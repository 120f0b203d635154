"""The Kubernetes releases VKE offers for a DRA cluster, and how a stack names one.

VKE runs Kubernetes release lines and names each build `v<major>.<minor>.<patch>-vke.<n>` (`v1.34.2-vke.3`).
A cluster is created with its line, `1.37`: VKE picks the newest build of it and reports that build as the
cluster's `kubernetesVersion`; the volcengine provider treats the written line as unchanged while the
reported build contains it, so VKE's patch builds cause no diff. The field is replace-on-change
(ForceNew): a stack that writes another line asks for a new cluster, which is why a running cluster is
upgraded in VKE first (docs/upgrading.md).

`OFFERED` are the lines VKE offers from the DRA procedure's minimum on (`resource.k8s.io/v1`, 1.34); its
older lines (1.28 to 1.32) cannot run DRA. `problem` says what the stack key `cluster.kubernetesVersion`
allows for a value it refuses; the policy pack's `kubernetes-version` reads the same table.
"""

from __future__ import annotations

from typing import Final

from .facts import MIN_KUBERNETES_VERSION
from .versions import MajorMinor, format_version, parse_major_minor

#: The Kubernetes lines VKE offers for DRA clusters, oldest first.
OFFERED: Final[tuple[MajorMinor, ...]] = ((1, 34), (1, 37))
#: The program's default line: the VKE DRA procedure's.
DEFAULT: Final = OFFERED[0]
NEWEST: Final = OFFERED[-1]


def offered_text() -> str:
    """The offered lines as a stack writes them: `1.34, 1.37`."""
    return ", ".join(format_version(v) for v in OFFERED)


def is_offered(version: MajorMinor | None) -> bool:
    return version in OFFERED


def allowed_text() -> str:
    """The rule as the configuration reference shows it."""
    return (
        f"a Kubernetes line VKE offers for DRA ({format_version(MIN_KUBERNETES_VERSION)} or later), "
        f"major.minor: {offered_text()}"
    )


def problem(value: str) -> str | None:
    """What `cluster.kubernetesVersion` allows when `value` is not an offered line written as `major.minor`
    (None when it is); the text fits the value: a line VKE does not offer, a `v`, a patch or a VKE build."""
    offered = offered_text()
    parsed = parse_major_minor(value)
    if parsed is None:
        return f"{allowed_text()} (e.g. {format_version(DEFAULT)})"
    line = format_version(parsed)
    if not is_offered(parsed):
        why = (
            f"{line} cannot run DRA, which needs {format_version(MIN_KUBERNETES_VERSION)} or later"
            if parsed < MIN_KUBERNETES_VERSION
            else f"VKE does not offer {line}"
        )
        return f"one of the Kubernetes lines VKE offers for DRA, major.minor: {offered} ({why})"
    if value == line:
        return None
    if value == f"v{line}":
        return f"{line}, without the 'v' (VKE offers {offered}, written major.minor)"
    if value.strip() == line:
        return f"{line}, without blanks around it (VKE offers {offered})"
    return (
        f"{line} exactly, the line alone: VKE runs the newest {line} build itself, and a patch or build "
        f"written here would replace the cluster at VKE's next build (VKE offers {offered})"
    )
