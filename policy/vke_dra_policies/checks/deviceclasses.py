"""DeviceClasses: the two the procedure expects exist, their CEL compiles and selects the right devices."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vke_gpu_dra import facts

from .. import celsel
from .. import resources as r
from . import Violation
from .driver import driver_releases
from .nodepools import is_dra_pool

#: Which sample device each expected class must select (the other must not be selected).
EXPECTED = {facts.DEVICE_CLASS_GPU.name: "gpu", facts.DEVICE_CLASS_MIG.name: "mig"}


def class_name(res: r.Res) -> Any:
    return res.get("metadata", "name")


def chart_provides_classes(resources: Sequence[r.Res]) -> bool:
    """NVIDIA's chart creates gpu.nvidia.com and mig.nvidia.com itself (gpuResourcesEnabledOverride=true)."""
    return any(kind == "nvidia" for _, kind in driver_releases(list(resources)))


def class_names(resources: Sequence[r.Res]) -> set[str]:
    """Every DeviceClass name the stack provides (its own resources plus NVIDIA's chart)."""
    names = {n for res in r.of_type(resources, r.DEVICE_CLASS) if isinstance(n := class_name(res), str)}
    if chart_provides_classes(resources):
        names |= {dc.name for dc in facts.DEVICE_CLASSES}
    return names


def _expressions(res: r.Res) -> list[tuple[int, Any]]:
    selectors = res.get("spec", "selectors")
    if not isinstance(selectors, list):
        return []
    return [
        (i, r.get_path(s, ("cel", "expression"))) for i, s in enumerate(selectors) if isinstance(s, Mapping)
    ]


def _selects(expressions: list[str], device: Any) -> bool | str:
    for expression in expressions:
        result = celsel.matches(expression, device)
        if result is not True:
            return result
    return True


def check_class(name: str, label: str, urn: str | None, expressions: list[str]) -> list[Violation]:
    """One class: every selector compiles; an expected class selects its device kind and not the other."""
    out = []
    for index, expression in enumerate(expressions):
        error = celsel.compile_error(expression)
        if error is not None:
            out.append(
                Violation(
                    f'{label}: spec.selectors[{index}].cel.expression "{expression}" does not compile: '
                    f"{error}; "
                    f"fix the expression (it must be a bool over `device`).",
                    urn,
                )
            )
    if out or name not in EXPECTED:
        return out
    samples = celsel.sample_devices()
    want, other = (samples.gpu, samples.mig) if EXPECTED[name] == "gpu" else (samples.mig, samples.gpu)
    selects_want, selects_other = _selects(expressions, want), _selects(expressions, other)
    wanted_kind = "a full GPU" if EXPECTED[name] == "gpu" else "a MIG device"
    other_kind = "a MIG device" if EXPECTED[name] == "gpu" else "a full GPU"
    fix = f'use the driver\'s selector "{facts.device_type_selector(EXPECTED[name])}"'
    if selects_want is not True:
        found = "does not match" if selects_want is False else selects_want
        out.append(
            Violation(
                f"{label}: selectors {expressions!r} do not select {wanted_kind} of {facts.DRIVER_NAME} "
                f"({found} for device {want.name}); {fix}.",
                urn,
            )
        )
    if selects_other is True:
        out.append(
            Violation(
                f"{label}: selectors {expressions!r} also select {other_kind} ({other.name}); {fix}.", urn
            )
        )
    return out


def device_classes(resources: Sequence[r.Res]) -> list[Violation]:
    out = []
    for res in r.of_type(resources, r.DEVICE_CLASS):
        name = class_name(res)
        exprs = _expressions(res)
        if name is r.UNKNOWN or any(e is r.UNKNOWN for _, e in exprs):
            continue
        bad = [i for i, e in exprs if not isinstance(e, str)]
        if bad or not exprs:
            out.append(
                Violation(
                    f"{res.label}: DeviceClass has no CEL selector (spec.selectors "
                    f"{res.get('spec', 'selectors')!r}); "
                    "add spec.selectors[].cel.expression selecting the driver's devices.",
                    res.urn,
                )
            )
            continue
        out.extend(check_class(str(name), res.label, res.urn, [e for _, e in exprs]))
    for release, kind in driver_releases(list(resources)):
        if kind == "nvidia":
            for dc in facts.DEVICE_CLASSES:
                out.extend(
                    check_class(
                        dc.name,
                        f'DeviceClass "{dc.name}" of {release.label}',
                        release.urn,
                        [dc.cel_expression],
                    )
                )
    wanted = bool(driver_releases(list(resources))) or any(
        is_dra_pool(p) for p in r.of_type(resources, r.NODE_POOL)
    )
    if wanted:
        names = class_names(resources)
        unknown_names = any(class_name(res) is r.UNKNOWN for res in r.of_type(resources, r.DEVICE_CLASS))
        for dc in facts.DEVICE_CLASSES:
            if dc.name not in names and not unknown_names:
                out.append(
                    Violation(
                        f'DeviceClass "{dc.name}" is missing from a stack that runs DRA GPU nodes; add a '
                        f'{r.DEVICE_CLASS} named "{dc.name}" with selector "{dc.cel_expression}" (or '
                        "install NVIDIA's "
                        "chart with gpuResourcesEnabledOverride=true)."
                    )
                )
    return out
