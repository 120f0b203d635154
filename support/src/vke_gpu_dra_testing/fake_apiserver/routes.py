"""Which resource a request is for, and its answer: (HTTP code, body). Every route but `route` itself is
called with the server's `cond` held."""

from __future__ import annotations

import copy
from typing import Any

from .. import fake_claim_status
from ..k8s_protobuf import PROTOBUF, wants_protobuf
from . import claim_protobuf
from .errors import ApiError
from .list_options import invalid_list_options, list_option_errors, matches, parse_field_selector
from .objects import ClusterObjects
from .slices import SliceStore

RESOURCE = "/apis/resource.k8s.io/v1"

Answer = tuple[int, Any]


def not_served(method: str, path: str) -> ApiError:
    return ApiError(404, "NotFound", f"the server could not find the requested resource ({method} {path})")


def route(
    api: SliceStore,
    method: str,
    path: str,
    query: dict[str, str],
    body: dict[str, Any],
    *,
    content_type: str,
    accept: str = "application/json",
    wire: bytes = b"",
) -> Answer:
    """Any request but a watch (`watch.serve_watch`). `wire`: a protobuf body (`content_type` PROTOBUF);
    a claim read asking for PROTOBUF first (`accept`) is answered in it (bytes)."""
    parts = path.strip("/").split("/")
    with api.cond:
        if method == "GET" and parts == ["version"]:
            return 200, api.version_info()
        if method == "GET" and len(parts) == 4 and parts[:3] == ["api", "v1", "nodes"]:
            node = api.nodes.get(parts[3])
            if node is None:
                raise ApiError(
                    404, "NotFound", f'nodes "{parts[3]}" not found', {"name": parts[3], "kind": "nodes"}
                )
            return 200, copy.deepcopy(node)
        claim_path = len(parts) == 7 and parts[:4] == ["apis", "resource.k8s.io", "v1", "namespaces"]
        if method == "GET" and claim_path and parts[5] == "resourceclaims":
            return route_claim_read(api, parts[4], parts[6], query, accept=accept)
        routed = (
            route_pods(api, method, parts, query)
            or route_deployments(api, method, parts, body)
            or route_claim_status(api, method, parts, query, body, content_type=content_type, wire=wire)
        )
        if routed is not None:
            return routed
        if path.startswith(f"{RESOURCE}/deviceclasses"):
            return route_device_classes(api, method, path, query, body)
        return route_slices(api, method, path, query, body)


def route_claim_read(
    api: ClusterObjects, namespace: str, name: str, query: dict[str, str], *, accept: str
) -> Answer:
    """GET a claim: from the (stale) watch cache with `resourceVersion=0`, in protobuf form where `accept`
    asks for it first."""
    store = api.claims
    if query.get("resourceVersion") == "0" and api.claim_cache is not None:
        store = api.claim_cache  # served from the (stale) watch cache
    claim = store.get((namespace, name))
    if claim is None:
        raise ApiError.not_found("resourceclaims", "resource.k8s.io", name)
    if wants_protobuf(accept):
        return 200, claim_protobuf.read(api, claim)
    return 200, copy.deepcopy(claim)


def route_pods(api: ClusterObjects, method: str, parts: list[str], query: dict[str, str]) -> Answer | None:
    """GET /api/v1/pods (a list; no other pod request is served), None for any other request."""
    if method == "GET" and parts == ["api", "v1", "pods"]:
        return 200, api._list_pods(query)
    return None


def route_deployments(
    api: ClusterObjects, method: str, parts: list[str], body: dict[str, Any]
) -> Answer | None:
    if parts[:4] != ["apis", "apps", "v1", "namespaces"] or len(parts) < 6 or parts[5] != "deployments":
        return None
    namespace = parts[4]
    if len(parts) == 6 and method == "POST":
        return 201, copy.deepcopy(api._create_deployment(namespace, body))
    if len(parts) == 7:
        key = (namespace, parts[6])
        if key not in api.deployments:
            raise ApiError.not_found("deployments", "apps", parts[6])
        if method == "GET":
            return 200, copy.deepcopy(api.deployments[key])
        if method == "DELETE":
            if body.get("propagationPolicy") not in (None, "Foreground", "Background", "Orphan"):
                policy = body.get("propagationPolicy")
                raise ApiError(400, "BadRequest", f"invalid propagationPolicy {policy}")
            return 200, api.deployments.pop(key)
    return None


