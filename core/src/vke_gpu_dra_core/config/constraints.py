"""The constraints a key's row declares, and the converters that turn a value into its field's type.

A constraint looks at one parsed value (a string, integer, boolean or list) and returns what is allowed
when the value breaks it (`problem`), else None; `doc` is the same rule as the configuration reference
shows it. Converters (labels, taints, feature gates) build a field's typed value and report each bad
part through `fail`.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from vke_gpu_dra_core import facts, featuregates, vke_releases
from vke_gpu_dra_core.object_names import is_dns_subdomain
from vke_gpu_dra_core.versions import release_major_minor

from .stack_config import Label, Taint

PRIVATE_RANGES: Final = tuple(
    ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
)
PRIVATE_TEXT: Final = "a CIDR inside 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16"

#: `major.minor[.patch]`, optionally with a leading `v` (which the checks then refuse).


class Constraint(Protocol):
    """One rule on a key's value (or on each item of a list)."""

    @property
    def doc(self) -> str: ...

    def problem(self, value: Any) -> str | None:
        """What is allowed, when `value` breaks the rule; None when it keeps it."""
        ...


@dataclass(frozen=True)
class Choices:
    values: tuple[Any, ...]

    @property
    def doc(self) -> str:
        return "one of " + ", ".join(str(c) for c in self.values)

    def problem(self, value: Any) -> str | None:
        return None if value in self.values else self.doc


@dataclass(frozen=True)
class IntRange:
    low: int
    high: int | None = None
    #: A value allowed besides the range (0: "none" for a disk size).
    also: int | None = None

    @property
    def doc(self) -> str:
        text = (
            f"an integer >= {self.low}" if self.high is None else f"an integer from {self.low} to {self.high}"
        )
        return text if self.also is None else f"{self.also}, or {text}"

    def problem(self, value: int) -> str | None:
        if value == self.also or (self.low <= value and (self.high is None or value <= self.high)):
            return None
        return (
            f"an integer >= {self.low}" if self.high is None else f"an integer from {self.low} to {self.high}"
        )


@dataclass(frozen=True)
class Pattern:
    """Text the regex matches (`re.match`), with an optional length range."""

    regex: re.Pattern[str]
    allowed: str
    min_len: int = 0
    max_len: int | None = None

    @property
    def doc(self) -> str:
        return self.allowed

    def problem(self, value: str) -> str | None:
        too_long = self.max_len is not None and len(value) > self.max_len
        if len(value) < self.min_len or too_long or not self.regex.match(value):
            return self.allowed
        return None


@dataclass(frozen=True)
class Required:
    """A non-empty string (or list); `allowed` says how to set it."""

    allowed: str

    @property
    def doc(self) -> str:
        return "not empty"

    def problem(self, value: Any) -> str | None:
        return None if value else self.allowed


def private_network(text: str) -> ipaddress.IPv4Network | None:
    """The network of a well-formed IPv4 CIDR inside the private ranges, else None."""
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError:
        return None
    if not isinstance(net, ipaddress.IPv4Network) or not any(net.subnet_of(p) for p in PRIVATE_RANGES):
        return None
    return net


@dataclass(frozen=True)
class PrivateCidr:
    @property
    def doc(self) -> str:
        return PRIVATE_TEXT

    def problem(self, value: str) -> str | None:
        try:
            ipaddress.ip_network(value, strict=True)
        except ValueError:
            return f"a well-formed IPv4 CIDR (network address/prefix), {PRIVATE_TEXT}"
        return None if private_network(value) is not None else PRIVATE_TEXT


@dataclass(frozen=True)
class AnyCidr:
    @property
    def doc(self) -> str:
        return "a well-formed CIDR such as 203.0.113.0/24"

    def problem(self, value: str) -> str | None:
        try:
            ipaddress.ip_network(value, strict=True)
        except ValueError:
            return self.doc
        return None


