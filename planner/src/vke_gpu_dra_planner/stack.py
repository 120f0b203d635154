"""What a stack asks for and what it buys: GPU pools, DeviceClasses, claim templates and workloads.

Built from a stack's registered resources (type token + input props, read into the same
`vke_gpu_dra_core.resources` view the policy pack's validators use) or from a stack config file plus
Kubernetes manifests (the `plan` command). DeviceClasses default to the driver's (`facts.DEVICE_CLASSES`,
which its chart creates); a stack's own DeviceClass resources override them.

A workload's pods count when they claim devices (`spec.resourceClaims`) or ask an extended resource in a
container's `resources.limits` (or requests): on Kubernetes 1.36 a DeviceClass that maps that name
(`extendedResourceName`, or the implicit `deviceclass.resource.kubernetes.io/<class>`) serves it through
DRA (`Workload.extended`; the verdict turns it into the claim the scheduler creates). With the driver
gate `ConsumableShares` (the stack config's `driver.featureGates`) the pools' GPUs are published for
several claims each (`GpuPool.consumable_shares`); with the driver gate `DynamicMIG` MIG-capable GPUs
are published as MIG partitions (`GpuPool.dynamic_mig`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from vke_gpu_dra_core import facts, featuregates, pulumi_types
from vke_gpu_dra_core.catalog import CatalogError, InstanceType, load_catalog, lookup
from vke_gpu_dra_core.config import PROJECT, StackConfig
from vke_gpu_dra_core.pool_gpus import pool_variants
from vke_gpu_dra_core.quantity import QuantityError, parse_quantity
from vke_gpu_dra_core.resources import Res, is_known, kubernetes_object, read

from .claims import (
    ClaimTemplate,
    DeviceClass,
    ManifestError,
    PodClaimRef,
    is_extended_resource,
    parse_claim_template,
    parse_device_class,
    parse_pod_claims,
    whole_quantity,
)
from .inventory import GpuPool
from .placement import Placement, parse_placement


@dataclass(frozen=True)
class Workload:
    kind: str
    name: str
    namespace: str
    #: pods running at once (DaemonSet: None = one per GPU node)
    replicas: int | None
    claims: tuple[PodClaimRef, ...]
    urn: str = ""
    placement: Placement = field(default_factory=Placement)
    #: the pod's (milli-CPU, memory bytes) requests, as set and as the scheduler counts them (a
    #: container without a request counts 100m CPU / 200Mi memory)
    requests: tuple[int, int] = (0, 0)
    nonzero: tuple[int, int] = (100, 200 * 1024 * 1024)
    #: extended resources the containers ask: (container index, resource name, quantity)
    extended: tuple[tuple[int, str, int], ...] = ()

    @property
    def label(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass
class StackModel:
    pools: list[list[GpuPool]] = field(default_factory=list)
    classes: dict[str, DeviceClass] = field(default_factory=dict)
    templates: dict[str, ClaimTemplate] = field(default_factory=dict)
    workloads: list[Workload] = field(default_factory=list)
    #: problems found while reading the stack (each names the resource and field)
    problems: list[tuple[str, str]] = field(default_factory=list)
    #: things the reader should know (left out of the count, not violations)
    notes: list[str] = field(default_factory=list)
    #: URNs of resources whose relevant values are unknown (preview): the stack cannot be decided yet
    undecided: list[str] = field(default_factory=list)
    #: labels of the Namespaces the stack (or the manifests) define
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    #: the cluster's Kubernetes version as the stack states it (None: not stated)
    kubernetes_version: str | None = None
    #: the cluster's version is unknown (preview): version-gated answers cannot be decided
    version_unknown: bool = False
    #: the driver gate ConsumableShares: GPUs take several claims (on servers that keep the fields)
    consumable_shares: bool = False

    #: the driver gate DynamicMIG: MIG-capable GPUs published as partitionable devices
    dynamic_mig: bool = False

    def share_gpus(self, enabled: bool) -> None:
        """Publish the pools' GPUs as shares (the driver gate ConsumableShares) or whole."""
        self.consumable_shares = enabled
        self.pools = [[replace(p, consumable_shares=enabled) for p in variants] for variants in self.pools]

    def partition_gpus(self, enabled: bool) -> None:
        """Publish the pools' MIG-capable GPUs as MIG partitions (the driver gate DynamicMIG) or whole."""
        self.dynamic_mig = enabled
        self.pools = [[replace(p, dynamic_mig=enabled) for p in variants] for variants in self.pools]

    def template_for(self, workload: Workload, ref: PodClaimRef) -> ClaimTemplate | None:
        name = ref.template or ref.claim or ""
        return self.templates.get(f"{workload.namespace}/{name}")


