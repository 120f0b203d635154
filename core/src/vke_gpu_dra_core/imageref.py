"""OCI image references: parsing, validation and the registry domains no cluster can pull from.

One source of truth for the stack config validation (`vke_gpu_dra_core.config`) and the
policy pack (`policy/vke_dra_policies/checks/image.py`). The grammar is the distribution
reference grammar (github.com/distribution/reference): `[domain[:port]/]path[:tag][@digest]`,
path components lower case, a tag of at most 128 word characters, `.` and `-`, and a digest
`sha256:` followed by 64 lower-case hex digits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

#: Registry domains that are placeholders (RFC 2606 example domains) and never hold the driver image.
PLACEHOLDER_DOMAINS: Final = ("example.com", "example.org", "example.net")
#: Registry domains that only the machine itself can reach (allowed only for a local cluster).
LOCAL_DOMAINS: Final = ("localhost", "127.0.0.1")

_COMPONENT: Final = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART: Final = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_RE: Final = re.compile(rf"^{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?$")
_PATH_RE: Final = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG_RE: Final = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST_RE: Final = re.compile(r"^sha256:[a-f0-9]{64}$")


@dataclass(frozen=True)
class ImageReference:
    """A parsed reference: `repository` (with its domain), and a tag and/or a digest."""

    repository: str
    tag: str = ""
    digest: str = ""

    @property
    def domain(self) -> str:
        """The registry domain (without port); `docker.io` when the reference names none."""
        return registry_domain(self.repository)

    def __str__(self) -> str:
        text = self.repository
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


class ImageReferenceError(ValueError):
    """A reference that is not a valid OCI image reference; the message says why."""


def registry_domain(repository: str) -> str:
    """Domain of a repository as container runtimes resolve it (docker.io for `busybox`)."""
    first, sep, _rest = repository.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first.rsplit(":", 1)[0].lower() if not first.startswith("[") else first
    return "docker.io"


def parse(text: str) -> ImageReference:
    """Parse `text` or raise ImageReferenceError naming the part that is wrong."""
    if not text or text != text.strip():
        raise ImageReferenceError("an image reference without spaces, e.g. registry/path:tag")
    name, at, digest = text.partition("@")
    if at and not _DIGEST_RE.match(digest):
        raise ImageReferenceError(f"digest {digest!r} is not sha256: followed by 64 lower-case hex digits")
    repository, tag = name, ""
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        repository, tag = name.rsplit(":", 1)
        if not _TAG_RE.match(tag):
            raise ImageReferenceError(f"tag {tag!r} is not 1-128 letters, digits, '_', '.' or '-'")
    first, sep, rest = repository.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        if not _DOMAIN_RE.match(first):
            raise ImageReferenceError(f"registry {first!r} is not a host name with an optional port")
        path = rest
    else:
        path = repository
    if not _PATH_RE.match(path):
        raise ImageReferenceError(
            f"repository path {path!r} must be lower-case components of letters and digits "
            "separated by '/', '.', '_' or '-'"
        )
    if not tag and not digest:
        raise ImageReferenceError("a tag (repo:tag) or a digest (repo@sha256:...) is required")
    return ImageReference(repository=repository, tag=tag, digest=digest)


def domain_problem(domain: str, *, local_cluster: bool) -> str | None:
    """Why a cluster cannot pull from `domain`, or None when it can."""
    host = domain.lower()
    for placeholder in PLACEHOLDER_DOMAINS:
        if host == placeholder or host.endswith(f".{placeholder}"):
            return f"{domain} is a placeholder domain (RFC 2606), no registry serves it"
    if host in LOCAL_DOMAINS and not local_cluster:
        return f"{domain} is the local machine, which the cluster's nodes cannot reach"
    return None