def route_claim_status(
    api: ClusterObjects,
    method: str,
    parts: list[str],
    query: dict[str, str],
    body: dict[str, Any],
    *,
    content_type: str,
    wire: bytes = b"",
) -> Answer | None:
    """Server-side apply of a claim's status, `status.devices` by key (`fake_claim_status`), and its update
    in protobuf form (`claim_protobuf`)."""
    if not (len(parts) == 8 and parts[5] == "resourceclaims" and parts[7] == "status"):
        return None
    namespace, name = parts[4], parts[6]
    if method == "PUT":
        if content_type != PROTOBUF:
            raise ApiError(
                415, "UnsupportedMediaType", "the fake updates a claim's status in protobuf form only"
            )
        return 200, claim_protobuf.update_status(api, namespace, name, wire, query)
    if method != "PATCH":
        return None
    if content_type != "application/apply-patch+yaml":
        raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format")
    if not query.get("fieldManager"):
        raise ApiError(
            400, "BadRequest", 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value'
        )
    claim = api.claims.get((namespace, name))
    if claim is None:
        raise ApiError.not_found("resourceclaims", "resource.k8s.io", name)
    uid = (body.get("metadata") or {}).get("uid")
    if uid and uid != claim["metadata"]["uid"]:
        raise ApiError(
            422,
            "Invalid",
            f'ResourceClaim.resource.k8s.io "{name}" is invalid: metadata.uid: Invalid value: "{uid}": '
            "field is immutable",
        )
    refused = claim_protobuf.apply_refused(api, claim)
    if refused is not None:
        raise refused
    updated = copy.deepcopy(claim)
    owners = copy.deepcopy(api.claim_status_owners.get((namespace, name), {}))
    errors = fake_claim_status.apply(
        updated, body.get("status") or {}, query["fieldManager"], owners, served=api.claim_device_status
    )
    if errors:
        raise ApiError(
            422, "Invalid", f'ResourceClaim.resource.k8s.io "{name}" is invalid: ' + "; ".join(errors)
        )
    updated["metadata"]["resourceVersion"] = api._next_rv()
    api.claims[(namespace, name)] = updated
    api.claim_status_owners[(namespace, name)] = owners
    return 200, copy.deepcopy(updated)


def route_device_classes(
    api: ClusterObjects, method: str, path: str, query: dict[str, str], body: dict[str, Any]
) -> Answer:
    parts = path.strip("/").split("/")
    if path == f"{RESOURCE}/deviceclasses" and method == "POST":
        dry_run = query.get("dryRun") == "All"
        return 201, copy.deepcopy(api._create_device_class(body, dry_run=dry_run))
    if len(parts) == 5 and method == "GET":
        found = api.device_classes.get(parts[4])
        if found is None:
            raise ApiError.not_found("deviceclasses", "resource.k8s.io", parts[4])
        return 200, copy.deepcopy(found)
    raise not_served(method, path)


def route_slices(
    api: SliceStore, method: str, path: str, query: dict[str, str], body: dict[str, Any]
) -> Answer:
    parts = path.strip("/").split("/")
    if path == f"{RESOURCE}/resourceslices":
        if method == "GET":
            errors = list_option_errors(query, watch=False, watch_list_enabled=api.watch_list)
            if errors:
                raise invalid_list_options(errors)
            selector = parse_field_selector(query.get("fieldSelector", ""))
            items = [copy.deepcopy(s) for _, s in sorted(api.slices.items()) if matches(s, selector)]
            return 200, {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSliceList",
                "metadata": {"resourceVersion": str(api.current_rv)},
                "items": items,
            }
        if method == "POST":
            dry_run = query.get("dryRun") == "All"
            return 201, copy.deepcopy(api._create_slice(body, dry_run=dry_run))
    if path.startswith(f"{RESOURCE}/resourceslices/") and len(parts) == 5:
        name = parts[4]
        if method == "GET":
            return 200, copy.deepcopy(api._get_slice(name))
        if method == "PUT":
            return 200, copy.deepcopy(api._update_slice(name, body))
        if method == "DELETE":
            uid = (body.get("preconditions") or {}).get("uid")
            return 200, copy.deepcopy(api._delete_slice(name, uid))
    raise not_served(method, path)
