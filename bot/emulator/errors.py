"""Errors that turn into GitHub-shaped error responses (basic-error / validation-error)."""

from __future__ import annotations

from typing import Any

from .util import DOCS


class ApiError(Exception):
    """Raised anywhere while handling a REST call; the server renders it as JSON."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        errors: list[dict[str, Any]] | None = None,
        documentation_url: str = DOCS,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(f"{status} {message}")
        self.status = status
        self.message = message
        self.errors = errors
        self.documentation_url = documentation_url
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "message": self.message,
            "documentation_url": self.documentation_url,
            "status": str(self.status),
        }
        if self.errors is not None:
            data["errors"] = self.errors
        return data


def not_found() -> ApiError:
    return ApiError(404, "Not Found")


def validation_failed(resource: str, field: str, code: str = "invalid", **extra: Any) -> ApiError:
    error = {"resource": resource, "field": field, "code": code, **extra}
    return ApiError(422, "Validation Failed", errors=[error])


def custom_validation(resource: str, message: str) -> ApiError:
    return ApiError(
        422,
        "Validation Failed",
        errors=[{"resource": resource, "code": "custom", "message": message}],
    )
