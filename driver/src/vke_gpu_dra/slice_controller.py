"""Keeps this node's ResourceSlices published (threads and API I/O around `slices.plan_sync`).

A watcher thread follows the node's slices (field selector driver + node; a watch-list request,
or list-then-watch where the API server has no watch-list support) and marks the state dirty on
every change; a reconciler thread lists the slices and applies the plan when dirty,
on a periodic resync, and after errors (with exponential back-off). kubelet deletes a node's
slices when it starts or when the plugin was away; they come back within a reconcile round.
The slices are owned by the Node: every round reads the Node's UID, so a deleted and re-created
Node (new UID) gets slices it owns instead of orphans the garbage collector deletes at once.
Stopping leaves the slices in place, as NVIDIA's plugin does.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .kubeapi import KubeAPI, KubeError, Watch
from .metrics import Metrics
from .slices import MAX_DEVICES_PER_SLICE, Layout, SyncPlan, canonical, plan_sync

log = logging.getLogger(__name__)

#: Reconcile rounds in a row that may write (or meet a conflict) before the next one is delayed.
CONTESTED_FREE_ROUNDS = 5


class NodeNotFoundError(Exception):
    """This node's Node object does not exist (yet): slices cannot be owned by it."""


class SliceController:
    """Publishes `entries` (ResourceSlice device entries) as the node's pool and keeps them there."""

    def __init__(
        self,
        api: KubeAPI,
        *,
        driver: str,
        node_name: str,
        entries: Sequence[dict[str, Any]],
        metrics: Metrics,
        resync_interval: float = 60.0,
        watch_timeout: int = 300,
        backoff_initial: float = 0.2,
        backoff_max: float = 30.0,
        max_per_slice: int = MAX_DEVICES_PER_SLICE,
        managed_annotations: Sequence[str] = (),
        layout: Layout | None = None,
    ) -> None:
        """`layout`: how the entries become slices (dynamic MIG's counter sets); None: plain chunks."""
        self._api = api
        self._driver = driver
        self._node = node_name
        self._entries = list(entries)
        self._metrics = metrics
        self._resync = resync_interval
        self._watch_timeout = watch_timeout
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._max_per_slice = max_per_slice
        self._managed_annotations = tuple(managed_annotations)
        self._layout = layout
        self._annotations: dict[str, str] = {}
        #: Counts the changes of what is to be published (`set_entries`); `_planned` is the count the
        #: last round published (-1 before the first): a round that writes for a change of ours is not
        #: contested.
        self._desired = 0
        self._planned = -1
        self._node_uid = ""
        self._generation = 0
        # canonical(desired spec) -> canonical(spec as the apiserver stored it), for servers that
        # normalise or drop fields: what they accepted for our spec counts as in sync.
        self._accepted: dict[str, str] = {}
        self._lock = threading.Lock()
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._watch: Watch | None = None
        #: Cleared when the API server refuses watch-list requests (no WatchList feature).
        self._watch_list = True
        self._threads: list[threading.Thread] = []

    # --- public ---

    def start(self) -> None:
        self._dirty.set()
        self._threads = [
            threading.Thread(target=self._reconcile_loop, name="slice-reconciler", daemon=True),
            threading.Thread(target=self._watch_loop, name="slice-watcher", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop both threads; the published slices stay."""
        self._stop.set()
        self._dirty.set()
        with self._lock:
            watch = self._watch
        if watch is not None:
            watch.close()
        for t in self._threads:
            t.join(timeout)

    def wait_synced(self, timeout: float) -> bool:
        """True once the slices were published at least once."""
        return self._synced.wait(timeout)

    def resync(self) -> None:
        """Ask for a reconcile round now."""
        self._dirty.set()

    def set_entries(
        self, entries: Sequence[dict[str, Any]], annotations: Mapping[str, str] | None = None
    ) -> None:
        """Publish these device entries (and managed annotations) from now on (health changes: taints,
        devices left out, the devices' health for operators)."""
        with self._lock:
            self._entries = list(entries)
            self._annotations = dict(annotations or {})
            self._desired += 1
        self._dirty.set()

    @property
    def generation(self) -> int:
        return self._generation

    # --- reconcile ---

    def _matches(self, actual: dict[str, Any], desired: dict[str, Any]) -> bool:
        if actual == desired:
            return True
        return self._accepted.get(canonical(desired)) == canonical(actual)

    def _remember(self, sent: dict[str, Any], stored: dict[str, Any]) -> None:
        if stored.get("spec") != sent["spec"]:
            log.warning(
                "the API server changed the published slice (fields dropped or normalised)",
                extra={"fields": {"slice": stored.get("metadata", {}).get("name")}},
            )
            self._accepted[canonical(sent["spec"])] = canonical(stored.get("spec"))

    def _read_node_uid(self) -> str:
        """The Node's current UID; raises NodeNotFoundError when there is no such Node."""
        try:
            node = self._api.get_node(self._node)
        except KubeError as err:
            if err.not_found:
                raise NodeNotFoundError(
                    f'node "{self._node}" not found: the ResourceSlices are owned by the Node object '
                    "and are published once it exists"
                ) from None
            raise
        uid = str(node["metadata"]["uid"])
        if self._node_uid and uid != self._node_uid:
            log.info(
                "node was re-created; its resource slices get the new owner",
                extra={"fields": {"node": self._node, "old_uid": self._node_uid, "uid": uid}},
            )
        return uid

    def reconcile_once(self) -> SyncPlan:
        """List, plan, write. Raises KubeError on API failures, NodeNotFoundError without a Node."""
        self._node_uid = self._read_node_uid()
        existing, _ = self._api.list_slices(self._driver, self._node)
        with self._lock:
            entries, annotations, desired = self._entries, self._annotations, self._desired
        plan = plan_sync(
            existing,
            entries,
            driver=self._driver,
            node_name=self._node,
            node_uid=self._node_uid,
            known_generation=self._generation,
            matches=self._matches,
            max_per_slice=self._max_per_slice,
            annotations=annotations,
            managed_annotations=self._managed_annotations,
            layout=self._layout,
        )
        if not plan.in_sync:
            log.info(
                "publishing resource slices",
                extra={
                    "fields": {
                        "generation": plan.generation,
                        "update": len(plan.updates),
                        "create": len(plan.creates),
                        "delete": [name for name, _ in plan.deletes],
                    }
                },
            )
        for obj in plan.updates:
            self._remember(obj, self._api.update_slice(obj))
        for obj in plan.creates:
            self._remember(obj, self._api.create_slice(obj))
        for name, uid in plan.deletes:
            self._api.delete_slice(name, uid or None)
        self._generation = plan.generation
        self._planned = desired
        self._metrics.pool_generation.set(plan.generation)
        self._metrics.devices_published.set(len(entries))
        self._metrics.resource_slices.set(
            len(existing) if plan.in_sync else len(plan.updates) + len(plan.creates)
        )
        return plan

    def _contested_delay(self, rounds: int) -> float:
        """Pause before the next round after `rounds` rounds in a row that had to write or hit a conflict.

        The first CONTESTED_FREE_ROUNDS are free: restoring after kubelet's wipe or an edit is
        immediate, even when a wipe of several slices takes a few rounds. After that the pause
        doubles, so a writer that keeps undoing our slices (another plugin instance, a controller)
        gets no hot loop. A round counts when it writes what an earlier round published already (a
        round publishing a change of ours, such as a health taint, does not), or hits a conflict. The
        count starts again only after a round in sync with none counted for `backoff_max` seconds: the
        round that meets our own write's watch event before the other writer undoes it is in sync
        too, and must not make the next rounds free.
        """
        if rounds <= CONTESTED_FREE_ROUNDS:
            return 0.0
        return min(self._backoff_initial * 2 ** (rounds - CONTESTED_FREE_ROUNDS - 1), self._backoff_max)

    def _reconcile_loop(self) -> None:
        backoff = self._backoff_initial
        contested = 0
        contested_at = -math.inf  # time.monotonic() of the last round counted
        while not self._stop.is_set():
            self._dirty.wait(self._resync)
            if self._stop.is_set():
                return
            self._dirty.clear()
            planned = self._planned
            try:
                plan = self.reconcile_once()
            except Exception as err:
                self._dirty.set()
                if isinstance(err, KubeError) and err.conflict:
                    # Someone changed a slice under us: re-list right away (after a short pause).
                    contested, contested_at = contested + 1, time.monotonic()
                    log.info("slice changed concurrently, re-listing", extra={"fields": {"error": str(err)}})
                    self._stop.wait(max(self._backoff_initial, self._contested_delay(contested)))
                    continue
                self._metrics.slice_sync_errors.inc()
                missing_node = isinstance(err, NodeNotFoundError)
                log.warning(
                    f"{err}; retrying" if missing_node else "publishing resource slices failed; retrying",
                    extra={"fields": {"error": str(err), "retry_in_s": backoff}},
                    exc_info=not (missing_node or isinstance(err, KubeError)),
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._backoff_max)
                continue
            backoff = self._backoff_initial
            self._synced.set()
            now = time.monotonic()
            if plan.in_sync:
                if now - contested_at >= self._backoff_max:
                    contested = 0
                continue
            if self._planned != planned:
                continue  # it published a change of ours, not one undone by another writer
            contested, contested_at = contested + 1, now
            delay = self._contested_delay(contested)
            if delay:
                log.warning(
                    "resource slices keep changing under the plugin (another writer?); slowing down",
                    extra={"fields": {"rounds": contested, "next_round_in_s": delay}},
                )
                self._stop.wait(delay)

    # --- watch ---

    def _open_watch(self, resource_version: str) -> tuple[Watch, str]:
        """A watch and the resourceVersion it starts from ("" for a watch-list request).

        Without a resourceVersion to resume from: a watch-list request (the current slices as
        events, then a bookmark), or, where the API server refuses watch-list, a list and a watch
        from the list's resourceVersion, as client-go's reflector does. A refusal is remembered,
        so later rounds go straight to list-then-watch.
        """
        if resource_version:
            return self._api.watch_slices(self._driver, self._node, resource_version, self._watch_timeout), (
                resource_version
            )
        if self._watch_list:
            try:
                return self._api.watch_slices(
                    self._driver, self._node, "", self._watch_timeout, send_initial_events=True
                ), ""
            except KubeError as err:
                if not 400 <= err.status < 500 or err.status in (401, 410, 429):
                    raise
                self._watch_list = False
                log.info(
                    "the API server refuses watch-list requests; listing, then watching from the list",
                    extra={"fields": {"error": str(err)}},
                )
        _, listed_rv = self._api.list_slices(self._driver, self._node)
        return self._api.watch_slices(self._driver, self._node, listed_rv, self._watch_timeout), listed_rv

    def _watch_loop(self) -> None:
        resource_version = ""
        backoff = self._backoff_initial
        while not self._stop.is_set():
            try:
                fresh = not resource_version
                watch, resource_version = self._open_watch(resource_version)
                with self._lock:
                    self._watch = watch
                if self._stop.is_set():
                    watch.close()
                    return
                if fresh:
                    # A fresh watch only reports what exists: slices deleted before it started (kubelet
                    # wipes a node's slices at its start) produce no event. Reconcile once it is open.
                    self._dirty.set()
                for event in watch:
                    if event.type == "ERROR":
                        code = int(event.object.get("code") or 0)
                        raise KubeError(
                            code, str(event.object.get("reason", "")), str(event.object.get("message"))
                        )
                    resource_version = str(
                        event.object.get("metadata", {}).get("resourceVersion", resource_version)
                    )
                    if event.type != "BOOKMARK" or event.initial_events_end:
                        self._dirty.set()
                backoff = self._backoff_initial
            except Exception as err:
                if self._stop.is_set():
                    return
                if isinstance(err, KubeError) and err.gone:
                    log.info("slice watch expired; re-listing")
                    resource_version = ""
                    self._dirty.set()
                    continue
                log.warning(
                    "watching resource slices failed; retrying",
                    extra={"fields": {"error": str(err), "retry_in_s": backoff}},
                )
                resource_version = ""
                self._dirty.set()
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._backoff_max)
            finally:
                with self._lock:
                    self._watch = None
