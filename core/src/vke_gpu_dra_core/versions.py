"""Release versions as VKE, containerd, Kubernetes and Helm write them, read as (major, minor).

One grammar, `[scheme://][v]MAJOR.MINOR[.PATCH][-suffix|+suffix]`, read in three forms:

* loose, `parse_major_minor`: any scheme, `v` or `V`, `.PATCH`, a `-`/`+` suffix, blanks around it
  (`v1.34.2-vke.3`, `containerd://2.1.3`): versions as users and APIs write them;
* release, `release_major_minor`: exactly `[v]MAJOR.MINOR[.PATCH]` (`1.34`, `v1.34.2`, `25.8.1`), the
  form stack config's version keys take (blanks are the caller's to strip);
* runtime, `runtime_major_minor`: `<runtime>://[v]MAJOR.MINOR` then anything (a node's
  `containerd://2.1.3~ds1`), as kubelet reports the container runtime.

Minor parts are integers: `1.4` is (1, 4), older than (1, 34). Strict semantic versions (what CEL's
`semver()` accepts) are the capacity planner's (`vke_gpu_dra_planner.semver`), and so are its
feature-gate tables keyed on Kubernetes versions (`vke_gpu_dra_planner.gates`).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "MajorMinor",
    "at_least",
    "format_version",
    "parse_major_minor",
    "release_major_minor",
    "release_matches",
    "runtime_major_minor",
]

MajorMinor = tuple[int, int]

# The grammar's parts; `$` ends a whole-string match (a final newline is allowed, as `re` has it).
_SCHEME: Final = r"(?:(?P<scheme>[a-z][a-z0-9+.-]*)://)"
_NUMBERS: Final = r"v?(?P<major>\d+)\.(?P<minor>\d+)"
_PATCH: Final = r"(?:\.\d+)?"
_SUFFIX: Final = r"(?:[-+].*)?"
_LOOSE_RE: Final = re.compile(rf"^{_SCHEME}?{_NUMBERS}{_PATCH}{_SUFFIX}$", re.IGNORECASE)
_RELEASE_RE: Final = re.compile(rf"^{_NUMBERS}{_PATCH}$")
_RUNTIME_RE: Final = re.compile(rf"^{_SCHEME}{_NUMBERS}")


def _major_minor(match: re.Match[str] | None) -> MajorMinor | None:
    return None if match is None else (int(match["major"]), int(match["minor"]))


def parse_major_minor(raw: str) -> MajorMinor | None:
    """(major, minor) of a version as users and APIs write it; None when it is not
    `[scheme://][v]MAJOR.MINOR[.PATCH][-suffix|+suffix]` (blanks around it ignored).

    >>> parse_major_minor("1.34"), parse_major_minor("v1.34.2-vke.3"), parse_major_minor("containerd://2.1.3")
    ((1, 34), (1, 34), (2, 1))
    >>> parse_major_minor("latest") is None
    True
    """
    return _major_minor(_LOOSE_RE.match(raw.strip()))


def release_major_minor(text: str) -> MajorMinor | None:
    """(major, minor) of exactly `[v]MAJOR.MINOR[.PATCH]` (lower-case `v`, no scheme, no suffix, no
    blanks around it); None otherwise. Stack config's version keys are checked with it."""
    return _major_minor(_RELEASE_RE.match(text))


def runtime_major_minor(runtime: str, runtime_type: str = "containerd") -> MajorMinor | None:
    """(major, minor) of a node's container runtime, `<runtime_type>://[v]MAJOR.MINOR…` as kubelet
    reports it (nodeInfo.containerRuntimeVersion); None for another runtime or an unreadable version."""
    match = _RUNTIME_RE.match(runtime)
    return _major_minor(match) if match is not None and match["scheme"] == runtime_type else None


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
