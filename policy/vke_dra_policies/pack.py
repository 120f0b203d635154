"""The pulumi_policy glue: policies, their config, and the analyzer server the CLI talks to."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent import futures
from typing import Any, Final

import grpc
from pulumi.runtime.proto import analyzer_pb2_grpc
from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    Severity,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.policy import Policy, _PolicyAnalyzerServicer
from vke_gpu_dra_core import policy_names as names
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r
from vke_gpu_dra_core.catalog import CatalogError, GpuTypes, gpu_types

from . import context, wire
from .checks import (
    Violation,
    capacity,
    claims,
    cluster,
    conflicts,
    deviceclasses,
    driver,
    image,
    nodepools,
    protection,
    secrets,
    sharing,
)

PACK_NAME: Final = "vke-gpu-dra"
PACK_VERSION: Final = "0.1.0"
_GRPC_OPTIONS: Final = [("grpc.max_receive_message_length", 400 * 1024 * 1024)]

MANDATORY, ADVISORY = EnforcementLevel.MANDATORY, EnforcementLevel.ADVISORY


# --- from pulumi_policy arguments to `Res` ---


def _resource(args: ResourceValidationArgs) -> r.Res:
    current = context.CURRENT.get()
    if current is not None and args.urn in current:
        return current[args.urn]
    return r.Res(
        args.resource_type,
        args.name,
        args.urn,
        wire.from_proxy(args.props),
        protect=bool(args.opts.protect),
        parent=args.opts.parent,
    )


def _stack(args: StackValidationArgs) -> list[r.Res]:
    current = context.CURRENT.get() or {}
    out = []
    for res in args.resources:
        if res.urn in current:
            out.append(current[res.urn])
            continue
        deps = tuple(d.urn for d in res.dependencies)
        out.append(
            r.Res(
                res.resource_type,
                res.name,
                res.urn,
                wire.from_proxy(res.props),
                protect=bool(res.opts.protect),
                parent=res.parent.urn if res.parent else None,
                dependencies=deps,
            )
        )
    return out


def _report(violations: Sequence[Violation], report: ReportViolation) -> None:
    for v in violations:
        report(v.message, v.urn)


def _config_list(config: Mapping[str, Any], key: str) -> list[str]:
    value = config.get(key)
    return [str(v) for v in value] if isinstance(value, list) else []


def resource_policy(
    name: str,
    description: str,
    types: Sequence[str],
    check: Callable[[r.Res, Mapping[str, Any]], list[Violation]],
    *,
    level: EnforcementLevel = MANDATORY,
    config_schema: PolicyConfigSchema | None = None,
    severity: Severity = Severity.HIGH,
) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        if args.resource_type in types:
            _report(check(_resource(args), args.get_config()), report)

    return ResourceValidationPolicy(
        name, description, validate, enforcement_level=level, config_schema=config_schema, severity=severity
    )


def stack_policy(
    name: str,
    description: str,
    check: Callable[[list[r.Res], Mapping[str, Any]], list[Violation]],
    *,
    level: EnforcementLevel = MANDATORY,
    config_schema: PolicyConfigSchema | None = None,
    severity: Severity = Severity.HIGH,
) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        _report(check(_stack(args), args.get_config()), report)

    return StackValidationPolicy(
        name, description, validate, enforcement_level=level, config_schema=config_schema, severity=severity
    )


# --- the policies ---

_EXTRA_TYPES = PolicyConfigSchema(
    {
        "extraGpuInstanceTypes": {
            "type": "array",
            "items": {"type": "string"},
            "description": "More GPU instance types: exact ids (ecs.x.2xlarge) or families (ecs.x, ecs.x.*).",
        }
    }
)
_ADDONS = PolicyConfigSchema(
    {
        "forbiddenAddons": {
            "type": "array",
            "items": {"type": "string"},
            "description": "VKE add-ons scheduling GPUs without DRA (default: nvidia-device-plugin, mgpu).",
        }
    }
)
_PRODUCTION = PolicyConfigSchema(
    {
        "production": {
            "type": "boolean",
            "description": "Treat the stack as production (default: stack config <project>:production).",
        }
    }
)


def _gpu_types(config: Mapping[str, Any]) -> GpuTypes:
    """The GPU catalog's rows and families, the stack config's rows and the policy config's extra types."""
    extra = _config_list(config, "extraGpuInstanceTypes")
    try:
        return gpu_types(extra, config_value=context.STACK.config_value("gpuInstanceTypes"))
    except CatalogError:  # a bad stack config row: gpu-claims-fit-node-pools names it
        return gpu_types(extra)


