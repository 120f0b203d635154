"""Which devices a selector accepts, with results cached per device where the semantics allow.

A selector observes a device only through the attribute and capacity ids it names. When every access in
the expression is a literal lookup (`device.attributes['d'].id`, `device.capacity['d']['id']`,
`'id' in device.attributes['d']`, `device.driver`), two devices that agree on those ids give the same
result, so the result is cached under that projection: the 8 GPUs of a node, and every node of a pool,
share one evaluation. Any other use of `device` (iterating a map, `cel.bind`, computed keys) falls back to
a cache per device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from vke_gpu_dra_core.device_model import Device

from .cel.environment import (
    CompiledSelector,
    DeviceContext,
    SelectorRuntimeError,
    compile_selector,
    device_variable,
)
from .inventory import Node

_LIT: Final = r"""(?:'([^'\\]*)'|"([^"\\]*)")"""
_DEVICE_RE: Final = re.compile(r"(?<![\w.])device\b")
_DRIVER_RE: Final = re.compile(r"\s*\.\s*driver\b(?!\s*\()")
_MAP_RE: Final = re.compile(rf"\s*\.\s*(attributes|capacity)\s*\[\s*{_LIT}\s*\]")
_FIELD_RE: Final = re.compile(rf"\s*(?:\.\s*([A-Za-z_]\w*)\b(?!\s*\()|\[\s*{_LIT}\s*\])")
_IN_BEFORE_RE: Final = re.compile(rf"{_LIT}\s+in\s+$")
_MISSING: Final = ("<missing>",)

Observed = frozenset[tuple[str, str, str]]


def observed_ids(expression: str) -> Observed | None:
    """(kind, domain, id) a selector can observe, or None when it uses `device` in another way."""
    seen: set[tuple[str, str, str]] = set()
    for match in _DEVICE_RE.finditer(expression):
        rest = match.end()
        if _DRIVER_RE.match(expression, rest):
            continue
        lookup = _MAP_RE.match(expression, rest)
        if lookup is None:
            return None
        kind, domain = lookup.group(1), lookup.group(2) or lookup.group(3)
        inner = _FIELD_RE.match(expression, lookup.end())
        if inner is not None:
            seen.add((kind, domain, inner.group(1) or inner.group(2) or inner.group(3)))
            continue
        before = _IN_BEFORE_RE.search(expression[: match.start()])
        after = expression[lookup.end() :].lstrip()
        if before is not None and not after.startswith((".", "[")):
            seen.add((kind, domain, before.group(1) or before.group(2)))
            continue
        return None
    return frozenset(seen)


class DeviceView:
    """A device as selectors see it; the CEL context is built only when an evaluation needs it."""

    __slots__ = ("_context", "_keys", "_variable", "device", "driver", "key")

    def __init__(self, driver: str, device: Device, key: str) -> None:
        self.driver = driver
        self.device = device
        self.key = key
        self._variable: dict[str, object] | None = None
        self._context: DeviceContext | None = None
        #: cache key per expression (see SelectorCache.cache_key)
        self._keys: dict[str, tuple[object, ...]] = {}

    @property
    def variable(self) -> dict[str, object]:
        if self._variable is None:
            self._variable = device_variable(self.driver, self.device)
        return self._variable

    @property
    def context(self) -> DeviceContext:
        if self._context is None:
            self._context = DeviceContext(self.driver, self.device)
        return self._context

    def project(self, observed: Observed) -> tuple[object, ...]:
        variable = self.variable
        parts: list[object] = [self.driver]
        for kind, domain, ident in sorted(observed):
            values = variable[kind].get(domain, {})  # type: ignore[attr-defined]
            value = values.get(ident, _MISSING)
            parts.append((kind, domain, ident, repr(value)))
        return tuple(parts)


@dataclass
class SelectionStats:
    #: selector checks asked for (cache hits included)
    checks: int = 0
    #: CEL evaluations actually run
    evaluations: int = 0
    #: NodeAllocator.allocate() calls
    allocations: int = 0
    #: allocators (one node each) that ran at least one allocate()
    nodes_searched: int = 0
    #: steps of the allocators' searches
    search_steps: int = 0


class SelectorCache:
    """Compiled selectors and their per-device results for one planning run."""

    def __init__(self) -> None:
        self._results: dict[tuple[object, ...], bool | SelectorRuntimeError] = {}
        self._observed: dict[str, Observed | None] = {}
        self._views: dict[tuple[str, str, int], tuple[object, list[DeviceView]]] = {}
        self.stats = SelectionStats()

    def compiled(self, expression: str) -> CompiledSelector:
        return compile_selector(expression)

    def views(self, node: Node) -> list[DeviceView]:
        """The node's devices as selectors see them (shared by every allocator of this run)."""
        # variants of one pool (several instance types) share node names: the devices tell them apart
        key = (node.pool, node.name, len(node.devices))
        stored = self._views.get(key)
        if stored is None or stored[0] is not node.devices:
            stored = (
                node.devices,
                [DeviceView(node.driver, d, f"{node.name}/{d.name}") for d in node.devices],
            )
            self._views[key] = stored
        return stored[1]

    def cache_key(self, expression: str, view: DeviceView) -> tuple[object, ...]:
        key = view._keys.get(expression)
        if key is not None:
            return key
        if expression not in self._observed:
            self._observed[expression] = observed_ids(expression)
        observed = self._observed[expression]
        key = (expression, "device", view.key) if observed is None else (expression, *view.project(observed))
        view._keys[expression] = key
        return key

    def matches(self, expression: str, view: DeviceView) -> bool:
        """True/False; raises SelectorRuntimeError (cached like a result)."""
        self.stats.checks += 1
        key = self.cache_key(expression, view)
        result = self._results.get(key)
        if result is None:
            self.stats.evaluations += 1
            try:
                result = self.compiled(expression).evaluate(view.context)
            except SelectorRuntimeError as exc:
                result = exc
            self._results[key] = result
        if isinstance(result, SelectorRuntimeError):
            raise result
        return result
