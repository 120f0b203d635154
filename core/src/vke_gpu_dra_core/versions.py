"""Release versions as VKE, containerd, Kubernetes and Helm write them, read as (major, minor).

One grammar, `[scheme://][v]MAJOR.MINOR` followed by the rest of the text, read by `split_version`;
what follows MINOR decides which form a version is in:

* loose, `parse_major_minor`: any scheme, `v` or `V`, `.PATCH`, a `-`/`+` suffix, blanks around it
  (`v1.34.2-vke.3`, `containerd://2.1.3`): versions as users and APIs write them;
* release, `release_major_minor`: exactly `[v]MAJOR.MINOR[.PATCH]` (`1.34`, `v1.34.2`, `25.8.1`), the
  form stack config's version keys take (blanks are the caller's to strip);
* runtime, `runtime_major_minor`: `<runtime>://[v]MAJOR.MINOR` then anything (a node's
  `containerd://2.1.3~ds1`), as kubelet reports the container runtime.

Minor parts are integers: `1.4` is (1, 4), older than (1, 34). Strict semantic versions (what CEL's
`semver()` accepts) are `semver`'s; the planner's feature-gate tables key on Kubernetes versions of
their own (`vke_gpu_dra_ops.capacity.versions`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = [
    "MajorMinor",
    "VersionText",
    "at_least",
    "format_version",
    "parse_major_minor",
    "release_major_minor",
    "release_matches",
    "runtime_major_minor",
    "split_version",
]

MajorMinor = tuple[int, int]

_HEAD_RE: Final = re.compile(r"(?:([a-z][a-z0-9+.-]*)://)?(v?)(\d+)\.(\d+)", re.IGNORECASE)
# What may follow MAJOR.MINOR, per form (`$` as in a whole-string match: a final newline is allowed).
_PATCH_RE: Final = re.compile(r"(?:\.\d+)?$")
_PATCH_SUFFIX_RE: Final = re.compile(r"(?:\.\d+)?(?:[-+].*)?$")


@dataclass(frozen=True)
class VersionText:
    """A version string split at MAJOR.MINOR, each part as written."""

    scheme: str | None  # "containerd" of containerd://2.1.3; None without `://`
    prefix: str  # "", "v" or "V"
    major: int
    minor: int
    rest: str  # everything after MINOR: "", ".3", ".2-vke.3", "~ds1"

    @property
    def major_minor(self) -> MajorMinor:
        return self.major, self.minor


def split_version(text: str) -> VersionText | None:
    """`text` read as `[scheme://][v]MAJOR.MINOR<rest>`; None when it does not start that way."""
    m = _HEAD_RE.match(text)
    if m is None:
        return None
    scheme, prefix, major, minor = m.groups()
    return VersionText(scheme, prefix, int(major), int(minor), text[m.end() :])


def parse_major_minor(raw: str) -> MajorMinor | None:
    """(major, minor) of a version as users and APIs write it; None when it is not
    `[scheme://][v]MAJOR.MINOR[.PATCH][-suffix|+suffix]` (blanks around it ignored).

    >>> parse_major_minor("1.34"), parse_major_minor("v1.34.2-vke.3"), parse_major_minor("containerd://2.1.3")
    ((1, 34), (1, 34), (2, 1))
    >>> parse_major_minor("latest") is None
    True
    """
    version = split_version(raw.strip())
    if version is None or not _PATCH_SUFFIX_RE.match(version.rest):
        return None
    return version.major_minor


def release_major_minor(text: str) -> MajorMinor | None:
    """(major, minor) of exactly `[v]MAJOR.MINOR[.PATCH]` (lower-case `v`, no scheme, no suffix, no
    blanks around it); None otherwise. Stack config's version keys are checked with it."""
    version = split_version(text)
    if version is None or version.scheme is not None or version.prefix not in ("", "v"):
        return None
    return version.major_minor if _PATCH_RE.match(version.rest) else None


def runtime_major_minor(runtime: str, runtime_type: str = "containerd") -> MajorMinor | None:
    """(major, minor) of a node's container runtime, `<runtime_type>://[v]MAJOR.MINOR…` as kubelet
    reports it (nodeInfo.containerRuntimeVersion); None for another runtime or an unreadable version."""
    version = split_version(runtime)
    if version is None or version.scheme != runtime_type or version.prefix not in ("", "v"):
        return None
    return version.major_minor


def release_matches(live: str | None, desired: str) -> bool:
    """True when `live` is a release of `desired`: `2.1` matches `2.1`, `2.1.4` and `v2.1.4`, not `2.10.0`."""
    if not live:
        return False
    live = live.removeprefix("v")
    return live == desired or live.startswith(desired + ".")


def format_version(version: MajorMinor) -> str:
    return f"{version[0]}.{version[1]}"


def at_least(raw: str, minimum: MajorMinor) -> bool | None:
    """True/False when `raw` parses (loose form); None when it does not (the caller reports the value)."""
    parsed = parse_major_minor(raw)
    return None if parsed is None else parsed >= minimum
