"""Version strings as VKE, containerd and Kubernetes write them, compared as (major, minor)."""

from __future__ import annotations

import re
from typing import Final

# "1.34", "v1.34", "v1.34.2-vke.3", "containerd://2.1.3", "2.1.0-rc.1" -> (major, minor).
_VERSION_RE: Final = re.compile(
    r"^(?:[a-z][a-z0-9+.-]*://)?v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+].*)?$", re.IGNORECASE
)


def parse_major_minor(raw: str) -> tuple[int, int] | None:
    """(major, minor) of a version string, or None when it is not MAJOR.MINOR[.PATCH][-suffix].

    Minor parts are compared as integers, so "1.4" is (1, 4), older than (1, 34).

    >>> parse_major_minor("1.34"), parse_major_minor("v1.34.2-vke.3"), parse_major_minor("containerd://2.1.3")
    ((1, 34), (1, 34), (2, 1))
    >>> parse_major_minor("latest") is None
    True
    """
    match = _VERSION_RE.match(raw.strip())
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))


def format_version(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def at_least(raw: str, minimum: tuple[int, int]) -> bool | None:
    """True/False when `raw` parses; None when it does not (the caller reports the unparsable value)."""
    parsed = parse_major_minor(raw)
    return None if parsed is None else parsed >= minimum