def _forbidden_addons(config: Mapping[str, Any]) -> list[str]:
    return _config_list(config, "forbiddenAddons") or list(conflicts.DEFAULT_FORBIDDEN_ADDONS)


def _claims(resources: list[r.Res], _config: Mapping[str, Any]) -> list[Violation]:
    return claims.template_classes(resources) + claims.pod_claims(resources)


def _secrets(resources: list[r.Res], _config: Mapping[str, Any]) -> list[Violation]:
    return secrets.secret_props(resources) + secrets.plaintext_outputs(resources)


def _protection(res: r.Res, config: Mapping[str, Any]) -> list[Violation]:
    production = context.production(config)
    return protection.protected(res, production.value, production.problem)


def _api_server(res: r.Res, _config: Mapping[str, Any]) -> list[Violation]:
    if res.type == pt.CLUSTER:
        return cluster.api_server_public(res)
    return cluster.open_api_server_rules([res])


POLICIES: Final[list[Policy]] = [
    resource_policy(
        names.KUBERNETES_VERSION,
        "The VKE cluster runs Kubernetes 1.34 or later (resource.k8s.io/v1 for DRA).",
        [pt.CLUSTER],
        lambda res, _c: cluster.kubernetes_version(res),
        severity=Severity.CRITICAL,
    ),
    resource_policy(
        names.NODE_POOL_LABELS,
        "GPU node pools carry vke.node.gpu.schedule=nvidia-dra and nvidia.com/gpu.present=true.",
        [pt.NODE_POOL],
        lambda res, c: nodepools.labels(res, _gpu_types(c)),
        config_schema=_EXTRA_TYPES,
    ),
    resource_policy(
        names.NODE_POOL_INSTANCE_TYPES,
        "DRA GPU node pools use GPU instance types.",
        [pt.NODE_POOL],
        lambda res, c: nodepools.gpu_instance_types(res, _gpu_types(c)),
        config_schema=_EXTRA_TYPES,
    ),
    stack_policy(
        names.NODE_POOL_RUNTIME,
        "DRA GPU node pools are pinned to containerd 2.1 or later.",
        lambda res, c: nodepools.runtimes(res, _gpu_types(c)),
        config_schema=_EXTRA_TYPES,
    ),
    stack_policy(
        names.NO_DEVICE_PLUGIN,
        "No NVIDIA device-plugin or mGPU scheduling in a cluster where DRA is on (the procedure's usage "
        "limits).",
        lambda res, c: conflicts.device_plugin_beside_dra(res, _forbidden_addons(c)),
        config_schema=_ADDONS,
    ),
    stack_policy(
        names.DRIVER_VALUES,
        "The DRA driver's kubelet plugin runs on DRA nodes only; NVIDIA's chart gets the procedure's values.",
        lambda res, _c: driver.driver_values(res),
    ),
    stack_policy(
        names.DEVICE_CLASSES,
        "DeviceClasses gpu.nvidia.com and mig.nvidia.com exist and their CEL selects the right devices.",
        lambda res, _c: deviceclasses.device_classes(res),
    ),
    stack_policy(
        names.CLAIM_REFERENCES,
        "Claim templates name DeviceClasses of the stack; pod claims name templates of the stack.",
        _claims,
    ),
    stack_policy(
        names.SECRETS,
        "Kubeconfigs and passwords are secret in the state; no output holds a plaintext secret.",
        _secrets,
        severity=Severity.CRITICAL,
    ),
    resource_policy(
        names.PRODUCTION_PROTECTION,
        "Production stacks protect the cluster and its node pools.",
        list(protection.PROTECTED_TYPES),
        _protection,
        config_schema=_PRODUCTION,
    ),
    resource_policy(
        names.API_SERVER_PUBLIC_ACCESS,
        "The API server is not open to 0.0.0.0/0.",
        [pt.CLUSTER, pt.SECURITY_GROUP_RULE],
        _api_server,
        level=ADVISORY,
        severity=Severity.MEDIUM,
    ),
    resource_policy(
        names.NODE_POOL_AUTO_SCALING,
        "Node pools bound their size with auto-scaling limits.",
        [pt.NODE_POOL],
        lambda res, _c: nodepools.auto_scaling_bounds(res),
        level=ADVISORY,
        severity=Severity.LOW,
    ),
    stack_policy(names.CAPACITY, capacity.DESCRIPTION, capacity.claims_fit),
    stack_policy(
        names.DRIVER_IMAGE_REGISTRY,
        "The driver image comes from a registry the nodes can pull from (no placeholder domain).",
        image.registry_reachable,
    ),
    stack_policy(
        names.DRIVER_IMAGE_DIGEST,
        "Production stacks run the driver image pinned by digest.",
        lambda res, c: image.pinned_by_digest(res) if context.is_production(c) else [],
        config_schema=_PRODUCTION,
    ),
    stack_policy(
        names.DRIVER_IMAGE_DIGEST_ADVISORY,
        "Non-production stacks run the driver image pinned by digest (advisory).",
        lambda res, c: [] if context.is_production(c) else image.pinned_by_digest(res),
        level=ADVISORY,
        severity=Severity.LOW,
        config_schema=_PRODUCTION,
    ),
    stack_policy(names.SHARING_FEATURE_GATES, sharing.DESCRIPTION, sharing.sharing_gates),
]


