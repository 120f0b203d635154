"""The objects besides ResourceSlices: Nodes, ResourceClaims (with their watch cache and the ownership of
their status), Pods (with their cache), Deployments and DeviceClasses."""

from __future__ import annotations

import copy
import uuid
from typing import Any

import kubernetes_validate
from vke_gpu_dra_core.object_names import is_dns_subdomain

from .. import fake_claim_status
from .errors import ApiError, invalid
from .gates import K8S_VERSION, gate_served
from .list_options import matches
from .store import Store


class ClusterObjects(Store):
    """Nodes, claims, pods, Deployments and DeviceClasses, and what a test does with them."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: dict[str, dict[str, Any]] = {}
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        #: apps/v1 Deployments by (namespace, name); `status.readyReplicas` is set by `set_ready`.
        self.deployments: dict[tuple[str, str], dict[str, Any]] = {}
        #: When True, a created Deployment is ready at once (its pod started and passed its probe).
        self.deployments_become_ready = False
        #: What a claim read with `resourceVersion=0` sees while `freeze_claim_cache` holds it (None: the
        #: cache is current, as it is within milliseconds on a healthy apiserver).
        self.claim_cache: dict[tuple[str, str], dict[str, Any]] | None = None
        #: resource.k8s.io/v1 DeviceClasses by name.
        self.device_classes: dict[str, dict[str, Any]] = {}
        #: v1 Pods by (namespace, name); listed only with `fieldSelector=spec.nodeName=...`.
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        #: What a pod list with `resourceVersion=0` sees while `freeze_pod_cache` holds it.
        self.pod_cache: dict[tuple[str, str], dict[str, Any]] | None = None
        #: False: ResourceClaim `status.devices` is dropped (feature gate DRAResourceClaimDeviceStatus off).
        self.claim_device_status = True
        #: Server-side apply ownership of claims' `status.devices` keys: (namespace, name) -> manager -> keys.
        self.claim_status_owners: dict[tuple[str, str], dict[str, set[fake_claim_status.Key]]] = {}
        #: The bytes a claim's opaque device configs were stored as, where a test set them (`add_claim`);
        #: otherwise the compact form (`claim_protobuf`).
        self.claim_config_bytes: dict[tuple[str, str], list[bytes]] = {}

    # --- what a test does (each takes `cond`) ---

    def add_node(self, name: str) -> dict[str, Any]:
        with self.cond:
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "uid": str(uuid.uuid4()), "resourceVersion": self._next_rv()},
            }
            self.nodes[name] = node
            return copy.deepcopy(node)

    def delete_node(self, name: str) -> None:
        with self.cond:
            del self.nodes[name]
            self.cond.notify_all()

    def recreate_node(self, name: str) -> dict[str, Any]:
        """Delete the Node and create it again: same name, new UID (as after `kubectl delete node`)."""
        self.delete_node(name)
        return self.add_node(name)

    def add_claim(self, claim: dict[str, Any], *, config_bytes: list[bytes] | None = None) -> None:
        """Store `claim`; `config_bytes`: its allocation's opaque device configs as their creator sent them
        (say, with whitespace: then every server-side apply of its status is refused, `claim_protobuf`)."""
        with self.cond:
            claim = copy.deepcopy(claim)
            claim["metadata"].setdefault("uid", str(uuid.uuid4()))
            claim["metadata"]["resourceVersion"] = self._next_rv()
            key = (claim["metadata"]["namespace"], claim["metadata"]["name"])
            self.claims[key] = claim
            if config_bytes is not None:
                self.claim_config_bytes[key] = list(config_bytes)
            else:
                self.claim_config_bytes.pop(key, None)

    def delete_claim(self, namespace: str, name: str) -> None:
        """Delete a claim as a user would, whatever pods or kubelet still think of it."""
        with self.cond:
            del self.claims[(namespace, name)]
            self.claim_config_bytes.pop((namespace, name), None)

    def add_pod(
        self,
        namespace: str,
        name: str,
        node: str,
        *,
        claims: dict[str, str] | None = None,
        generated: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """A pod bound to `node`; `claims`: pod claim name -> ResourceClaim named in its spec;
        `generated`: pod claim name -> the claim generated from a template (its status names it)."""
        refs = [{"name": k, "resourceClaimName": v} for k, v in (claims or {}).items()]
        refs += [{"name": k, "resourceClaimTemplateName": f"{k}-template"} for k in generated or {}]
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"namespace": namespace, "name": name, "uid": str(uuid.uuid4())},
            "spec": {"nodeName": node, "resourceClaims": refs},
            "status": {
                "resourceClaimStatuses": [
                    {"name": k, "resourceClaimName": v} for k, v in (generated or {}).items() if v
                ]
            },
        }
        with self.cond:
            pod["metadata"]["resourceVersion"] = self._next_rv()
            self.pods[(namespace, name)] = pod
        return copy.deepcopy(pod)

    def delete_pod(self, namespace: str, name: str) -> None:
        """Delete a pod at once (a force delete)."""
        with self.cond:
            del self.pods[(namespace, name)]

    def freeze_pod_cache(self) -> None:
        """From now on, pod lists with `resourceVersion=0` see the pods as they are now."""
        with self.cond:
            self.pod_cache = copy.deepcopy(self.pods)

    def freeze_claim_cache(self) -> None:
        """From now on, cached claim reads (`resourceVersion=0`) see the claims as they are now."""
        with self.cond:
            self.claim_cache = copy.deepcopy(self.claims)

    def thaw_claim_cache(self) -> None:
        """The watch cache caught up: cached reads see the current claims again."""
        with self.cond:
            self.claim_cache = None

    def set_ready(self, namespace: str, name: str, ready: int = 1) -> None:
        """What the Deployment controller and kubelet report once the pod's probe passed."""
        with self.cond:
            self.deployments[(namespace, name)]["status"] = {"replicas": 1, "readyReplicas": ready}

    # --- what a request does (callers hold `cond`) ---

    def _list_pods(self, query: dict[str, str]) -> dict[str, Any]:
        """GET /api/v1/pods: the pods matching `fieldSelector` (`spec.nodeName` only, as kubelet
        lists its own); `resourceVersion=0` is served from the frozen pod cache when there is one."""
        store = self.pods
        if query.get("resourceVersion") == "0" and self.pod_cache is not None:
            store = self.pod_cache
        selector: dict[str, str] = {}
        for part in filter(None, query.get("fieldSelector", "").split(",")):
            key, sep, value = part.partition("==") if "==" in part else part.partition("=")
            if not sep or key.strip() != "spec.nodeName":
                raise ApiError(
                    400,
                    "BadRequest",
                    f'field label not supported by this test server: {key.strip()!r} (only "spec.nodeName")',
                )
            selector[key.strip()] = value.strip()
        items = [copy.deepcopy(p) for _, p in sorted(store.items()) if matches(p, selector)]
        return {
            "apiVersion": "v1",
            "kind": "PodList",
            "metadata": {"resourceVersion": str(self.current_rv)},
            "items": items,
        }

    def _create_deployment(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        md = obj.setdefault("metadata", {})
        if md.get("namespace", namespace) != namespace:
            message = "the namespace of the provided object does not match the namespace sent on the request"
            raise ApiError(400, "BadRequest", message)
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            raise invalid(obj, [str(getattr(err, "message", err))]) from err
        spec = obj["spec"]
        labels = spec["template"].get("metadata", {}).get("labels", {})
        if any(labels.get(k) != v for k, v in spec["selector"].get("matchLabels", {}).items()):
            message = "spec.template.metadata.labels: Invalid value: selector does not match template labels"
            raise invalid(obj, [message])
        name = md.get("name", "")
        if not is_dns_subdomain(name):
            raise invalid(obj, [f"metadata.name: Invalid value: {name!r}: must be a DNS subdomain"])
        if (namespace, name) in self.deployments:
            raise ApiError(
                409,
                "AlreadyExists",
                f'deployments.apps "{name}" already exists',
                {"name": name, "group": "apps", "kind": "deployments"},
            )
        md.update(namespace=namespace, uid=str(uuid.uuid4()), resourceVersion=self._next_rv(), generation=1)
        obj["status"] = {"replicas": 1, "readyReplicas": 1} if self.deployments_become_ready else {}
        self.deployments[(namespace, name)] = obj
        return obj

    def _create_device_class(self, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """A DeviceClass as the server stores it: `extendedResourceName` dropped while DRAExtendedResource
        is off (1.34, 1.35 by default)."""
        md = obj.setdefault("metadata", {})
        name = str(md.get("name", ""))
        if not is_dns_subdomain(name):
            raise ApiError(422, "Invalid", f'DeviceClass.resource.k8s.io "{name}" is invalid: metadata.name')
        spec = obj.setdefault("spec", {})
        if not gate_served("DRAExtendedResource", self.k8s_version, self.feature_gates):
            spec.pop("extendedResourceName", None)
        if name in self.device_classes:
            raise ApiError(
                409,
                "AlreadyExists",
                f'deviceclasses.resource.k8s.io "{name}" already exists',
                {"name": name, "group": "resource.k8s.io", "kind": "deviceclasses"},
            )
        md.update(uid=str(uuid.uuid4()), generation=1)
        if not dry_run:
            md["resourceVersion"] = self._next_rv()
            self.device_classes[name] = obj
        return obj
