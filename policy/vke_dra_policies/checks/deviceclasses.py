"""DeviceClasses: the two the procedure expects exist, their CEL compiles and selects the right devices."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r

from .. import selectors
from . import Violation
from .driver import chart_creates_device_classes, driver_releases, effective_values
from .nodepools import is_dra_pool

#: Which sample device each expected class must select (the other must not be selected).
EXPECTED = {facts.DEVICE_CLASS_GPU.name: "gpu", facts.DEVICE_CLASS_MIG.name: "mig"}


def class_name(res: r.Res) -> Any:
    return res.get("metadata", "name")


def chart_class_sources(resources: Sequence[r.Res]) -> list[tuple[r.Res, bool | None, str]]:
    """Driver releases that render the DeviceClasses: (release, True or None while unknown, driver name)."""
    out: list[tuple[r.Res, bool | None, str]] = []
    for release, kind in driver_releases(list(resources)):
        creates = chart_creates_device_classes(release, kind)
        if creates is False:
            continue
        vals = effective_values(release, kind)
        driver = r.get_path(vals, ("driverName",)) if kind == "python" and vals is not r.UNKNOWN else None
        out.append((release, creates, driver if isinstance(driver, str) else facts.DRIVER_NAME))
    return out


def class_names(resources: Sequence[r.Res]) -> set[str]:
    """Every DeviceClass name the stack provides (its own resources plus what a driver chart renders)."""
    names = {n for res in r.of_type(resources, pt.DEVICE_CLASS) if isinstance(n := class_name(res), str)}
    if chart_class_sources(resources):
        names |= {dc.name for dc in facts.DEVICE_CLASSES}
    return names


def _expressions(res: r.Res) -> list[tuple[int, Any]]:
    entries = res.get("spec", "selectors")
    if not isinstance(entries, list):
        return []
    return [
        (i, r.get_path(s, ("cel", "expression"))) for i, s in enumerate(entries) if isinstance(s, Mapping)
    ]


def _selects(expressions: list[str], device: Any) -> bool | str:
    for expression in expressions:
        result = selectors.matches(expression, device)
        if result is not True:
            return result
    return True


def check_class(name: str, label: str, urn: str | None, expressions: list[str]) -> list[Violation]:
    """One class: every selector compiles; an expected class selects its device kind and not the other."""
    out = []
    for index, expression in enumerate(expressions):
        error = selectors.compile_error(expression)
        if error is not None:
            out.append(
                Violation(
                    f'{label}: spec.selectors[{index}].cel.expression "{expression}" does not compile: '
                    f"{error}; fix the expression (it must be a bool over `device`).",
                    urn,
                )
            )
    if out or name not in EXPECTED:
        return out
    samples = selectors.sample_devices()
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


def _own_classes(resources: Sequence[r.Res]) -> list[Violation]:
    out = []
    for res in r.of_type(resources, pt.DEVICE_CLASS):
        name = class_name(res)
        exprs = _expressions(res)
        if name is r.UNKNOWN or any(e is r.UNKNOWN for _, e in exprs):
            continue
        if not exprs or any(not isinstance(e, str) for _, e in exprs):
            out.append(
                Violation(
                    f"{res.label}: DeviceClass has no CEL selector (spec.selectors "
                    f"{res.get('spec', 'selectors')!r}); add spec.selectors[].cel.expression selecting the "
                    "driver's devices.",
                    res.urn,
                )
            )
            continue
        out.extend(check_class(str(name), res.label, res.urn, [e for _, e in exprs]))
    return out


def _chart_classes(resources: Sequence[r.Res]) -> list[Violation]:
    """Classes a chart renders: their selectors work, and the program does not create them again."""
    out = []
    own = {class_name(res): res for res in r.of_type(resources, pt.DEVICE_CLASS)}
    for release, creates, driver in chart_class_sources(resources):
        if creates is not True:
            continue
        for dc in facts.DEVICE_CLASSES:
            expression = facts.device_type_selector(dc.device_type, driver)
            out.extend(
                check_class(dc.name, f'DeviceClass "{dc.name}" of {release.label}', release.urn, [expression])
            )
            if dc.name in own:
                twin = own[dc.name]
                out.append(
                    Violation(
                        f'{twin.label}: DeviceClass "{dc.name}" is also rendered by {release.label}, '
                        "so one of them fails to create it; keep one owner (for the project's chart set "
                        "deviceClasses.enabled=false, as the program does).",
                        twin.urn,
                    )
                )
    return out


def _missing_classes(resources: Sequence[r.Res]) -> list[Violation]:
    wanted = bool(driver_releases(list(resources))) or any(
        is_dra_pool(p) for p in r.of_type(resources, pt.NODE_POOL)
    )
    if not wanted or any(class_name(res) is r.UNKNOWN for res in r.of_type(resources, pt.DEVICE_CLASS)):
        return []
    names = class_names(resources)
    return [
        Violation(
            f'DeviceClass "{dc.name}" is missing from a stack that runs DRA GPU nodes; add a '
            f'{pt.DEVICE_CLASS} named "{dc.name}" with selector "{dc.cel_expression}" '
            "(or let the driver chart render it)."
        )
        for dc in facts.DEVICE_CLASSES
        if dc.name not in names
    ]


def device_classes(resources: Sequence[r.Res]) -> list[Violation]:
    """The stack's own classes and the chart's classes work, and both expected classes exist."""
    return _own_classes(resources) + _chart_classes(resources) + _missing_classes(resources)
