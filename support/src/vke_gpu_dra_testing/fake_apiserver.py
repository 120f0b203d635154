"""An in-process fake of the Kubernetes API server for the plugin's tests.

Served over HTTP on 127.0.0.1 with `http.server` (one thread per connection) and used through
the driver's real API client (`KubeAPI`) via a kubeconfig pointing at it. It implements what the plugin
uses: nodes get; resourceclaims get (with `resourceVersion=0` served from a watch cache that
`freeze_claim_cache` can make stale, as the apiserver's may lag behind etcd; without a
resourceVersion, a quorum read of the current object) and the server-side apply of their `status`
(`status.devices` by key, `fake_claim_status`; dropped with `claim_device_status = False`);
resourceslices list/get/create/update/delete/watch with fieldSelector, generateName, resourceVersion
(409 on a stale one), watch streams with ADDED/MODIFIED/DELETED/ERROR and 410 Gone for a compacted
resourceVersion, and watch-list requests (`sendInitialEvents=true`: the current objects, then a
BOOKMARK annotated `k8s.io/initial-events-end`). With `watch_list = False` it refuses them like an
apiserver without the WatchList feature (422 Invalid, ListOptions "sendInitialEvents is forbidden for
watch unless the WatchList feature gate is enabled"), validating the list options as the apiserver's
`ValidateListOptions` does. `hang`, `slow` and `hold` make matching requests wait after the
server accepted them: forever (until the server stops), for some seconds, or until an event is
set — an API server that accepts connections but does not answer. Every object it is
sent is validated with kubernetes-validate (1.34, strict) plus the apiserver-only rules the
schema does not express; invalid objects get 422 Invalid with a Status body.

It emulates one Kubernetes version (`k8s_version`, "1.34.0" by default; `/version` answers it; the
JSON schema of that version validates) with its device-taint rules for `spec.devices[].taints`
(KEP-5055): the field is dropped silently unless the server serves it (1.36+, where the beta is on by
default, or an older version with "DRADeviceTaints" in `feature_gates`); where served, at most 4 taints
per device on 1.34 and 16 from 1.35 (and then at most 64 devices in a slice whose devices carry
taints), effects NoSchedule and NoExecute, plus None from 1.35, keys qualified names, values label
values, and `timeAdded` set to the current time when missing. The other fields of a feature gate are
dropped the same way where the gate is off (all beta and on by default from 1.36, alpha and off before;
`feature_gates` turns one on): `allowMultipleAllocations` and capacities' `requestPolicy`
(DRAConsumableCapacity), `bindsToNode`, `bindingConditions` and `bindingFailureConditions`
(DRADeviceBindingConditions), `spec.sharedCounters` and devices' `consumesCounters`
(DRAPartitionableDevices; from 1.35 a slice has either `sharedCounters` or `devices`, as KEP-4815 moved
counters to slices of their own), and a DeviceClass's `extendedResourceName` (DRAExtendedResource;
DeviceClasses can be created, read and dry-run). `?dryRun=All` on a create validates, defaults and
answers without storing.

Optionally it runs the garbage collector's rule for owner references (`start_garbage_collector`):
a slice whose owner references all name a Node that does not exist with that UID is deleted,
as kube-controller-manager does with dependents of absent owners (an owner reference is
matched by UID, so a deleted and re-created Node does not own the old slices).
"""

from __future__ import annotations

import copy
import itertools
import json
import random
import re
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kubernetes_validate
from vke_gpu_dra_core import dra_gates
from vke_gpu_dra_core.object_names import is_dns_label, is_dns_subdomain

from . import fake_claim_status

TOKEN = "fake-apiserver-token"
K8S_VERSION = "1.34.0"
RESOURCE = "/apis/resource.k8s.io/v1"
MAX_DEVICES = 128
MAX_ATTRS_AND_CAPS = 32

C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    @classmethod
    def not_found(cls, resource: str, group: str, name: str) -> ApiError:
        """The API server's 404 for a named object of `resource` in API `group`."""
        return cls(
            404,
            "NotFound",
            f'{resource}.{group} "{name}" not found',
            {"name": name, "group": group, "kind": resource},
        )

    def status(self) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.code,
        }


def _qualified_name(name: str) -> bool:
    domain, _, ident = name.rpartition("/")
    if domain and not is_dns_subdomain(domain, 63):
        return False
    return 0 < len(ident) <= 32 and bool(C_IDENTIFIER.match(ident))


