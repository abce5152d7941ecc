"""The API's errors as `Status` objects (meta/v1), with the codes and reasons client-go and
kubectl read: 401 Unauthorized, 403 Forbidden, 404 NotFound, 409 AlreadyExists and Conflict,
410 Expired, 415 UnsupportedMediaType, 422 Invalid, 429 TooManyRequests, 500 InternalError."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Cause:
    message: str
    field: str = ""
    reason: str = "FieldValueInvalid"

    def to_dict(self) -> dict[str, str]:
        out = {"reason": self.reason, "message": self.message}
        if self.field:
            out["field"] = self.field
        return out


@dataclass(slots=True)
class ApiError(Exception):
    """An answer other than success; `status()` is its body."""

    code: int
    reason: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    causes: list[Cause] = field(default_factory=list)

    def __str__(self) -> str:
        return self.message

    def status(self) -> dict[str, Any]:
        details = dict(self.details)
        if self.causes:
            details["causes"] = [c.to_dict() for c in self.causes]
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if details:
            body["details"] = details
        return body


def success(details: dict[str, Any] | None = None, code: int = 200) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}
    if details:
        body["details"] = details
    return body


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        404, "NotFound", f'{qualified} "{name}" not found', {"name": name, "group": group, "kind": resource}
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def invalid(kind: str, group: str, name: str, causes: list[Cause]) -> ApiError:
    """422: what the API server's validation (or a CRD's CEL rule) answers, each cause naming the
    field path and the rule."""
    qualified = f"{kind}.{group}" if group else kind
    listed = ", ".join(f"{c.field}: Invalid value: {c.message}" if c.field else c.message for c in causes)
    return ApiError(
        422,
        "Invalid",
        f'{qualified} "{name}" is invalid: [{listed}]'
        if len(causes) > 1
        else f'{qualified} "{name}" is invalid: {listed}',
        {"name": name, "group": group, "kind": kind},
        causes,
    )


def conflict(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified} "{name}": the object has been modified; please apply your'
        " changes to the latest version and try again",
        {"name": name, "group": group, "kind": resource},
    )


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        409, "AlreadyExists", f'{qualified} "{name}" already exists', {"name": name, "group": group, "kind": resource}
    )


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)
