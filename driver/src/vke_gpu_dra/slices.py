"""Desired ResourceSlices for this node and the plan to get there (pure; no I/O).

One pool named after the node holds every device; slices carry at most 128 devices, so larger
pools are split. The pool generation goes up on every change, so consumers only ever combine
slices of one consistent publication. Annotations the plugin manages (`annotations`, the health of
devices for operators) are set on every slice of the pool; a managed key that is not wanted is removed.

A `layout` (dynamic MIG's partitionable devices, `partitions.publish.slice_layout`) replaces the plain
chunking: it turns the entries into the slices' contents, `{"devices": [...]}` with or without
`{"sharedCounters": [...]}` (KEP-4815 counter sets).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .kubeapi import SLICE_API_VERSION

#: resource.k8s.io/v1 ResourceSliceMaxDevices.
MAX_DEVICES_PER_SLICE = 128

#: Entries -> the contents of the pool's slices: {"devices": [...]} and optionally {"sharedCounters": [...]}.
Layout = Callable[[Sequence[Mapping[str, Any]]], list[dict[str, Any]]]


def chunk_devices(
    entries: Sequence[dict[str, Any]], size: int = MAX_DEVICES_PER_SLICE
) -> list[list[dict[str, Any]]]:
    """Split device entries into slices of at most `size`; always at least one (possibly empty) slice."""
    if size <= 0:
        raise ValueError("slice size must be positive")
    chunks = [list(entries[i : i + size]) for i in range(0, len(entries), size)]
    return chunks or [[]]


def slice_spec(
    *,
    driver: str,
    node_name: str,
    devices: Sequence[dict[str, Any]],
    generation: int,
    slice_count: int,
    shared_counters: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The `spec` of one ResourceSlice of this node's pool.

    `devices` (and `sharedCounters`) are left out when empty, as the apiserver returns them (the fields
    are `omitempty`), so a stored empty slice compares equal to the one wanted.
    """
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": node_name, "generation": generation, "resourceSliceCount": slice_count},
        "nodeName": node_name,
    }
    if shared_counters:
        spec["sharedCounters"] = [copy.deepcopy(c) for c in shared_counters]
    if devices:
        spec["devices"] = [copy.deepcopy(d) for d in devices]
    return spec


def _contents(
    entries: Sequence[dict[str, Any]], max_per_slice: int, layout: Layout | None
) -> list[dict[str, Any]]:
    if layout is not None:
        return layout(entries)
    return [{"devices": c} for c in chunk_devices(entries, max_per_slice)]


def _content_of(spec: Mapping[str, Any]) -> dict[str, Any]:
    content: dict[str, Any] = {"devices": spec.get("devices", [])}
    if spec.get("sharedCounters"):
        content["sharedCounters"] = spec["sharedCounters"]
    return content


def _spec(
    content: Mapping[str, Any], *, driver: str, node_name: str, generation: int, slice_count: int
) -> dict[str, Any]:
    return slice_spec(
        driver=driver,
        node_name=node_name,
        devices=content.get("devices", []),
        generation=generation,
        slice_count=slice_count,
        shared_counters=content.get("sharedCounters", ()),
    )


def desired_specs(
    *,
    driver: str,
    node_name: str,
    entries: Sequence[dict[str, Any]],
    generation: int,
    max_per_slice: int = MAX_DEVICES_PER_SLICE,
    layout: Layout | None = None,
) -> list[dict[str, Any]]:
    """All slice specs of the pool at `generation`."""
    contents = _contents(entries, max_per_slice, layout)
    return [
        _spec(c, driver=driver, node_name=node_name, generation=generation, slice_count=len(contents))
        for c in contents
    ]


def owner_reference(node_name: str, node_uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}


def generate_name(driver: str, node_name: str) -> str:
    return f"{node_name}-{driver}-"


def with_annotations(
    obj: dict[str, Any], annotations: Mapping[str, str], managed: Sequence[str]
) -> dict[str, Any]:
    """`obj` (changed in place) with the `managed` annotation keys set as `annotations` says."""
    current = dict(obj["metadata"].get("annotations") or {})
    for key in managed:
        current.pop(key, None)
    current.update(annotations)
    if current:
        obj["metadata"]["annotations"] = current
    else:
        obj["metadata"].pop("annotations", None)
    return obj


def annotations_match(obj: dict[str, Any], annotations: Mapping[str, str], managed: Sequence[str]) -> bool:
    current = obj.get("metadata", {}).get("annotations") or {}
    return all(current.get(key) == annotations.get(key) for key in {*managed, *annotations})


def new_slice(spec: dict[str, Any], *, driver: str, node_name: str, node_uid: str) -> dict[str, Any]:
    return {
        "apiVersion": SLICE_API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {
            "generateName": generate_name(driver, node_name),
            "ownerReferences": [owner_reference(node_name, node_uid)],
        },
        "spec": spec,
    }


