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

The modules, each importing only those listed before it: `errors` (ApiError, the 422 of an invalid
object), `gates` (the emulated version's feature gates), `slice_rules` (a ResourceSlice's validation),
`list_options` (field selectors, list and watch options), `kubeconfig` (the token, a kubeconfig),
`store` (the condition, resourceVersions, watch events), `objects` (Nodes, claims, pods, Deployments,
DeviceClasses), `slices` (ResourceSlices, the garbage collector), `faults` (injected faults, held
requests), `routes` (a request's answer), `watch` (watch streams), `handler` (one HTTP connection) and
`server` (`FakeAPIServer`). What this package exports is what tests and benchmarks import.
"""

from __future__ import annotations

from .errors import ApiError
from .faults import Fault, Hold
from .gates import (
    GATED_DEVICE_FIELDS,
    GATES_ON_BY_DEFAULT,
    GATES_SINCE,
    K8S_VERSION,
    drop_disabled_fields,
    gate_served,
    taints_served,
    version_tuple,
)
from .kubeconfig import TOKEN, write_kubeconfig
from .list_options import (
    SLICE_FIELD_LABELS,
    invalid_list_options,
    list_option_errors,
    matches,
    parse_field_selector,
)
from .routes import RESOURCE
from .server import FakeAPIServer
from .slice_rules import (
    C_IDENTIFIER,
    LABEL_VALUE,
    MAX_ATTRS_AND_CAPS,
    MAX_DEVICES,
    SEMVER,
    device_rule_errors,
    gated_rule_errors,
    slice_rule_errors,
    taint_rule_errors,
    validate_slice,
)
from .watch import INITIAL_EVENTS_END

__all__ = [
    "C_IDENTIFIER",
    "GATED_DEVICE_FIELDS",
    "GATES_ON_BY_DEFAULT",
    "GATES_SINCE",
    "INITIAL_EVENTS_END",
    "K8S_VERSION",
    "LABEL_VALUE",
    "MAX_ATTRS_AND_CAPS",
    "MAX_DEVICES",
    "RESOURCE",
    "SEMVER",
    "SLICE_FIELD_LABELS",
    "TOKEN",
    "ApiError",
    "FakeAPIServer",
    "Fault",
    "Hold",
    "device_rule_errors",
    "drop_disabled_fields",
    "gate_served",
    "gated_rule_errors",
    "invalid_list_options",
    "list_option_errors",
    "matches",
    "parse_field_selector",
    "slice_rule_errors",
    "taint_rule_errors",
    "taints_served",
    "validate_slice",
    "version_tuple",
    "write_kubeconfig",
]