# --- the analyzer server ---


class _Servicer(_PolicyAnalyzerServicer):
    """pulumi_policy's servicer, plus decoded resources (with secretness) and the stack's config."""

    def Analyze(self, request: Any, context_: Any) -> Any:
        token = context.CURRENT.set({request.urn: wire.from_request(request)})
        try:
            return super().Analyze(request, context_)
        finally:
            context.CURRENT.reset(token)

    def AnalyzeStack(self, request: Any, context_: Any) -> Any:
        token = context.CURRENT.set({res.urn: wire.from_request(res) for res in request.resources})
        try:
            return super().AnalyzeStack(request, context_)
        finally:
            context.CURRENT.reset(token)

    def ConfigureStack(self, request: Any, context_: Any) -> Any:
        context.STACK.project = request.project or context.STACK.project
        context.STACK.stack = request.stack or context.STACK.stack
        context.STACK.config = wire.config_from_request(request.config) or context.STACK.config
        return super().ConfigureStack(request, context_)


def serve() -> None:
    """Start the analyzer on 127.0.0.1, print its port (the CLI reads it), serve until killed.

    This is what `pulumi_policy.PolicyPack(...)` does, with the servicer above in its place.
    """
    servicer = _Servicer(
        PACK_NAME,
        PACK_VERSION,
        POLICIES,
        ADVISORY,
        description="GPU DRA on VKE: the procedure's requirements as policies.",
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=_GRPC_OPTIONS)
    analyzer_pb2_grpc.add_AnalyzerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    sys.stdout.buffer.write(f"{port}\n".encode())
    sys.stdout.flush()
    try:
        while True:
            time.sleep(86400)
    except KeyboardInterrupt:
        server.stop(0)