def updated_slice(
    existing: dict[str, Any], spec: dict[str, Any], *, node_name: str, node_uid: str
) -> dict[str, Any]:
    """`existing` with our spec and owner; keeps name, resourceVersion and foreign metadata."""
    obj = copy.deepcopy(existing)
    obj["apiVersion"], obj["kind"] = SLICE_API_VERSION, "ResourceSlice"
    owners = [o for o in obj["metadata"].get("ownerReferences") or [] if not o.get("controller")]
    obj["metadata"]["ownerReferences"] = [owner_reference(node_name, node_uid), *owners]
    obj["spec"] = spec
    obj.pop("status", None)
    return obj


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def has_owner(obj: dict[str, Any], node_name: str, node_uid: str) -> bool:
    return owner_reference(node_name, node_uid) in (obj.get("metadata", {}).get("ownerReferences") or [])


def slice_name(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def pool_name(obj: dict[str, Any]) -> str:
    return str((obj.get("spec") or {}).get("pool", {}).get("name", ""))


def pool_generation(obj: dict[str, Any]) -> int:
    return int(obj.get("spec", {}).get("pool", {}).get("generation", 0))


@dataclass
class SyncPlan:
    """What to write to reach the desired state (empty when in sync)."""

    generation: int
    updates: list[dict[str, Any]] = field(default_factory=list)
    creates: list[dict[str, Any]] = field(default_factory=list)
    deletes: list[tuple[str, str]] = field(default_factory=list)  # (name, uid)

    @property
    def in_sync(self) -> bool:
        return not (self.updates or self.creates or self.deletes)


SpecMatcher = Callable[[dict[str, Any], dict[str, Any]], bool]


def _exact(actual: dict[str, Any], desired: dict[str, Any]) -> bool:
    return actual == desired


def plan_sync(
    existing: Sequence[dict[str, Any]],
    entries: Sequence[dict[str, Any]],
    *,
    driver: str,
    node_name: str,
    node_uid: str,
    known_generation: int = 0,
    matches: SpecMatcher = _exact,
    max_per_slice: int = MAX_DEVICES_PER_SLICE,
    annotations: Mapping[str, str] | None = None,
    managed_annotations: Sequence[str] = (),
    layout: Layout | None = None,
) -> SyncPlan:
    """Compare the slices that exist with the desired pool and plan the writes.

    In sync means: exactly one slice per desired chunk, each with the desired spec at the highest
    generation seen (existing or `known_generation`), and owned by the Node. Otherwise every
    desired slice is written with generation max+1: slices whose devices match a chunk are
    updated in place, then other existing slices are reused, missing ones created, the rest deleted.
    Slices of another pool are never reused (the apiserver refuses to change `spec.pool.name`):
    they are deleted. `annotations` (keys among `managed_annotations`) must be on every slice too.
    """
    wanted_notes = dict(annotations or {})
    ours = sorted((s for s in existing if pool_name(s) == node_name), key=slice_name)
    foreign = sorted((s for s in existing if pool_name(s) != node_name), key=slice_name)
    current = max([known_generation, *(pool_generation(s) for s in ours)])
    chunks = _contents(entries, max_per_slice, layout)
    wanted = [
        _spec(c, driver=driver, node_name=node_name, generation=current, slice_count=len(chunks))
        for c in chunks
    ]
    unused = list(ours)
    assigned: list[dict[str, Any] | None] = [None] * len(chunks)
    in_sync = current > 0
    for same in (
        lambda s, i: matches(s.get("spec") or {}, wanted[i]),
        lambda s, i: _content_of(s.get("spec") or {}) == chunks[i],
    ):
        for i in range(len(chunks)):
            if assigned[i] is None:
                found = next((s for s in unused if same(s, i)), None)
                if found is not None:
                    assigned[i] = found
                    unused.remove(found)
                    in_sync = (
                        in_sync
                        and has_owner(found, node_name, node_uid)
                        and annotations_match(found, wanted_notes, managed_annotations)
                    )
        in_sync = in_sync and not unused and not foreign and all(a is not None for a in assigned)
        if in_sync:
            return SyncPlan(generation=current)
    generation = current + 1
    plan = SyncPlan(generation=generation)
    for i, chunk in enumerate(chunks):
        spec = _spec(
            chunk, driver=driver, node_name=node_name, generation=generation, slice_count=len(chunks)
        )
        target = assigned[i] or (unused.pop(0) if unused else None)
        if target is None:
            obj = new_slice(spec, driver=driver, node_name=node_name, node_uid=node_uid)
            plan.creates.append(with_annotations(obj, wanted_notes, managed_annotations))
        else:
            obj = updated_slice(target, spec, node_name=node_name, node_uid=node_uid)
            plan.updates.append(with_annotations(obj, wanted_notes, managed_annotations))
    plan.deletes = [(s["metadata"]["name"], s["metadata"].get("uid", "")) for s in (*unused, *foreign)]
    return plan
