"""What a list or watch request of ResourceSlices may ask: field selectors, and the list options the
apiserver refuses (apimachinery's ValidateListOptions)."""

from __future__ import annotations

from typing import Any

from .errors import ApiError

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
