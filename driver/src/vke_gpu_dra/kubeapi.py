"""Thin access to the Kubernetes API in plain JSON dicts, through the lean transport.

Requests go through `vke_gpu_dra_kube.rest` (http.client; authentication, TLS, proxies and credential
rotation come from the kubeconfig or the service account, `vke_gpu_dra_kube.kubeconfig_loader`);
bodies are sent and returned as camelCase JSON dicts, exactly as the API server speaks them. The
official client is not imported: the plugin starts fast and small.

Every request has a timeout and is tried once (no hidden retries), so a caller with a deadline (a
kubelet call) can bound each request by what is left of it. The connection pool holds `POOL_SIZE`
connections, enough for the plugin's threads.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from vke_gpu_dra_core.kubeconfig import KubeconfigError
from vke_gpu_dra_kube import failures, kubeconfig_loader
from vke_gpu_dra_kube.rest import Response, RestClient, TransportError
from vke_gpu_dra_kube.settings import REQUEST_TIMEOUT

from .api_errors import KubeError
from .claim_wire import PROTOBUF, WireError, read_status


class ClaimSource(Protocol):
    """Reads ResourceClaims (None: 404); `cached` allows the API server's watch cache (`KubeAPI`)."""

    def get_resource_claim(
        self, namespace: str, name: str, timeout: float | None = None, *, cached: bool = False
    ) -> dict[str, Any] | None: ...


RESOURCE_API = "/apis/resource.k8s.io/v1"
SLICE_API_VERSION = "resource.k8s.io/v1"
RESOURCE_API_VERSION = "resource.k8s.io/v1"
#: Content type of a server-side apply (JSON is YAML).
APPLY_PATCH = "application/apply-patch+yaml"
#: Connections kept per API server: the DRA socket's workers, the claim readers and the slice
#: controller's two threads all fit, so no request finds the pool full.
POOL_SIZE = 64


def load_api_client(
    kubeconfig: Path | None,
    *,
    service_account: Path = kubeconfig_loader.SERVICE_ACCOUNT_DIR,
    environ: Mapping[str, str] | None = None,
) -> RestClient:
    """`kubeconfig` if given, else the in-cluster service account (in `service_account`), else
    $KUBECONFIG (a path list, merged as kubectl does) / ~/.kube/config. KubeconfigError if none."""
    if kubeconfig is not None:
        return RestClient(kubeconfig_loader.from_kubeconfig(kubeconfig), pool_size=POOL_SIZE)
    env = os.environ if environ is None else environ
    try:
        config = kubeconfig_loader.in_cluster(service_account, env)
    except kubeconfig_loader.NotInCluster as in_cluster_err:
        try:
            config = kubeconfig_loader.from_kubeconfig(kubeconfig_loader.kubeconfig_paths(env))
        except KubeconfigError as err:
            raise KubeconfigError(
                f"no Kubernetes configuration: not in a cluster ({in_cluster_err}) and {err}; "
                "pass --kubeconfig"
            ) from None
    return RestClient(config, pool_size=POOL_SIZE)


def _within(timeout: float | None) -> Any:
    """A request's timeout: `timeout` seconds for the whole request (a millisecond at least), else the
    default (connect, read) seconds."""
    return REQUEST_TIMEOUT if timeout is None else max(timeout, 0.001)


def slice_field_selector(driver: str, node_name: str) -> str:
    return f"spec.driver={driver},spec.nodeName={node_name}"


#: Annotation of the BOOKMARK that ends a watch-list request's initial events.
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK or ERROR
    object: dict[str, Any]

    @property
    def initial_events_end(self) -> bool:
        annotations = self.object.get("metadata", {}).get("annotations") or {}
        return self.type == "BOOKMARK" and annotations.get(INITIAL_EVENTS_END) == "true"


class Watch:
    """An open watch stream; iterate for events, `close()` from any thread to stop it."""

    def __init__(self, response: Response) -> None:
        self._response = response
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[WatchEvent]:
        buffer = b""
        try:
            for chunk in self._response.stream():
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        raw = json.loads(line)
                        yield WatchEvent(raw.get("type", ""), raw.get("object") or {})
            if buffer.strip():
                raw = json.loads(buffer)
                yield WatchEvent(raw.get("type", ""), raw.get("object") or {})
        except Exception as err:
            if self._closed.is_set():
                return
            raise KubeError(0, "WatchFailed", f"watch stream failed: {err}") from err
        finally:
            # The connection is reused only when the stream was read to its end; else it is dropped.
            self._response.close()

    def close(self) -> None:
        self._closed.set()
        self._response.shutdown()