def default_classes() -> dict[str, DeviceClass]:
    return {c.name: parse_device_class(c.manifest()) for c in facts.DEVICE_CLASSES}


def _number(value: Any, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(value)
    number = float(value)
    if number != int(number) or number < 0:
        raise ValueError(value)
    return int(number)


def _below_spec(spec: Mapping[str, Any], path: Sequence[str]) -> Mapping[str, Any]:
    """What sits at `path` (which starts at the object's `spec`) below `spec`; {} where it is absent."""
    found = spec
    for key in path[1:]:
        found = found.get(key) or {}
    return found


def _mapping_below(spec: Mapping[str, Any], path: Sequence[str]) -> Mapping[str, Any] | None:
    """Like `_below_spec`, but None unless every step is a mapping (values may be unknown)."""
    found: Any = spec
    for key in path[1:]:
        found = found.get(key) if isinstance(found, Mapping) else None
    return found if isinstance(found, Mapping) else None


def _pod_spec(kind: str, spec: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """The pod spec of a workload whose `spec` is given, and its field path."""
    path = pulumi_types.POD_SPEC_PATHS_BY_KIND[kind]
    return _below_spec(spec, path), ".".join(path)


def parse_workload(obj: Mapping[str, Any], urn: str = "") -> Workload | None:
    """A workload whose pods claim devices; None for other objects or pods without claims."""
    kind = obj.get("kind")
    if kind not in pulumi_types.WORKLOAD_KINDS:
        return None
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "<unnamed>")
    where = f"{kind} {name}"
    spec = obj.get("spec") or {}
    pod_spec, field_path = _pod_spec(kind, spec)
    claims = parse_pod_claims(pod_spec, where, field_path)
    extended = pod_extended_resources(pod_spec, where, field_path)
    if not claims and not extended:
        return None
    try:
        if kind in ("Deployment", "StatefulSet", "ReplicaSet"):
            replicas: int | None = _number(spec.get("replicas"), 1)
        elif kind in ("Job", "CronJob"):
            job = _below_spec(spec, pulumi_types.JOB_SPEC_PATHS_BY_KIND[kind])
            parallelism = _number(job.get("parallelism"), 1)
            completions = job.get("completions")
            replicas = parallelism if completions is None else min(parallelism, _number(completions, 1))
        elif kind == "DaemonSet":
            replicas = None
        else:
            replicas = 1
    except ValueError as exc:
        raise ManifestError(f"{where}: replica count {exc.args[0]!r} is not a whole number >= 0") from None
    namespace = str(meta.get("namespace") or "default")
    requests, nonzero = pod_requests(pod_spec, where, field_path)
    return Workload(
        kind, name, namespace, replicas, claims, urn, parse_placement(pod_spec), requests, nonzero, extended
    )


def pod_extended_resources(
    pod_spec: Mapping[str, Any], where: str, field: str
) -> tuple[tuple[int, str, int], ...]:
    """(container, name, quantity) of each extended resource a container asks (limits, else requests).

    Init containers are not read (the scheduler's claim for them is the larger of the two; GPU pods
    ask in their containers)."""
    containers = pod_spec.get("containers") or []
    found: list[tuple[int, str, int]] = []
    for i, container in enumerate(containers if isinstance(containers, list) else []):
        resources = container.get("resources") if isinstance(container, Mapping) else None
        if not isinstance(resources, Mapping):
            continue
        asked: dict[str, tuple[str, Any]] = {}
        for part in ("requests", "limits"):  # limits win, as the API server defaults requests from them
            raw = resources.get(part)
            for name, value in raw.items() if isinstance(raw, Mapping) else ():
                if isinstance(name, str) and is_extended_resource(name):
                    asked[name] = (part, value)
        for name, (part, value) in sorted(asked.items()):
            amount = whole_quantity(value)
            if amount is None:
                raise ManifestError(
                    f"{where}: field {field}.containers[{i}].resources.{part}.{name} is {value!r}; "
                    "allowed: a whole number (extended resources are counted in units)"
                )
            if amount:
                found.append((i, name, amount))
    return tuple(found)


#: pkg/scheduler/util: what the scheduler counts for a container without a CPU / memory request
DEFAULT_NONZERO: Final = (100, 200 * 1024 * 1024)


def pod_requests(
    pod_spec: Mapping[str, Any], where: str, field: str
) -> tuple[tuple[int, int], tuple[int, int]]:
    """(milli-CPU, memory) the containers request, and the scheduler's non-zero count of them."""
    containers = pod_spec.get("containers") or [{}]
    asked, nonzero = [0, 0], [0, 0]
    for i, container in enumerate(containers if isinstance(containers, list) else [{}]):
        resources = container.get("resources") if isinstance(container, Mapping) else None
        raw = (resources or {}).get("requests") if isinstance(resources, Mapping) else None
        raw = raw if isinstance(raw, Mapping) else {}
        for slot, (name, scale) in enumerate((("cpu", 1000), ("memory", 1))):
            if name not in raw:
                nonzero[slot] += DEFAULT_NONZERO[slot]
                continue
            try:
                amount = int(parse_quantity(str(raw[name])) * scale)
            except QuantityError:
                raise ManifestError(
                    f"{where}: field {field}.containers[{i}].resources.requests.{name} is "
                    f"{raw[name]!r}; allowed: a Kubernetes quantity such as 500m or 2Gi"
                ) from None
            asked[slot] += amount
            nonzero[slot] += amount
    return (asked[0], asked[1]), (nonzero[0], nonzero[1])


def _labels(props: Mapping[str, Any]) -> dict[str, str]:
    raw = (props.get("kubernetesConfig") or {}).get("labels") or []
    return {str(lb.get("key")): str(lb.get("value") or "") for lb in raw if isinstance(lb, Mapping)}


def _taints(props: Mapping[str, Any]) -> tuple[tuple[str, str, str], ...]:
    raw = (props.get("kubernetesConfig") or {}).get("taints") or []
    return tuple(
        (str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or "NoSchedule"))
        for t in raw
        if isinstance(t, Mapping)
    )