def slice_rule_errors(obj: dict[str, Any]) -> list[str]:
    """ResourceSlice rules the apiserver enforces and the JSON schema does not."""
    errors: list[str] = []
    spec = obj.get("spec") or {}
    name = obj.get("metadata", {}).get("name", "")
    if name and not is_dns_subdomain(name):
        errors.append(f"metadata.name: Invalid value: {name!r}: must be a DNS subdomain")
    driver = spec.get("driver", "")
    if not is_dns_subdomain(driver, 63):
        errors.append(
            f"spec.driver: Invalid value: {driver!r}: must be a DNS subdomain of at most 63 characters"
        )
    pool = spec.get("pool") or {}
    pool_name = pool.get("name", "")
    if not (0 < len(pool_name) <= 253 and all(is_dns_subdomain(p) for p in pool_name.split("/"))):
        errors.append(f"spec.pool.name: Invalid value: {pool_name!r}")
    if int(pool.get("resourceSliceCount", 0)) <= 0:
        errors.append("spec.pool.resourceSliceCount: Invalid value: must be greater than zero")
    if int(pool.get("generation", -1)) < 0:
        errors.append("spec.pool.generation: Invalid value: must be greater than or equal to zero")
    chosen = [k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k)]
    if len(chosen) != 1:
        errors.append(
            "spec: Invalid value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
            f"`perDeviceNodeSelection` is required, got {chosen}"
        )
    devices = spec.get("devices") or []
    if len(devices) > MAX_DEVICES:
        errors.append(f"spec.devices: Too many: {len(devices)}: must have at most {MAX_DEVICES} items")
    names = [dev.get("name", "") for dev in devices]
    errors += [
        f"spec.devices: Duplicate value: {n!r}" for n in sorted({n for n in names if names.count(n) > 1})
    ]
    for i, dev in enumerate(devices):
        errors += device_rule_errors(f"spec.devices[{i}]", dev)
    return errors


def device_rule_errors(path: str, dev: dict[str, Any]) -> list[str]:
    errors: list[str] = []
    dname = dev.get("name", "")
    if not is_dns_label(dname):
        errors.append(f"{path}.name: Invalid value: {dname!r}: must be a DNS label")
    attrs, caps = dev.get("attributes") or {}, dev.get("capacity") or {}
    if len(attrs) + len(caps) > MAX_ATTRS_AND_CAPS:
        errors.append(f"{path}: Too many: attributes and capacities must be at most {MAX_ATTRS_AND_CAPS}")
    errors += [
        f"{path}.{kind}[{key}]: Invalid value: not a qualified name"
        for kind, keys in (("attributes", attrs), ("capacity", caps))
        for key in keys
        if not _qualified_name(key)
    ]
    for key, value in attrs.items():
        kinds = [k for k in ("int", "bool", "string", "version") if k in value]
        if len(kinds) != 1:
            errors.append(f"{path}.attributes[{key}]: Invalid value: exactly one value must be specified")
            continue
        v = value[kinds[0]]
        if kinds[0] in ("string", "version") and len(v) > 64:
            errors.append(f"{path}.attributes[{key}].{kinds[0]}: Too long: may not be more than 64 bytes")
        if kinds[0] == "version" and not SEMVER.match(v):
            errors.append(
                f"{path}.attributes[{key}].version: Invalid value: {v!r}: "
                "must be a string compatible with semver.org spec 2.0.0"
            )
    return errors


LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _label_key(key: str) -> bool:
    """A label key (validation.IsQualifiedName): optional DNS-subdomain prefix, a name of 1-63 characters."""
    prefix, _, name = key.rpartition("/")
    if prefix and not is_dns_subdomain(prefix):
        return False
    return 0 < len(name) <= 63 and bool(LABEL_VALUE.match(name))


def version_tuple(version: str) -> tuple[int, int]:
    major, minor = version.lstrip("v").split(".")[:2]
    return int(major), int(minor)


def taints_served(version: str, feature_gates: set[str]) -> bool:
    """Device taints: beta and on by default from 1.36; alpha (gate off by default) in 1.33-1.35."""
    v = version_tuple(version)
    return v >= (1, 36) or (v >= (1, 33) and "DRADeviceTaints" in feature_gates)