class KubeAPI:
    """The API calls the plugin makes."""

    def __init__(self, api_client: RestClient) -> None:
        self._client = api_client

    @classmethod
    def from_kubeconfig(cls, kubeconfig: Path | None) -> KubeAPI:
        return cls(load_api_client(kubeconfig))

    def close(self) -> None:
        self._client.close()

    # --- transport ---

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: dict[str, Any] | list[dict[str, Any]] | bytes | None = None,
        timeout: Any = REQUEST_TIMEOUT,
        content_type: str = "application/json",
        accept: str = "application/json",
        stream: bool = False,
    ) -> Response:
        """One attempt; `timeout` is (connect, read) seconds or a total in seconds; `body` is sent with
        `content_type`, as JSON unless it is bytes already. `stream`: the body is left unread. KubeError
        (status 0) when no answer came."""
        payload = body if isinstance(body, bytes) else None if body is None else json.dumps(body).encode()
        try:
            return self._client.request(
                method,
                path,
                query=query or (),
                body=payload,
                content_type=content_type,
                accept=accept,
                timeout=timeout,
                stream=stream,
            )
        except TransportError as err:
            raise KubeError(0, err.failure.reason, f"{method} {path}: {err.failure.message}") from err
        except KubeconfigError as err:  # no credentials to send: an exec plugin failed
            raise KubeError(0, failures.CREDENTIALS_ERROR, f"{method} {path}: {err}") from err

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = self._call(method, path, **kwargs)
        data = response.data
        if not 200 <= response.status <= 299:
            raise _error_from(response.status, str(response.reason or ""), data)
        return json.loads(data) if data else {}

    # --- objects ---

    def get_node(self, name: str) -> dict[str, Any]:
        return self._json("GET", f"/api/v1/nodes/{name}")

    def get_resource_claim(
        self, namespace: str, name: str, timeout: float | None = None, *, cached: bool = False
    ) -> dict[str, Any] | None:
        """The claim, None if it does not exist; `timeout`: seconds for the whole request.

        `cached`: may be served from the API server's watch cache (`resourceVersion=0`, possibly a
        little stale, no etcd read); otherwise a quorum read of the current object.
        """
        try:
            return self._json(
                "GET",
                f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims/{name}",
                query=[("resourceVersion", "0")] if cached else None,
                timeout=_within(timeout),
            )
        except KubeError as err:
            if err.not_found:
                return None
            raise

    def apply_claim_status(
        self, namespace: str, name: str, body: dict[str, Any], *, field_manager: str, timeout: float
    ) -> dict[str, Any]:
        """Server-side apply of `body` to the claim's `status` subresource as `field_manager` (forced: the
        entries it names are the manager's own), one attempt within `timeout` seconds; the stored claim."""
        return self._json(
            "PATCH",
            f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims/{name}/status",
            query=[("fieldManager", field_manager), ("force", "true")],
            body=body,
            timeout=_within(timeout),
            content_type=APPLY_PATCH,
        )

    def get_resource_claim_wire(self, namespace: str, name: str, timeout: float) -> bytes | None:
        """The claim in Kubernetes' protobuf form (`claim_wire`), a quorum read within `timeout` seconds;
        None if it does not exist."""
        response = self._call(
            "GET",
            f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims/{name}",
            timeout=_within(timeout),
            accept=PROTOBUF,
        )
        if response.status == 404:
            return None
        if not 200 <= response.status <= 299:
            raise _wire_error(response.status, str(response.reason or ""), response.data)
        return response.data or b""

    def update_claim_status_wire(
        self, namespace: str, name: str, body: bytes, *, field_manager: str, timeout: float
    ) -> dict[str, Any]:
        """An update of the claim's `status` subresource with `body`, the whole claim in protobuf form
        (`claim_wire.with_devices`: its resourceVersion makes it apply only to the claim as read), as
        `field_manager`, one attempt within `timeout` seconds; the stored claim, as JSON."""
        response = self._call(
            "PUT",
            f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims/{name}/status",
            query=[("fieldManager", field_manager)],
            body=body,
            timeout=_within(timeout),
            content_type=PROTOBUF,
        )
        if not 200 <= response.status <= 299:
            raise _error_from(response.status, str(response.reason or ""), response.data)
        return json.loads(response.data) if response.data else {}

    def list_node_pods(self, node_name: str, timeout: float | None = None) -> list[dict[str, Any]]:
        """The pods bound to `node_name` (`spec.nodeName`, the way kubelet lists its own), read from
        etcd or a cache proven current (a quorum list: no resourceVersion); `timeout`: seconds for the
        whole request. Never a cluster-wide list."""
        if not node_name:
            raise ValueError("list_node_pods needs a node name: a pod list is never cluster-wide")
        data = self._json(
            "GET",
            "/api/v1/pods",
            query=[("fieldSelector", f"spec.nodeName={node_name}")],
            timeout=_within(timeout),
        )
        return [p for p in data.get("items") or [] if isinstance(p, dict)]

    def list_slices(self, driver: str, node_name: str) -> tuple[list[dict[str, Any]], str]:
        """Slices of `driver` on `node_name` and the list's resourceVersion."""
        data = self._json(
            "GET",
            f"{RESOURCE_API}/resourceslices",
            query=[("fieldSelector", slice_field_selector(driver, node_name))],
        )
        return list(data.get("items") or []), str(data.get("metadata", {}).get("resourceVersion", ""))

    def create_slice(self, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Create `obj`; `dry_run`: the server validates and answers what it would store, storing nothing."""
        query = [("dryRun", "All")] if dry_run else None
        return self._json("POST", f"{RESOURCE_API}/resourceslices", query=query, body=obj)

    def server_version(self) -> dict[str, Any]:
        """The API server's /version (gitVersion, major, minor)."""
        return self._json("GET", "/version")

    def update_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._json("PUT", f"{RESOURCE_API}/resourceslices/{obj['metadata']['name']}", body=obj)

    def delete_slice(self, name: str, uid: str | None = None) -> None:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self._json("DELETE", f"{RESOURCE_API}/resourceslices/{name}", body=body)
        except KubeError as err:
            if not err.not_found:
                raise

    def watch_slices(
        self,
        driver: str,
        node_name: str,
        resource_version: str,
        timeout_seconds: int,
        *,
        send_initial_events: bool = False,
    ) -> Watch:
        """A watch from `resource_version`; with `send_initial_events` a watch-list request.

        A watch-list request (KEP 3157) streams the current slices as ADDED events, then a BOOKMARK
        annotated `k8s.io/initial-events-end`, then changes. API servers without the WatchList
        feature refuse it (422 Invalid) before the stream starts.
        """
        query = [
            ("fieldSelector", slice_field_selector(driver, node_name)),
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        if send_initial_events:
            query += [("sendInitialEvents", "true"), ("resourceVersionMatch", "NotOlderThan")]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        response = self._call(
            "GET",
            f"{RESOURCE_API}/resourceslices",
            query=query,
            timeout=(10.0, timeout_seconds + 30.0),
            stream=True,
        )
        if not 200 <= response.status <= 299:
            try:
                data = response.read()
            except TransportError as err:
                raise KubeError(response.status, str(response.reason or ""), "") from err
            raise _error_from(response.status, str(response.reason or ""), data)
        return Watch(response)

    # --- apps/v1 Deployments (MPS control daemons, driver namespace only) ---

    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._json("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
        except KubeError as err:
            if err.not_found:
                return None
            raise

    def create_deployment(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._json("POST", f"/apis/apps/v1/namespaces/{namespace}/deployments", body=obj)
        except KubeError as err:
            if err.status == 409:  # already exists: NVIDIA's plugin treats it as started
                return obj
            raise

    def delete_deployment(self, namespace: str, name: str) -> None:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"}
        try:
            self._json("DELETE", f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}", body=body)
        except KubeError as err:
            if not err.not_found:
                raise


def _error_from(status: int, reason: str, data: bytes | None) -> KubeError:
    message = ""
    if data:
        try:
            body = json.loads(data)
            message = str(body.get("message", ""))
            reason = str(body.get("reason", reason))
        except (ValueError, AttributeError):
            message = data[:500].decode(errors="replace")
    return KubeError(status, reason, message)


def _wire_error(status: int, reason: str, data: bytes | None) -> KubeError:
    """The error of a request answered in protobuf form: the API server's Status message, read."""
    if data:
        try:
            said = read_status(data)
        except WireError:
            said = None
        if said is not None:
            return KubeError(status, said[0] or reason, said[1])
    return _error_from(status, reason, data)


def failure_kind(err: KubeError) -> str:
    """The `reason` label of a failed read."""
    if err.timed_out:
        return "timeout"
    if err.unreachable:
        return "unreachable"
    return {401: "unauthorized", 403: "forbidden"}.get(err.status, "api-error")