def _family(instance_type: str) -> str:
    return instance_type.rsplit(".", 1)[0]


def pools_from_node_pool(
    props: Mapping[str, Any], name: str, catalog: Mapping[str, InstanceType], model: StackModel | None = None
) -> list[GpuPool]:
    """The variants (one per instance type) of a VKE node pool resource that runs the DRA driver.

    An instance type missing from the catalog is a problem when its family is a catalogued GPU family
    (the GPU count is unknown); any other type is left to the instance-type policy and only noted.
    """
    labels = _labels(props)
    if any(labels.get(k) != v for k, v in facts.REQUIRED_NODE_LABELS.items()):
        return []  # not a DRA GPU pool: the driver publishes nothing there
    pool_name = str(props.get("name") or name)
    scaling = props.get("autoScaling") or {}
    try:
        if scaling.get("enabled"):
            low, high = _number(scaling.get("minReplicas"), 0), _number(scaling.get("maxReplicas"), 10)
        else:
            low = high = _number(scaling.get("desiredReplicas"), 0)
    except ValueError as exc:
        raise ManifestError(
            f"node pool {pool_name}: autoScaling replica count {exc.args[0]!r} is not a whole number >= 0"
        ) from None
    types = [str(t) for t in (props.get("nodeConfig") or {}).get("instanceTypeIds") or []]
    families = {_family(t) for t in catalog}
    variants = []
    for instance_type in types:
        if instance_type in catalog:
            pool = _pool(pool_name, instance_type, low, high, catalog=catalog)
            variants.append(replace(pool, labels=tuple(sorted(labels.items())), taints=_taints(props)))
        elif _family(instance_type) in families:
            try:
                lookup(instance_type, catalog)
            except CatalogError as exc:
                raise CatalogError(f"node pool {pool_name}: capacity cannot be checked: {exc}") from None
        elif model is not None:
            model.notes.append(
                f"node pool {pool_name}: {instance_type} is not a GPU type of the catalog; "
                "its devices are not counted"
            )
    return variants


def _pool(
    name: str,
    instance_type: str,
    low: int,
    high: int,
    *,
    catalog: Mapping[str, InstanceType],
    notes: Sequence[str] = (),
) -> GpuPool:
    return _pool_of_row(name, lookup(instance_type, catalog), low, high, notes)