#: Feature gate -> the version that turns it on by default (beta), for the gated fields emulated here.
GATES_ON_BY_DEFAULT = {gate: releases[1] for gate, releases in dra_gates.RELEASES.items()}
#: The first version of each gate (alpha): before it the fields are dropped whatever the gates.
GATES_SINCE = {gate: releases[0] for gate, releases in dra_gates.RELEASES.items()}
#: Device fields per gate (DRADeviceTaints' taints have their own rules, `_taint_fields`).
GATED_DEVICE_FIELDS = {
    "DRAConsumableCapacity": ("allowMultipleAllocations",),
    "DRADeviceBindingConditions": ("bindsToNode", "bindingConditions", "bindingFailureConditions"),
    "DRAPartitionableDevices": ("consumesCounters",),
}


def gate_served(gate: str, version: str, feature_gates: set[str]) -> bool:
    """Whether the emulated server has `gate` on: by default from its beta, or turned on after its alpha."""
    v = version_tuple(version)
    return v >= GATES_ON_BY_DEFAULT[gate] or (v >= GATES_SINCE[gate] and gate in feature_gates)


def _uses(obj: dict[str, Any] | None, gate: str) -> bool:
    """The object already uses a field of `gate` (an update keeps it, as dropDisabledFields does)."""
    spec = (obj or {}).get("spec") or {}
    if gate == "DRAPartitionableDevices" and spec.get("sharedCounters"):
        return True
    devices = spec.get("devices") or []
    if gate == "DRAConsumableCapacity" and any(
        "requestPolicy" in (c or {}) for d in devices for c in (d.get("capacity") or {}).values()
    ):
        return True
    return any(field in d for d in devices for field in GATED_DEVICE_FIELDS.get(gate, ()))


def drop_disabled_fields(
    obj: dict[str, Any], version: str, feature_gates: set[str], old: dict[str, Any] | None = None
) -> None:
    """Remove from a ResourceSlice the fields of gates the server has off (in place)."""
    spec = obj.get("spec") or {}
    devices = spec.get("devices") or []
    for gate, fields in GATED_DEVICE_FIELDS.items():
        if gate_served(gate, version, feature_gates) or _uses(old, gate):
            continue
        for dev in devices:
            for field in fields:
                dev.pop(field, None)
            if gate == "DRAConsumableCapacity":
                for capacity in (dev.get("capacity") or {}).values():
                    if isinstance(capacity, dict):
                        capacity.pop("requestPolicy", None)
        if gate == "DRAPartitionableDevices":
            spec.pop("sharedCounters", None)


def gated_rule_errors(obj: dict[str, Any], version: str) -> list[str]:
    """The apiserver's rules of the gated fields the fake checks: one of counters or devices from 1.35,
    a `requestPolicy` only on a device that allows multiple allocations."""
    spec = obj.get("spec") or {}
    errors: list[str] = []
    if version_tuple(version) >= (1, 35) and spec.get("sharedCounters") and spec.get("devices"):
        errors.append('spec: Invalid value: "": only one of `sharedCounters` or `devices` is allowed')
    for i, dev in enumerate(spec.get("devices") or []):
        for name, capacity in (dev.get("capacity") or {}).items():
            policy = isinstance(capacity, dict) and "requestPolicy" in capacity
            if policy and not dev.get("allowMultipleAllocations"):
                errors.append(
                    f"spec.devices[{i}].capacity[{name}].requestPolicy: Forbidden: "
                    "allowMultipleAllocations must be true"
                )
    return errors


def taint_rule_errors(obj: dict[str, Any], version: str) -> list[str]:
    """The apiserver's device-taint validation of that version."""
    v = version_tuple(version)
    max_taints = 4 if v < (1, 35) else 16
    effects = ("NoSchedule", "NoExecute") if v < (1, 35) else ("None", "NoSchedule", "NoExecute")
    errors: list[str] = []
    devices = (obj.get("spec") or {}).get("devices") or []
    if v >= (1, 35) and any(d.get("taints") for d in devices) and len(devices) > 64:
        errors.append(
            f"spec.devices: Too many: {len(devices)}: must have at most 64 items when devices have taints"
        )
    for i, dev in enumerate(devices):
        taints = dev.get("taints") or []
        if len(taints) > max_taints:
            errors.append(
                f"spec.devices[{i}].taints: Too many: {len(taints)}: must have at most {max_taints} items"
            )
        for j, taint in enumerate(taints):
            path = f"spec.devices[{i}].taints[{j}]"
            if not _label_key(str(taint.get("key", ""))):
                errors.append(f"{path}.key: Invalid value: {taint.get('key')!r}: must be a qualified name")
            value = str(taint.get("value", ""))
            if len(value) > 63 or not LABEL_VALUE.match(value):
                errors.append(f"{path}.value: Invalid value: {value!r}: must be a valid label value")
            if taint.get("effect") not in effects:
                errors.append(
                    f"{path}.effect: Unsupported value: {taint.get('effect')!r}: supported values: "
                    + ", ".join(f'"{e}"' for e in effects)
                )
    return errors


