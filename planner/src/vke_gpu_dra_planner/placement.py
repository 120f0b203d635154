"""Which pools a workload's pods may run on: node selector, required node affinity, taints and tolerations.

Only what the stack states is decided: labels the pool sets (plus the instance-type label) and its taints.
A selector on a label the pool does not set (zone, hostname, ...) is assumed to match, because the node
gets that label from VKE; the count then says what fits if it does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .inventory import GpuPool

INSTANCE_TYPE_LABELS: Final = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
_BLOCKING_EFFECTS: Final = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class Placement:
    node_selector: tuple[tuple[str, str], ...] = ()
    #: required node affinity: any term matches when all its expressions do: (key, operator, values)
    affinity_terms: tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...] = ()
    #: (key, operator, value, effect); "" matches any key or effect
    tolerations: tuple[tuple[str, str, str, str], ...] = ()


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list | tuple) else ()


def parse_placement(pod_spec: Mapping[str, Any]) -> Placement:
    selector = pod_spec.get("nodeSelector") or {}
    node_selector = (
        tuple(sorted((str(k), str(v)) for k, v in selector.items())) if isinstance(selector, Mapping) else ()
    )
    affinity = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = []
    for term in affinity.get("nodeSelectorTerms") or []:
        if isinstance(term, Mapping):
            terms.append(
                tuple(
                    (str(e.get("key", "")), str(e.get("operator", "")), _strings(e.get("values")))
                    for e in term.get("matchExpressions") or []
                    if isinstance(e, Mapping)
                )
            )
    tolerations = tuple(
        (
            str(t.get("key") or ""),
            str(t.get("operator") or "Equal"),
            str(t.get("value") or ""),
            str(t.get("effect") or ""),
        )
        for t in pod_spec.get("tolerations") or []
        if isinstance(t, Mapping)
    )
    return Placement(node_selector, tuple(terms), tolerations)


def _labels(pool: GpuPool) -> dict[str, str]:
    labels = dict(pool.labels)
    for key in INSTANCE_TYPE_LABELS:
        labels.setdefault(key, pool.instance_type)
    return labels


def _expression_matches(labels: Mapping[str, str], key: str, operator: str, values: Sequence[str]) -> bool:
    if key not in labels:  # a label VKE sets (zone, hostname, ...): assumed to match
        return True
    value = labels[key]
    checks = {
        "In": lambda: value in values,
        "NotIn": lambda: value not in values,
        "Exists": lambda: True,
        "DoesNotExist": lambda: False,
        "Gt": lambda: (
            value.isdigit() and bool(values) and values[0].isdigit() and int(value) > int(values[0])
        ),
        "Lt": lambda: (
            value.isdigit() and bool(values) and values[0].isdigit() and int(value) < int(values[0])
        ),
    }
    return checks.get(operator, lambda: True)()


def tolerated(taint: tuple[str, str, str], tolerations: Sequence[tuple[str, str, str, str]]) -> bool:
    key, value, effect = taint
    for t_key, operator, t_value, t_effect in tolerations:
        if t_effect and t_effect != effect:
            continue
        if operator == "Exists" and (not t_key or t_key == key):
            return True
        if operator == "Equal" and t_key == key and t_value == value:
            return True
    return False


def excluded(pool: GpuPool, placement: Placement) -> str | None:
    """Why the workload's pods cannot run on `pool`'s nodes, or None when they can."""
    labels = _labels(pool)
    for key, value in placement.node_selector:
        if key in labels and labels[key] != value:
            return f"nodeSelector {key}={value} does not match the pool's label {key}={labels[key]}"
    if placement.affinity_terms and not any(
        all(_expression_matches(labels, *expression) for expression in term)
        for term in placement.affinity_terms
    ):
        return "required node affinity matches none of the pool's labels"
    for taint in pool.taints:
        if taint[2] in _BLOCKING_EFFECTS and not tolerated(taint, placement.tolerations):
            key, value, effect = taint
            shown = f"{key}={value}:{effect}" if value else f"{key}:{effect}"
            return f"the pods do not tolerate the pool's taint {shown}"
    return None