def _pool_of_row(name: str, row: InstanceType, low: int, high: int, notes: Sequence[str] = ()) -> GpuPool:
    instance_type = row.name
    extra = (
        []
        if row.verified
        else [
            f"{instance_type}: catalog row confidence {row.confidence} ({row.source}); "
            "confirm with ecs.get_instance_types"
        ]
    )
    return GpuPool(
        name,
        instance_type,
        row.product,
        row.gpus,
        low,
        high,
        (*notes, *extra),
        vcpus=row.vcpus,
        memory_gib=row.memory_gib,
    )


def _relevant_known(res: Res) -> bool:
    """Whether the values the capacity check reads are known (other props may stay unknown)."""
    resource_type, props = res.type, res.props
    if resource_type == pulumi_types.NODE_POOL:
        return _pool_known(props)
    if pulumi_types.is_node_pool_runtime(resource_type):
        return is_known([props.get("min_replicas"), props.get("max_replicas")])
    if resource_type.startswith(pulumi_types.RESOURCE_GROUP_PREFIX):
        return is_known(props)
    kind = pulumi_types.kind_of(resource_type)
    if resource_type == pulumi_types.NAMESPACE:
        return is_known(props.get("metadata"))
    if resource_type.startswith(pulumi_types.KUBERNETES_PREFIX) and kind in pulumi_types.WORKLOAD_KINDS:
        return _workload_known(kind, props)
    return True


def _pool_known(props: Mapping[str, Any]) -> bool:
    node_config = props.get("nodeConfig")
    kube_config = props.get("kubernetesConfig")
    return (
        is_known(props.get("name"))
        and is_known(props.get("autoScaling"))
        and isinstance(node_config, Mapping | type(None))
        and isinstance(kube_config, Mapping | type(None))
        and is_known((node_config or {}).get("instanceTypeIds"))
        and is_known((kube_config or {}).get("labels"))
        and is_known((kube_config or {}).get("taints"))
    )


def _workload_known(kind: str, props: Mapping[str, Any]) -> bool:
    spec = props.get("spec")
    if not is_known(props.get("metadata")) or not isinstance(spec, Mapping | type(None)):
        return False
    spec = spec or {}
    scalars = [spec.get(k) for k in ("replicas", "parallelism", "completions")]
    if kind == "CronJob" and (job := _mapping_below(spec, pulumi_types.JOB_SPEC_PATHS_BY_KIND[kind])):
        scalars += [job.get(k) for k in ("parallelism", "completions")]
    try:
        pod_spec, _ = _pod_spec(kind, spec)
    except (AttributeError, TypeError):  # a part of the path is unknown
        return False
    return (
        is_known(scalars)
        and isinstance(pod_spec, Mapping)
        and all(
            is_known(pod_spec.get(k)) for k in ("resourceClaims", "nodeSelector", "affinity", "tolerations")
        )
        and _requests_known(pod_spec.get("containers"))
    )


def _requests_known(containers: Any) -> bool:
    if not isinstance(containers, list | tuple):
        return is_known(containers)
    return all(not isinstance(c, Mapping) or is_known(c.get("resources")) for c in containers)


def model_from_resources(resources: Iterable[Any], catalog_config: Any = None) -> StackModel:
    """A StackModel from a stack's registered resources (as `vke_gpu_dra_core.resources.read` reads them)."""
    model = StackModel(classes=default_classes())
    try:
        catalog = load_catalog(catalog_config)
    except CatalogError as exc:
        model.problems.append(("", str(exc)))
        catalog = load_catalog()
    pools_by_urn: dict[str, int] = {}
    runtimes: list[Res] = []
    for res in map(read, resources):
        if not _relevant_known(res):
            model.undecided.append(res.urn or res.name)
            continue
        try:
            if res.type == pulumi_types.NODE_POOL:
                variants = pools_from_node_pool(res.props, res.name, catalog, model)
                if variants:
                    pools_by_urn[res.urn] = len(model.pools)
                    model.pools.append(variants)
            elif pulumi_types.is_node_pool_runtime(res.type):
                runtimes.append(res)
            elif res.type == pulumi_types.CLUSTER:
                version = res.props.get("kubernetesVersion")
                if not is_known(version):
                    model.version_unknown = True
                elif isinstance(version, str) and version:
                    model.kubernetes_version = version
            elif res.type.startswith(pulumi_types.KUBERNETES_PREFIX):
                add_object(model, kubernetes_object(res), res.urn)
        except (ManifestError, CatalogError) as exc:
            model.problems.append((res.urn, str(exc)))
    for runtime in runtimes:
        _apply_runtime_bounds(model, pools_by_urn, runtime)
    return model