def validate_slice(obj: dict[str, Any], version: str = K8S_VERSION) -> None:
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as err:
        raise _invalid(obj, [str(err.message) if hasattr(err, "message") else str(err)]) from err
    errors = slice_rule_errors(obj) + taint_rule_errors(obj, version) + gated_rule_errors(obj, version)
    if errors:
        raise _invalid(obj, errors)


def _invalid(obj: dict[str, Any], errors: list[str]) -> ApiError:
    name = obj.get("metadata", {}).get("name") or obj.get("metadata", {}).get("generateName", "")
    return ApiError(
        422,
        "Invalid",
        f'ResourceSlice.resource.k8s.io "{name}" is invalid: {"; ".join(errors)}',
        {
            "name": name,
            "group": "resource.k8s.io",
            "kind": "ResourceSlice",
            "causes": [{"reason": "FieldValueInvalid", "message": e} for e in errors],
        },
    )


#: Field labels the apiserver accepts for ResourceSlices (resource/v1 AddFieldLabelConversionFunc).
SLICE_FIELD_LABELS = ("metadata.name", "spec.nodeName", "spec.driver")


def parse_field_selector(selector: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in filter(None, selector.split(",")):
        key, sep, value = part.partition("==") if "==" in part else part.partition("=")
        if not sep or key.endswith("!"):
            raise ApiError(400, "BadRequest", f"unsupported field selector {part!r}")
        if key.strip() not in SLICE_FIELD_LABELS:
            raise ApiError(
                400,
                "BadRequest",
                f'Unable to find "resource.k8s.io/v1, Resource=resourceslices" that match label selector "", '
                f'field selector "{selector}": field label not supported: {key.strip()}',
            )
        out[key.strip()] = value.strip()
    return out


def _field(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return "" if cur is None else str(cur)


def matches(obj: dict[str, Any], selector: dict[str, str]) -> bool:
    return all(_field(obj, k) == v for k, v in selector.items())


@dataclass
class Fault:
    method: str
    path_contains: str
    code: int
    remaining: int


@dataclass
class Hold:
    """Matching requests wait before they are answered: until `release` is set (None: never),
    or `delay` seconds when given. `waiting` counts the requests held right now."""

    method: str
    path_contains: str
    release: threading.Event | None = None
    delay: float | None = None
    waiting: int = 0
    seen: int = 0


INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def list_option_errors(
    query: dict[str, str], *, watch: bool, watch_list_enabled: bool
) -> list[tuple[str, str]]:
    """(field, message) for list options the apiserver refuses (apimachinery ValidateListOptions)."""
    errors: list[tuple[str, str]] = []
    send = query.get("sendInitialEvents")
    match = query.get("resourceVersionMatch", "")
    if not watch:
        if send is not None:
            errors.append(("sendInitialEvents", "sendInitialEvents is forbidden for list"))
        return errors
    if send is not None:
        if match != "NotOlderThan":
            errors.append(
                (
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                )
            )
        if not watch_list_enabled:
            errors.append(
                (
                    "sendInitialEvents",
                    "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
                )
            )
    if match:
        if send is None:
            errors.append(
                (
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                )
            )
        elif match != "NotOlderThan":
            errors.append(
                ("resourceVersionMatch", f'Unsupported value: "{match}": supported values: "NotOlderThan"')
            )
    return errors


def invalid_list_options(errors: list[tuple[str, str]]) -> ApiError:
    """The 422 a real apiserver sends for refused list options (group meta.k8s.io, kind ListOptions)."""
    texts = [f"{field}: Forbidden: {msg}" for field, msg in errors]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    return ApiError(
        422,
        "Invalid",
        f'ListOptions.meta.k8s.io "" is invalid: {joined}',
        {
            "group": "meta.k8s.io",
            "kind": "ListOptions",
            "causes": [
                {"reason": "FieldValueForbidden", "message": f"Forbidden: {msg}", "field": field}
                for field, msg in errors
            ],
        },
    )


class _Listener(ThreadingHTTPServer):
    """Listens with the system's backlog, as the API server's Go listener does. The standard library's
    5 would drop the connection requests of a burst (a plugin reading many claims at once) and make
    each wait a second for its SYN to be sent again, which no real API server does."""

    request_queue_size = socket.SOMAXCONN


class FakeAPIServer:
    """State, HTTP serving and test helpers. Use as a context manager or call start()/stop()."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        #: Serve HTTPS with this context (a test's self-signed certificate) instead of HTTP.
        self.ssl_context = ssl_context
        self.cond = threading.Condition()
        self._rv = itertools.count(1)
        self.current_rv = 0
        self.nodes: dict[str, dict[str, Any]] = {}
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.slices: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[int, str, dict[str, Any]]] = []
        self.compacted_rv = 0
        #: How often compact() ran: it ends every open watch with 410 Gone, caught up or not.
        self.compactions = 0
        self.requests: list[tuple[str, str]] = []
        self.faults: list[Fault] = []
        self.holds: list[Hold] = []
        #: False: refuse watch-list requests like an apiserver without the WatchList feature.
        self.watch_list = True
        #: Watch streams open right now (after their initial events were sent).
        self.watching = 0
        #: When set, watch requests wait for this event before they start (to order a test's steps).
        self.watch_gate: threading.Event | None = None
        self.closing = False
        self._random = random.Random(1)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._gc_thread: threading.Thread | None = None
        self.collected: list[str] = []  # names of slices the garbage collector deleted
        #: apps/v1 Deployments by (namespace, name); `status.readyReplicas` is set by `set_ready`.
        self.deployments: dict[tuple[str, str], dict[str, Any]] = {}
        #: When True, a created Deployment is ready at once (its pod started and passed its probe).
        self.deployments_become_ready = False
        #: What a claim read with `resourceVersion=0` sees while `freeze_claim_cache` holds it (None: the
        #: cache is current, as it is within milliseconds on a healthy apiserver).
        self.claim_cache: dict[tuple[str, str], dict[str, Any]] | None = None
        #: The Kubernetes version emulated (/version, the schema, the device-taint rules).
        self.k8s_version = K8S_VERSION
        #: Feature gates on beyond the version's defaults (e.g. "DRADeviceTaints" before 1.36).
        self.feature_gates: set[str] = set()
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

    # --- lifecycle ---

    def start(self) -> FakeAPIServer:
        server = self

        class Handler(_Handler):
            api = server

        self._httpd = _Listener(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        if self.ssl_context is not None:
            self._httpd.socket = self.ssl_context.wrap_socket(self._httpd.socket, server_side=True)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-apiserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> FakeAPIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"{'https' if self.ssl_context else 'http'}://{host!s}:{port}"

    def write_kubeconfig(self, path: Path, *, insecure: bool = False) -> Path:
        return write_kubeconfig(path, self.url, insecure=insecure)

    # --- state helpers (all under self.cond) ---

    def _next_rv(self) -> str:
        self.current_rv = next(self._rv)
        return str(self.current_rv)

    def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        self.events.append((int(obj["metadata"]["resourceVersion"]), kind, copy.deepcopy(obj)))
        self.cond.notify_all()

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

    def add_claim(self, claim: dict[str, Any]) -> None:
        with self.cond:
            claim = copy.deepcopy(claim)
            claim["metadata"].setdefault("uid", str(uuid.uuid4()))
            claim["metadata"]["resourceVersion"] = self._next_rv()
            self.claims[(claim["metadata"]["namespace"], claim["metadata"]["name"])] = claim

    def delete_claim(self, namespace: str, name: str) -> None:
        """Delete a claim as a user would, whatever pods or kubelet still think of it."""
        with self.cond:
            del self.claims[(namespace, name)]

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

    def compact(self) -> None:
        """Forget history: open watches and watches from an older resourceVersion get 410 Gone."""
        with self.cond:
            self.compacted_rv = self.current_rv
            self.compactions += 1
            self.events.clear()
            self.cond.notify_all()

    def pass_watch_gate(self) -> bool:
        """Wait until `watch_gate` (if any) is set; False when the server closes first."""
        gate = self.watch_gate
        while gate is not None and not gate.wait(0.05):
            if self.closing:
                return False
        return True

    def inject_fault(self, method: str, path_contains: str, code: int, times: int = 1) -> None:
        with self.cond:
            self.faults.append(Fault(method, path_contains, code, times))

    def hang(self, method: str, path_contains: str) -> Hold:
        """Matching requests are accepted and never answered (until the server stops)."""
        return self._hold(Hold(method, path_contains))

    def slow(self, method: str, path_contains: str, seconds: float) -> Hold:
        """Matching requests are answered after `seconds`."""
        return self._hold(Hold(method, path_contains, delay=seconds))

    def hold(self, method: str, path_contains: str, release: threading.Event) -> Hold:
        """Matching requests are answered once `release` is set."""
        return self._hold(Hold(method, path_contains, release=release))

    def _hold(self, hold: Hold) -> Hold:
        with self.cond:
            self.holds.append(hold)
        return hold

    def unhold(self) -> None:
        """Answer held requests now and hold no more."""
        with self.cond:
            for hold in self.holds:
                hold.release = hold.release or threading.Event()
                hold.release.set()
            self.holds.clear()
            self.cond.notify_all()

    def wait_held(self, hold: Hold) -> bool:
        """Wait (bounded) until the held requests of `hold` are answered or dropped."""
        deadline = time.monotonic() + 10
        with self.cond:
            while hold.waiting and not self.closing and time.monotonic() < deadline:
                self.cond.wait(0.05)
            return hold.waiting == 0

    def count(self, method: str, path_contains: str = "") -> int:
        with self.cond:
            return sum(1 for m, p in self.requests if m == method and path_contains in p)

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        """Poll `predicate` until it is true (returns False after `timeout`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            with self.cond:
                self.cond.wait(0.02)
        return predicate()

    def set_ready(self, namespace: str, name: str, ready: int = 1) -> None:
        """What the Deployment controller and kubelet report once the pod's probe passed."""
        with self.cond:
            self.deployments[(namespace, name)]["status"] = {"replicas": 1, "readyReplicas": ready}

    # --- resource logic (callers hold self.cond) ---

    def _route_pods(self, method: str, parts: list[str], query: dict[str, str]) -> tuple[int, Any] | None:
        """GET /api/v1/pods (a list; no other pod request is served), None for any other request."""
        if method == "GET" and parts == ["api", "v1", "pods"]:
            return 200, self._list_pods(query)
        return None

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
            raise _invalid(obj, [str(getattr(err, "message", err))]) from err
        spec = obj["spec"]
        labels = spec["template"].get("metadata", {}).get("labels", {})
        if any(labels.get(k) != v for k, v in spec["selector"].get("matchLabels", {}).items()):
            message = "spec.template.metadata.labels: Invalid value: selector does not match template labels"
            raise _invalid(obj, [message])
        name = md.get("name", "")
        if not is_dns_subdomain(name):
            raise _invalid(obj, [f"metadata.name: Invalid value: {name!r}: must be a DNS subdomain"])
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

    def _route_deployments(
        self, method: str, parts: list[str], body: dict[str, Any]
    ) -> tuple[int, Any] | None:
        if parts[:4] != ["apis", "apps", "v1", "namespaces"] or len(parts) < 6 or parts[5] != "deployments":
            return None
        namespace = parts[4]
        if len(parts) == 6 and method == "POST":
            return 201, copy.deepcopy(self._create_deployment(namespace, body))
        if len(parts) == 7:
            key = (namespace, parts[6])
            if key not in self.deployments:
                raise ApiError.not_found("deployments", "apps", parts[6])
            if method == "GET":
                return 200, copy.deepcopy(self.deployments[key])
            if method == "DELETE":
                if body.get("propagationPolicy") not in (None, "Foreground", "Background", "Orphan"):
                    policy = body.get("propagationPolicy")
                    raise ApiError(400, "BadRequest", f"invalid propagationPolicy {policy}")
                return 200, self.deployments.pop(key)
        return None

    @staticmethod
    def _as_stored(obj: dict[str, Any]) -> None:
        """Drop what the apiserver does not keep: `spec.devices` is `omitempty`, so [] comes back absent."""
        spec = obj.get("spec")
        if isinstance(spec, dict) and spec.get("devices") == []:
            del spec["devices"]

    def version_info(self) -> dict[str, Any]:
        major, minor = version_tuple(self.k8s_version)
        return {"major": str(major), "minor": str(minor), "gitVersion": f"v{self.k8s_version}"}

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
                raise _invalid(obj, ["metadata.name: Required value: name or generateName is required"])
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
            raise _invalid(obj, [f"spec.{f}: Invalid value: field is immutable" for f in immutable])
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


class _Handler(BaseHTTPRequestHandler):
    api: FakeAPIServer
    protocol_version = "HTTP/1.1"
    # Headers and body are separate writes: without TCP_NODELAY every response waits for the
    # client's delayed ACK (about 40 ms on Linux), as a real apiserver's never does.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    # --- plumbing ---

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError as err:
            raise ApiError(400, "BadRequest", f"invalid JSON body: {err}") from err

    def _handle(self, method: str) -> None:
        split = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        path = split.path.rstrip("/")
        api = self.api
        body: dict[str, Any] = {}
        try:
            if method in ("POST", "PUT", "PATCH", "DELETE"):
                body = self._body()
            with api.cond:
                api.requests.append((method, self.path))
                for fault in api.faults:
                    if fault.remaining and fault.method == method and fault.path_contains in self.path:
                        fault.remaining -= 1
                        raise ApiError(fault.code, "InternalError", "injected fault")
                hold = next(
                    (h for h in api.holds if h.method == method and h.path_contains in self.path), None
                )
            if hold is not None and not self._wait(hold):
                self.close_connection = True  # the server stopped: drop the request unanswered
                return
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if (
                method == "GET"
                and path == f"{RESOURCE}/resourceslices"
                and query.get("watch") in ("true", "1")
            ):
                errors = list_option_errors(query, watch=True, watch_list_enabled=api.watch_list)
                if errors:
                    raise invalid_list_options(errors)
                self._watch(query)
                return
            code, result = self._route(method, path, query, body)
            self._send(code, result)
        except ApiError as err:
            self._send(err.code, err.status())

    def _wait(self, hold: Hold) -> bool:
        """Hold this request as `hold` says; False when the server stops first."""
        api = self.api
        until = None if hold.delay is None else time.monotonic() + hold.delay
        with api.cond:
            hold.waiting += 1
            hold.seen += 1
            api.cond.notify_all()
            try:
                while not api.closing:
                    if hold.release is not None and hold.release.is_set():
                        return True
                    if until is not None and time.monotonic() >= until:
                        return True
                    api.cond.wait(0.02)
                return False
            finally:
                hold.waiting -= 1
                api.cond.notify_all()

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    # --- routes ---

    def _route(self, method: str, path: str, query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        api = self.api
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
            if (
                method == "GET"
                and len(parts) == 7
                and parts[:3] == ["apis", "resource.k8s.io", "v1"]
                and parts[3] == "namespaces"
                and parts[5] == "resourceclaims"
            ):
                store = api.claims
                if query.get("resourceVersion") == "0" and api.claim_cache is not None:
                    store = api.claim_cache  # served from the (stale) watch cache
                claim = store.get((parts[4], parts[6]))
                if claim is None:
                    raise ApiError.not_found("resourceclaims", "resource.k8s.io", parts[6])
                return 200, copy.deepcopy(claim)
            routed = (
                api._route_pods(method, parts, query)
                or api._route_deployments(method, parts, body)
                or self._route_claim_status(method, parts, query, body)
            )
            if routed is not None:
                return routed
            if path.startswith(f"{RESOURCE}/deviceclasses"):
                return self._route_device_classes(method, path, query, body)
            return self._route_slices(method, path, query, body)

    def _route_claim_status(
        self, method: str, parts: list[str], query: dict[str, str], body: dict[str, Any]
    ) -> tuple[int, Any] | None:
        """Server-side apply (only) of a claim's status, `status.devices` by key (`fake_claim_status`)."""
        if not (
            method == "PATCH" and len(parts) == 8 and parts[5] == "resourceclaims" and parts[7] == "status"
        ):
            return None
        api = self.api
        namespace, name = parts[4], parts[6]
        if self.headers.get("Content-Type") != "application/apply-patch+yaml":
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

    def _route_device_classes(
        self, method: str, path: str, query: dict[str, str], body: dict[str, Any]
    ) -> tuple[int, Any]:
        api = self.api
        parts = path.strip("/").split("/")
        if path == f"{RESOURCE}/deviceclasses" and method == "POST":
            dry_run = query.get("dryRun") == "All"
            return 201, copy.deepcopy(api._create_device_class(body, dry_run=dry_run))
        if len(parts) == 5 and method == "GET":
            found = api.device_classes.get(parts[4])
            if found is None:
                raise ApiError.not_found("deviceclasses", "resource.k8s.io", parts[4])
            return 200, copy.deepcopy(found)
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({method} {path})")

    def _route_slices(
        self, method: str, path: str, query: dict[str, str], body: dict[str, Any]
    ) -> tuple[int, Any]:
        api = self.api
        parts = path.strip("/").split("/")
        with api.cond:
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
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({method} {path})")

    def _chunk(self, event: dict[str, Any]) -> None:
        data = json.dumps(event).encode() + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _initial_events(self, selector: dict[str, str], *, bookmarks: bool) -> list[dict[str, Any]]:
        """Watch-list: the current objects, then the bookmark that ends the initial events."""
        api = self.api
        events: list[dict[str, Any]] = [
            {"type": "ADDED", "object": copy.deepcopy(s)}
            for _, s in sorted(api.slices.items())
            if matches(s, selector)
        ]
        if bookmarks:
            metadata = {"resourceVersion": str(api.current_rv), "annotations": {INITIAL_EVENTS_END: "true"}}
            events.append(
                {
                    "type": "BOOKMARK",
                    "object": {
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "ResourceSlice",
                        "metadata": metadata,
                    },
                }
            )
        return events

    def _watch_start(
        self, rv_param: str, selector: dict[str, str], *, send_initial: bool, bookmarks: bool
    ) -> tuple[list[dict[str, Any]], int | None]:
        """The first events of a watch and the resourceVersion it continues from (None: it ends)."""
        api = self.api
        with api.cond:
            if send_initial:
                return self._initial_events(selector, bookmarks=bookmarks), api.current_rv
            if rv_param not in ("", "0") and int(rv_param) < api.compacted_rv:
                expired = ApiError(
                    410, "Expired", f"too old resource version: {rv_param} ({api.compacted_rv})"
                )
                return [{"type": "ERROR", "object": expired.status()}], None
            if rv_param in ("", "0"):
                return self._initial_events(selector, bookmarks=False), api.current_rv
            return [], int(rv_param)

    def _watch(self, query: dict[str, str]) -> None:
        api = self.api
        selector = parse_field_selector(query.get("fieldSelector", ""))
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        rv_param = query.get("resourceVersion", "")
        send_initial = query.get("sendInitialEvents") == "true"
        bookmarks = query.get("allowWatchBookmarks") == "true"
        if not api.pass_watch_gate():
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        opened = False
        with api.cond:
            compactions = api.compactions
        try:
            pending, last = self._watch_start(
                rv_param, selector, send_initial=send_initial, bookmarks=bookmarks
            )
            while True:
                for event in pending:
                    self._chunk(event)
                if last is None:
                    break
                if not opened:
                    opened = True
                    with api.cond:
                        api.watching += 1
                        api.cond.notify_all()
                with api.cond:
                    while not api.closing and not any(rv > last for rv, _, _ in api.events):
                        remaining = deadline - time.monotonic()
                        if remaining <= 0 or api.compacted_rv > last or api.compactions != compactions:
                            break
                        api.cond.wait(min(remaining, 0.5))
                    if api.closing or time.monotonic() >= deadline:
                        break
                    expired_now = api.compacted_rv > last or api.compactions != compactions
                    if expired_now and not any(rv > last for rv, _, _ in api.events):
                        expired = ApiError(410, "Expired", "too old resource version")
                        pending, last = [{"type": "ERROR", "object": expired.status()}], None
                        continue
                    new = [(rv, t, o) for rv, t, o in api.events if rv > last]
                    pending = [
                        {"type": t, "object": copy.deepcopy(o)} for _, t, o in new if matches(o, selector)
                    ]
                    last = new[-1][0]
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            return
        finally:
            if opened:
                with api.cond:
                    api.watching -= 1
                    api.cond.notify_all()


def write_kubeconfig(path: Path, server: str, *, insecure: bool = False) -> Path:
    """A kubeconfig at `path` for `server` with the fake's token (context, cluster and user `fake`)."""
    cluster: dict[str, Any] = {"server": server}
    if insecure:
        cluster["insecure-skip-tls-verify"] = True
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "fake",
                "clusters": [{"name": "fake", "cluster": cluster}],
                "users": [{"name": "fake", "user": {"token": TOKEN}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            }
        )
    )
    return path