@dataclass(frozen=True)
class MinVersion:
    """A version at least `minimum`: exactly `major.minor`, or with `patch` also `major.minor.patch`."""

    minimum: tuple[int, int]
    #: What is allowed; `{minimum}` is replaced by the minimum as major.minor.
    allowed: str
    patch: bool = False

    @property
    def doc(self) -> str:
        return self.allowed.format(minimum=f"{self.minimum[0]}.{self.minimum[1]}")

    def problem(self, value: str) -> str | None:
        version = release_major_minor(value.strip())
        if self.patch:
            bad = version is None or version < self.minimum or value.startswith("v")
        else:
            bad = version is None or version < self.minimum or not re.fullmatch(r"\d+\.\d+", value)
        return self.doc if bad else None


@dataclass(frozen=True)
class OfferedKubernetesLine:
    """A Kubernetes line VKE documents for DRA, written `major.minor` (`vke_gpu_dra_core.vke_releases`).

    The key's own check takes any line of 1.34 or later so written; whether VKE documents it, or the stack
    forces it (`cluster.forceKubernetesVersion`), is a rule between the two keys (`reader.py`)."""

    @property
    def doc(self) -> str:
        return vke_releases.allowed_text()

    def problem(self, value: str) -> str | None:
        return vke_releases.problem(value, forced=True)


# --- converters ---------------------------------------------------------------------------------

Fail = Callable[[object, str], None]


@dataclass(frozen=True)
class Convert:
    """Turns a key's parsed value into its field's value, reporting each bad part with `fail`."""

    function: Callable[[Any, Fail], Any]
    doc: str


LABEL_NAME_RE: Final = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE_RE: Final = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")
TAINT_EFFECTS: Final = ("NoSchedule", "NoExecute", "PreferNoSchedule")


def _label_key_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and not is_dns_subdomain(prefix):
        return False
    return bool(LABEL_NAME_RE.match(name))


def _labels(items: Sequence[str], fail: Fail) -> tuple[Label, ...]:
    labels: list[Label] = []
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not _label_key_ok(k) or not LABEL_VALUE_RE.match(v):
            fail(item, "key=value with a valid Kubernetes label key and value")
            continue
        required = facts.REQUIRED_NODE_LABELS.get(k)
        if required is not None and v != required:
            fail(item, f"{k}={required} (the DRA procedure's value) or leave it out")
            continue
        labels.append(Label(k, v))
    return tuple(labels)


def _taints(items: Sequence[str], fail: Fail) -> tuple[Taint, ...]:
    taints: list[Taint] = []
    for item in items:
        kv, sep, effect = item.rpartition(":")
        k, _, v = kv.partition("=")
        if not sep or not _label_key_ok(k) or not LABEL_VALUE_RE.match(v) or effect not in TAINT_EFFECTS:
            fail(item, "key=value:Effect or key:Effect, Effect one of " + ", ".join(TAINT_EFFECTS))
            continue
        taints.append(Taint(k, v, effect))
    return tuple(taints)


def _feature_gates(text: str, fail: Fail) -> dict[str, bool]:
    if text.lstrip().startswith("{"):
        # A YAML map (the chart's featureGates form) reaches here as its JSON text.
        try:
            gates = json.loads(text)
        except ValueError:
            gates = None
        written = (
            ",".join(f"{k}={'true' if v else 'false'}" for k, v in gates.items())
            if isinstance(gates, dict)
            else "DynamicMIG=true"
        )
        fail(text, f"a string Name=true|false,..., not a map: write {written!r}")
        return {}
    try:
        values = featuregates.parse_explicit(text)
    except featuregates.FeatureGateError as exc:
        fail(text, f"Name=true|false,... with known gates ({exc})")
        return {}
    conflict = featuregates.conflicts(values)
    if conflict is not None:
        fail(text, f"gates that run together ({conflict})")
        return {}
    return values


LABELS: Final = Convert(
    _labels,
    "each key=value, a Kubernetes label; "
    + ", ".join(f"{k} only {v}" for k, v in facts.REQUIRED_NODE_LABELS.items()),
)
TAINTS: Final = Convert(
    _taints, "each key=value:Effect or key:Effect, Effect one of " + ", ".join(TAINT_EFFECTS)
)
FEATURE_GATES: Final = Convert(
    _feature_gates, "Name=true|false,... with gates of " + ", ".join(sorted(featuregates.DEFAULTS))
)