def _apply_runtime_bounds(model: StackModel, pools_by_urn: Mapping[str, int], runtime: Res) -> None:
    """The NodePoolRuntime's min/max replicas replace the bounds its pool (a dependency) was created with."""
    for urn in set(runtime.dependencies) & set(pools_by_urn):
        index = pools_by_urn[urn]
        try:
            low = _number(runtime.props.get("min_replicas"), model.pools[index][0].min_nodes)
            high = _number(runtime.props.get("max_replicas"), model.pools[index][0].max_nodes)
        except ValueError as exc:
            model.problems.append(
                (runtime.urn, f"node pool runtime: replica count {exc.args[0]!r} is not a whole number >= 0")
            )
            continue
        model.pools[index] = [replace(p, min_nodes=low, max_nodes=high) for p in model.pools[index]]


def add_object(model: StackModel, obj: Mapping[str, Any], urn: str = "") -> None:
    kind = obj.get("kind")
    api_version = str(obj.get("apiVersion") or "")
    if api_version.startswith("resource.k8s.io/"):
        if kind == "DeviceClass":
            cls = parse_device_class(obj)
            model.classes[cls.name] = cls
        elif kind in ("ResourceClaimTemplate", "ResourceClaim"):
            template = parse_claim_template(obj)
            model.templates[template.key] = template
        return
    if kind == "Namespace" and api_version in ("v1", ""):
        meta = obj.get("metadata") or {}
        name = meta.get("name") if isinstance(meta, Mapping) else None
        labels = meta.get("labels") if isinstance(meta, Mapping) else None
        if isinstance(name, str) and name:
            model.namespaces[name] = {
                str(k): str(v) for k, v in (labels.items() if isinstance(labels, Mapping) else ())
            }
        return
    workload = parse_workload(obj, urn)
    if workload is not None:
        model.workloads.append(workload)


# --- stack config (the plan command) ------------------------------------------------------------


def pools_from_config(cfg: StackConfig) -> list[GpuPool]:
    """The stack's GPU pool variants, from its config as the program loads it."""
    pool = cfg.node_pool
    if not pool.instance_types:  # the program requires them with target=vke only
        raise ManifestError(
            f"config {PROJECT}:nodePool.instanceTypes: []; allowed: a non-empty list of ECS instance types"
        )
    labels = {lb.key: lb.value for lb in pool.labels}
    labels.update(facts.REQUIRED_NODE_LABELS)
    placement: dict[str, Any] = {
        "labels": tuple(sorted(labels.items())),
        "taints": tuple((t.key, t.value, t.effect) for t in pool.taints),
    }
    placement["consumable_shares"] = consumable_shares(cfg)
    placement["dynamic_mig"] = dynamic_mig(cfg)
    name, low, high = pool.name, pool.min_replicas, pool.max_replicas
    return [
        replace(_pool_of_row(name, v.row, low, high), **placement)
        if v.row is not None
        else GpuPool(name, v.instance_type, v.product, v.gpus_per_node, low, high, (v.note,), **placement)
        for v in pool_variants(cfg)
    ]


def consumable_shares(cfg: StackConfig) -> bool:
    """Whether the stack config's `driver.featureGates` turns on the driver gate ConsumableShares."""
    return bool(cfg.driver.feature_gates.get(featuregates.CONSUMABLE_SHARES, False))


def dynamic_mig(cfg: StackConfig) -> bool:
    """Whether the stack config's `driver.featureGates` turns on the driver gate DynamicMIG."""
    return bool(cfg.driver.feature_gates.get(featuregates.DYNAMIC_MIG, False))


def sample_objects(cfg: StackConfig) -> list[dict[str, Any]]:
    """The program's sample: ResourceClaimTemplate single-gpu and Deployment gpu-test (1 replica)."""
    if not cfg.sample.enabled:
        return []
    namespace = cfg.sample.namespace
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": facts.SAMPLE_CLAIM_TEMPLATE, "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {"deviceClassName": facts.DEVICE_CLASS_GPU.name, "count": 1},
                        }
                    ]
                }
            }
        },
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": facts.SAMPLE_DEPLOYMENT, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "template": {
                "spec": {
                    "resourceClaims": [
                        {"name": "gpu", "resourceClaimTemplateName": facts.SAMPLE_CLAIM_TEMPLATE}
                    ]
                }
            },
        },
    }
    return [template, deployment]
