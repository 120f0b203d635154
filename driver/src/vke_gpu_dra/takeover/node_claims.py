"""Which claims the pods of this node use: where claims adopted from NVIDIA's plugin without a
namespace/name (NVIDIA 25.8.1 records none) are looked for. `reconcile` reads each claim named here
and names an adopted claim whose UID it finds; one no complete view names for two rounds is released.

Node-local first, the API server only as a fallback:

1. kubelet's PodResources API (`kubelet.pod_resources`): the claims the containers of the node's
   active pods use, by namespace/name. It needs no API grant. It is a **complete** view (a claim it
   does not name is used by no container here) only where kubelet fills its DRA fields (gate
   KubeletPodResourcesDynamicResources): proven by an answer that names any claim, or by the node's
   kubelet version (`status.nodeInfo.kubeletVersion`) from the release that locks the gate on
   (`vke_gpu_dra_core.dra_gates`, 1.36). A 1.34 or 1.35 kubelet answering no claim at all (no container
   uses one, or the gate is off there) is not complete: nothing is called unreferenced from it.
2. The pods bound to this node through the API server (`list` on pods, `spec.nodeName` only; a
   cluster-wide grant the chart renders only when asked, `takeover.listPods`), and only while 1 gives
   no complete view: the claims their specs and statuses name (`pod_claims`). Without the
   grant the answer is 403: the view stays incomplete (kind `forbidden`), which is not an API failure
   to count, since the default chart grants nothing on pods.

A claim whose devices kubelet lists are all another driver's is not named (it is no adopted claim of
this driver); one listed without devices is.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from vke_gpu_dra_core import dra_gates
from vke_gpu_dra_core.objects import lookup
from vke_gpu_dra_core.versions import MajorMinor, parse_major_minor

from ..kubeapi import KubeError
from ..kubelet.pod_resources import ClaimUse, PodResourcesError, PodResourcesView

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PodClaims:
    """The claims the pods of this node reference, by namespace/name (`pod_claims`)."""

    names: frozenset[tuple[str, str]]
    #: Pods naming a claim template whose generated claim their status does not name yet: a claim of
    #: theirs may exist unseen, so no claim can be proven unreferenced while there is one.
    unresolved: tuple[str, ...] = ()


def pod_claims(pods: Iterable[Mapping[str, Any]]) -> PodClaims:
    """The claims `pods` reference: `spec.resourceClaims[].resourceClaimName` (a claim named in the
    pod) and `status.resourceClaimStatuses[].resourceClaimName` (the claim generated from a template),
    each in the pod's namespace; a template reference without its status entry is `unresolved`."""
    names: set[tuple[str, str]] = set()
    unresolved: list[str] = []
    for pod in pods:
        namespace = str(lookup(pod, "metadata", "namespace") or "")
        generated: dict[str, str] = {}
        for status in lookup(pod, "status", "resourceClaimStatuses") or ():
            if isinstance(status, Mapping):  # an empty resourceClaimName: none was needed
                generated[str(status.get("name", ""))] = str(status.get("resourceClaimName") or "")
        for ref in lookup(pod, "spec", "resourceClaims") or ():
            if not isinstance(ref, Mapping):
                continue
            if ref.get("resourceClaimName"):
                names.add((namespace, str(ref["resourceClaimName"])))
            elif ref.get("resourceClaimTemplateName") and str(ref.get("name", "")) not in generated:
                unresolved.append(f"{namespace}/{lookup(pod, 'metadata', 'name')}")
        names.update((namespace, claim) for claim in generated.values() if claim)
    return PodClaims(frozenset(names), tuple(sorted(set(unresolved))))


#: Where a view came from (the `sources` of NodeClaims).
POD_RESOURCES = "pod-resources"
POD_LIST = "pod-list"


class PodResourcesSource(Protocol):
    """kubelet's PodResources API on this node (`kubelet.pod_resources.PodResourcesClient`)."""

    def list_claims(self, timeout: float | None = None) -> PodResourcesView: ...


class PodSource(Protocol):
    """Lists the pods bound to one node (`spec.nodeName`), a quorum read; never a cluster-wide list."""

    def list_node_pods(self, node_name: str, timeout: float | None = None) -> list[dict[str, Any]]: ...


class NodeSource(Protocol):
    """Reads a Node (for its kubelet's version)."""

    def get_node(self, name: str) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Undecided:
    """Why a claim the view does not name may still be in use here: nothing is released this round."""

    kind: str  #: short and stable (logged once while it stays the same)
    why: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.why}"


