"""The project's driver image: pinned by digest, and in a registry the nodes can pull from.

The image is read from the release of the project's chart as Helm merges its values
(`driver/chart/values.yaml` defaults, values files, `values`), so a release that sets no image
gets the chart's placeholder default and is caught. Reference grammar and placeholder domains
come from `vke_gpu_dra_core.imageref` (the program's config validation uses the same module).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vke_gpu_dra_core import imageref
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r

from . import Violation
from .driver import driver_releases, effective_values


def _image(release: r.Res) -> tuple[str, str, str] | None:
    """(repository, tag, digest) of the project's chart release; None while unknown."""
    values = effective_values(release, "python")
    if values is r.UNKNOWN:
        return None
    image = values.get("image")
    if image is r.UNKNOWN:
        return None
    image = image if isinstance(image, Mapping) else {}
    parts = [image.get(k) for k in ("repository", "tag", "digest")]
    if any(p is r.UNKNOWN for p in parts):
        return None
    repository, tag, digest = (p if isinstance(p, str) else "" for p in parts)
    return repository, tag, digest


def _python_releases(resources: list[r.Res]) -> list[r.Res]:
    return [res for res, kind in driver_releases(resources) if kind == "python"]


def creates_vke_cluster(resources: list[r.Res]) -> bool:
    """The stack runs on VKE nodes (it creates a cluster); otherwise it is a local/existing cluster."""
    return any(res.type == pt.CLUSTER for res in resources)


def pinned_by_digest(resources: list[r.Res], _config: Mapping[str, Any] | None = None) -> list[Violation]:
    """The project's driver image is `repository@sha256:…` (image.digest), not a movable tag."""
    out = []
    for release in _python_releases(resources):
        image = _image(release)
        if image is None:
            continue
        repository, tag, digest = image
        if digest:
            continue
        shown = f"{repository}:{tag}" if tag else f"{repository} (the chart's appVersion tag)"
        out.append(
            Violation(
                f"{release.label}: the driver image {shown} is not pinned by digest, so the DaemonSet can "
                "run a different image than the one reviewed; set image.digest (sha256:<64 hex>), which "
                "the program does when it builds the image, or driver.image=<repository>@sha256:<digest>.",
                release.urn,
            )
        )
    return out


def registry_reachable(resources: list[r.Res], _config: Mapping[str, Any] | None = None) -> list[Violation]:
    """The driver image's registry is not a placeholder domain (nor localhost outside a local cluster)."""
    local = not creates_vke_cluster(resources)
    out = []
    for release in _python_releases(resources):
        image = _image(release)
        if image is None:
            continue
        repository = image[0]
        problem = (
            imageref.domain_problem(imageref.registry_domain(repository), local_cluster=local)
            if repository
            else "the repository is empty"
        )
        if problem:
            out.append(
                Violation(
                    f"{release.label}: the driver image repository {repository!r} cannot be pulled: "
                    f"{problem}; "
                    "let the program build and push the image (driver.registry.name) or set driver.image to "
                    "an image in a registry the nodes can reach.",
                    release.urn,
                )
            )
    return out
