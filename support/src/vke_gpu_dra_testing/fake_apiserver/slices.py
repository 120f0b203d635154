"""ResourceSlices: created, updated and deleted as the apiserver does (validated, gated fields dropped,
resourceVersion preconditions, immutable fields), each change a watch event; and the garbage collector's
rule for slices whose owner Node is gone."""

from __future__ import annotations

import copy
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from .errors import ApiError, invalid
from .gates import drop_disabled_fields, taints_served
from .objects import ClusterObjects
from .slice_rules import validate_slice


class SliceStore(ClusterObjects):
    """The slices by name, and what a test does with them."""

    def __init__(self) -> None:
        super().__init__()
        self.slices: dict[str, dict[str, Any]] = {}
        self._random = random.Random(1)
        self._gc_thread: threading.Thread | None = None
        self.collected: list[str] = []  # names of slices the garbage collector deleted

    # --- what a test does (each takes `cond`) ---

    def collect_garbage(self) -> list[str]:
        """Delete slices whose owner references all point at absent Nodes (name and UID); their names."""
        with self.cond:
            uids = {name: node["metadata"]["uid"] for name, node in self.nodes.items()}
            doomed = []
            for name, obj in self.slices.items():
                owners = obj["metadata"].get("ownerReferences") or []
                if owners and all(
                    o.get("kind") == "Node" and uids.get(o.get("name", "")) != o.get("uid") for o in owners
                ):
                    doomed.append(name)
            for name in doomed:
                self._delete_slice(name, None)
            self.collected += doomed
            return doomed

    def start_garbage_collector(self) -> None:
        """Run `collect_garbage` in the background after every change, like the real garbage collector."""

        def loop() -> None:
            with self.cond:
                while not self.closing:
                    self.cond.wait(0.05)
                    self.collect_garbage()

        self._gc_thread = threading.Thread(target=loop, name="fake-gc", daemon=True)
        self._gc_thread.start()

    def slices_of(self, node: str) -> list[dict[str, Any]]:
        with self.cond:
            return sorted(
                (copy.deepcopy(s) for s in self.slices.values() if s["spec"].get("nodeName") == node),
                key=lambda s: s["metadata"]["name"],
            )

    def create_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create a slice as another client would (validated like any create)."""
        with self.cond:
            return copy.deepcopy(self._create_slice(copy.deepcopy(obj)))

    def delete_slice(self, name: str) -> None:
        with self.cond:
            self._delete_slice(name, None)

    def edit_slice(self, name: str, mutate: Callable[[dict[str, Any]], None]) -> None:
        with self.cond:
            obj = copy.deepcopy(self.slices[name])
            mutate(obj)
            self._update_slice(name, obj)

    # --- what a request does (callers hold `cond`) ---

    @staticmethod
    def _as_stored(obj: dict[str, Any]) -> None:
        """Drop what the apiserver does not keep: `spec.devices` is `omitempty`, so [] comes back absent."""
        spec = obj.get("spec")
        if isinstance(spec, dict) and spec.get("devices") == []:
            del spec["devices"]

    def _taint_fields(self, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
        """Drop `taints` where the server does not serve them (kept on an update of an object that
        had them, as the apiserver's dropDisabledFields does); default `timeAdded` where it does."""
        devices = (obj.get("spec") or {}).get("devices") or []
        old_used = any(d.get("taints") for d in ((old or {}).get("spec") or {}).get("devices") or [])
        served = taints_served(self.k8s_version, self.feature_gates) or old_used
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for dev in devices:
            if not served:
                dev.pop("taints", None)
                continue
            for taint in dev.get("taints") or []:
                taint.setdefault("timeAdded", now)

    def _create_slice(self, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        md = obj.setdefault("metadata", {})
        if md.get("resourceVersion"):
            raise ApiError(400, "BadRequest", "resourceVersion should not be set on objects to be created")
        if not md.get("name"):
            prefix = md.get("generateName")
            if not prefix:
                raise invalid(obj, ["metadata.name: Required value: name or generateName is required"])
            suffix = "".join(self._random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
            md["name"] = prefix + suffix
        self._taint_fields(obj)
        drop_disabled_fields(obj, self.k8s_version, self.feature_gates)
        validate_slice(obj, self.k8s_version)
        self._as_stored(obj)
        if md["name"] in self.slices:
            raise ApiError(
                409,
                "AlreadyExists",
                f'resourceslices.resource.k8s.io "{md["name"]}" already exists',
                {"name": md["name"], "group": "resource.k8s.io", "kind": "resourceslices"},
            )
        if dry_run:
            md.update(uid=str(uuid.uuid4()), generation=1)
            return obj
        md.update(
            uid=str(uuid.uuid4()),
            resourceVersion=self._next_rv(),
            generation=1,
            creationTimestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
        self.slices[md["name"]] = obj
        self._emit("ADDED", obj)
        return obj

    def _get_slice(self, name: str) -> dict[str, Any]:
        try:
            return self.slices[name]
        except KeyError:
            raise ApiError.not_found("resourceslices", "resource.k8s.io", name) from None

    def _update_slice(self, name: str, obj: dict[str, Any]) -> dict[str, Any]:
        current = self._get_slice(name)
        md = obj.setdefault("metadata", {})
        if md.get("name", name) != name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        md["name"] = name
        rv = md.get("resourceVersion")
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on resourceslices.resource.k8s.io "{name}": '
                "the object has been modified; please apply your changes to the latest version and try again",
                {"name": name, "group": "resource.k8s.io", "kind": "resourceslices"},
            )
        self._taint_fields(obj, current)
        drop_disabled_fields(obj, self.k8s_version, self.feature_gates, current)
        validate_slice(obj, self.k8s_version)
        immutable = [f for f in ("driver", "nodeName") if obj["spec"].get(f) != current["spec"].get(f)]
        if obj["spec"]["pool"]["name"] != current["spec"]["pool"]["name"]:
            immutable.append("pool.name")
        if immutable:
            raise invalid(obj, [f"spec.{f}: Invalid value: field is immutable" for f in immutable])
        self._as_stored(obj)
        for key in ("uid", "creationTimestamp"):
            md[key] = current["metadata"][key]
        changed = obj["spec"] != current["spec"]
        md["generation"] = current["metadata"]["generation"] + (1 if changed else 0)
        md["resourceVersion"] = self._next_rv()
        self.slices[name] = obj
        self._emit("MODIFIED", obj)
        return obj

    def _delete_slice(self, name: str, uid: str | None) -> dict[str, Any]:
        current = self._get_slice(name)
        if uid and uid != current["metadata"]["uid"]:
            raise ApiError(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {uid}, "
                f"UID in object meta: {current['metadata']['uid']}",
            )
        del self.slices[name]
        current["metadata"]["resourceVersion"] = self._next_rv()
        self._emit("DELETED", current)
        return current
