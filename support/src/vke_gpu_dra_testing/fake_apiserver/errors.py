"""The API server's error answers: `ApiError` (a Status body and its HTTP code) and the 422 of an invalid
ResourceSlice."""

from __future__ import annotations

from typing import Any


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


def invalid(obj: dict[str, Any], errors: list[str]) -> ApiError:
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