@dataclass(frozen=True)
class NodeClaims:
    """The claims (namespace, name) the pods of this node use, as far as one lookup could tell."""

    names: frozenset[tuple[str, str]]
    sources: tuple[str, ...]
    #: None: complete (a claim not named is used by no pod here); else why it is not.
    undecided: Undecided | None = None
    #: An API failure on the way (counted by the caller); a 403 of the pod list is none.
    error: KubeError | None = None


def pod_resources_names(claims: Iterable[ClaimUse], driver_name: str) -> frozenset[tuple[str, str]]:
    """The claims of a PodResources answer that may be this driver's: a device of it, or no device."""
    return frozenset(
        (c.namespace, c.name)
        for c in claims
        if not c.devices or any(d.driver == driver_name for d in c.devices)
    )


def kubelet_version(node: Mapping[str, Any]) -> MajorMinor | None:
    """(major, minor) of the node's kubelet (`status.nodeInfo.kubeletVersion`), None when unreadable."""
    raw = lookup(node, "status", "nodeInfo", "kubeletVersion")
    return parse_major_minor(raw) if isinstance(raw, str) else None


class ClaimLookup(Protocol):
    """Which claims the pods of this node use (`NodeClaimLookup`)."""

    def look(self, timeout: float | None = None) -> NodeClaims: ...


class NodeClaimLookup:
    """Finds the claims the pods of `node_name` use (see the module docs); one `look` per round."""

    def __init__(
        self,
        *,
        driver_name: str,
        node_name: str,
        pod_resources: PodResourcesSource | None = None,
        nodes: NodeSource | None = None,
        pods: PodSource | None = None,
    ) -> None:
        """`pod_resources`: kubelet's API (None: not used); `nodes`: where the kubelet's version is
        read; `pods`: the pod list through the API server (None: never listed)."""
        if pods is not None and not node_name:
            raise ValueError("a pod list needs the node name: it is never cluster-wide")
        self._driver_name = driver_name
        self._node_name = node_name
        self._pod_resources = pod_resources
        self._nodes = nodes
        self._pods = pods
        self._kubelet: MajorMinor | None = None  # read once it is known

    def look(self, timeout: float | None = None) -> NodeClaims:
        """One lookup; every read is bounded by `timeout` seconds (None: each source's own bound)."""
        names: frozenset[tuple[str, str]] = frozenset()
        sources: tuple[str, ...] = ()
        undecided = Undecided("pod-resources-unused", "kubelet's PodResources API is not read")
        if self._pod_resources is not None:
            try:
                view = self._pod_resources.list_claims(timeout)
            except PodResourcesError as err:
                undecided = Undecided(f"pod-resources-{err.kind}", str(err))
            else:
                names = pod_resources_names(view.claims, self._driver_name)
                sources = (POD_RESOURCES,)
                incomplete = self._incomplete(view)
                if incomplete is None:
                    return NodeClaims(names, sources)
                undecided = incomplete
        if self._pods is None:
            return NodeClaims(names, sources, undecided)
        try:
            pods = self._pods.list_node_pods(self._node_name, timeout)
        except KubeError as err:
            if err.status == 403:
                why = f"{undecided.why}; listing the pods of this node is not granted ({err})"
                return NodeClaims(names, sources, Undecided("forbidden", why))
            failed = Undecided("pod-list", f"listing the pods of this node: {err}")
            return NodeClaims(names, sources, failed, err)
        referenced = pod_claims(pods)
        sources = (*sources, POD_LIST)
        if referenced.unresolved:
            why = f"pods whose generated claim is not named yet: {', '.join(referenced.unresolved)}"
            return NodeClaims(names | referenced.names, sources, Undecided("unresolved", why))
        return NodeClaims(names | referenced.names, sources)

    def _incomplete(self, view: PodResourcesView) -> Undecided | None:
        """None when kubelet provably fills the DRA fields of its answer, else why not."""
        if view.claims:
            return None  # any claim named at all: the gate is on
        version = self._kubelet_version()
        gate = dra_gates.KUBELET_POD_RESOURCES_CLAIMS
        if version is not None and dra_gates.locked(gate, version):
            return None
        shown = f"{version[0]}.{version[1]}" if version else "of unknown version"
        return Undecided(
            "pod-resources-no-claims",
            f"kubelet ({shown}) names no claim in its PodResources API: no container here uses one, or "
            f"its {gate} gate is off",
        )

    def _kubelet_version(self) -> MajorMinor | None:
        if self._kubelet is None and self._nodes is not None and self._node_name:
            try:
                self._kubelet = kubelet_version(self._nodes.get_node(self._node_name))
            except KubeError as err:  # read again next time
                log.debug("cannot read this node's kubelet version", extra={"fields": {"error": str(err)}})
        return self._kubelet
