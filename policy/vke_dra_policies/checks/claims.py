"""ResourceClaimTemplates, ResourceClaims and the pods that use them reference things that exist."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r

from . import Violation
from .deviceclasses import class_names


def _requests(res: r.Res, spec_path: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    """(path, deviceClassName) for every request and firstAvailable subrequest."""
    requests = r.get_path(res.props, (*spec_path, "devices", "requests"))
    if not isinstance(requests, list):
        return
    for i, req in enumerate(requests):
        if not isinstance(req, Mapping):
            continue
        base = r.format_path((*spec_path, "devices", "requests", i))
        if isinstance(req.get("exactly"), Mapping):
            yield f"{base}.exactly.deviceClassName", req["exactly"].get("deviceClassName")
        for j, sub in enumerate(r.as_list(req.get("firstAvailable"))):
            if isinstance(sub, Mapping):
                yield f"{base}.firstAvailable[{j}].deviceClassName", sub.get("deviceClassName")
        if "deviceClassName" in req:  # the v1beta1 shape; resource.k8s.io/v1 rejects it
            yield f"{base}.deviceClassName", req.get("deviceClassName")


def template_classes(resources: Sequence[r.Res]) -> list[Violation]:
    """Every request of a ResourceClaimTemplate/ResourceClaim names a DeviceClass of this stack."""
    names = class_names(resources)
    if any(res.get("metadata", "name") is r.UNKNOWN for res in r.of_type(resources, pt.DEVICE_CLASS)):
        return []
    out = []
    for res in r.of_type(resources, pt.RESOURCE_CLAIM_TEMPLATE, pt.RESOURCE_CLAIM):
        spec_path = ("spec", "spec") if res.type == pt.RESOURCE_CLAIM_TEMPLATE else ("spec",)
        for path, name in _requests(res, spec_path):
            if name is r.UNKNOWN or name in names:
                continue
            out.append(
                Violation(
                    f"{res.label}: {path} is {name!r}, which no DeviceClass in this stack is named; use one "
                    f"of {sorted(names) or 'the driver classes (none are defined yet)'}.",
                    res.urn,
                )
            )
    return out


def _names_by_namespace(resources: Sequence[r.Res], kind: str) -> tuple[set[tuple[str, str]], bool]:
    found, unknown = set(), False
    for res in r.of_type(resources, kind):
        name, ns = res.get("metadata", "name"), res.get("metadata", "namespace")
        if name is r.UNKNOWN or ns is r.UNKNOWN:
            unknown = True
        elif isinstance(name, str):
            found.add((ns if isinstance(ns, str) and ns else "default", name))
    return found, unknown


def _entry_violation(
    res: r.Res, where: str, i: int, entry: Mapping[str, Any], *, namespace: str, known: _Known
) -> Violation | None:
    template, claim = entry.get("resourceClaimTemplateName"), entry.get("resourceClaimName")
    if template is r.UNKNOWN or claim is r.UNKNOWN:
        return None
    if isinstance(template, str):
        if (namespace, template) in known.templates or known.templates_unknown:
            return None
        return Violation(
            f'{res.label}: {where}.resourceClaims[{i}].resourceClaimTemplateName is "{template}", but no '
            f'ResourceClaimTemplate "{template}" exists in namespace "{namespace}" of this stack; '
            "create it or name an existing template.",
            res.urn,
        )
    if isinstance(claim, str):
        if (namespace, claim) in known.claims or known.claims_unknown:
            return None
        return Violation(
            f'{res.label}: {where}.resourceClaims[{i}].resourceClaimName is "{claim}", but no ResourceClaim '
            f'"{claim}" exists in namespace "{namespace}" of this stack; '
            "create it or use resourceClaimTemplateName.",
            res.urn,
        )
    return Violation(
        f"{res.label}: {where}.resourceClaims[{i}] ({dict(entry)!r}) names neither a "
        "resourceClaimTemplateName nor a resourceClaimName; set resourceClaimTemplateName.",
        res.urn,
    )


def _container_violations(
    res: r.Res, where: str, spec: Mapping[str, Any], pod_names: set[Any]
) -> list[Violation]:
    out = []
    for group in ("initContainers", "containers"):
        for c, container in enumerate(r.as_list(spec.get(group))):
            refs = r.get_path(container, ("resources", "claims")) if isinstance(container, Mapping) else None
            for k, ref in enumerate(r.as_list(refs)):
                name = ref.get("name") if isinstance(ref, Mapping) else None
                if name is r.UNKNOWN or name in pod_names:
                    continue
                out.append(
                    Violation(
                        f"{res.label}: {where}.{group}[{c}].resources.claims[{k}].name is {name!r}, but the "
                        "pod has no resourceClaims entry of that name (found "
                        f"{sorted(n for n in pod_names if isinstance(n, str))}); add {where}.resourceClaims "
                        f"{{name: {name!r}, resourceClaimTemplateName: ...}}.",
                        res.urn,
                    )
                )
    return out


@dataclass(frozen=True)
class _Known:
    templates: set[tuple[str, str]]
    templates_unknown: bool
    claims: set[tuple[str, str]]
    claims_unknown: bool


def pod_claims(resources: Sequence[r.Res]) -> list[Violation]:
    """Container claims name a pod resourceClaims entry; entries name a template/claim of this stack."""
    known = _Known(
        *_names_by_namespace(resources, pt.RESOURCE_CLAIM_TEMPLATE),
        *_names_by_namespace(resources, pt.RESOURCE_CLAIM),
    )
    out: list[Violation] = []
    for res in resources:
        spec_path = pt.POD_SPEC_PATHS.get(res.type)
        spec = r.get_path(res.props, spec_path) if spec_path is not None else None
        if spec_path is None or not isinstance(spec, Mapping) or spec.get("resourceClaims") is r.UNKNOWN:
            continue
        ns = res.get("metadata", "namespace")
        namespace = ns if isinstance(ns, str) and ns else "default"
        where = r.format_path(spec_path)
        entries = [e for e in r.as_list(spec.get("resourceClaims")) if isinstance(e, Mapping)]
        for i, entry in enumerate(entries):
            if (v := _entry_violation(res, where, i, entry, namespace=namespace, known=known)) is not None:
                out.append(v)
        out.extend(_container_violations(res, where, spec, {e.get("name") for e in entries}))
    return out
