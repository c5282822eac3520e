"""Error codes on the wire: one enum drives the HTTP status, the JSON body and the CLI exit code."""

from __future__ import annotations

import enum
from typing import Any


class ErrorCode(enum.Enum):
    BAD_REQUEST = "bad_request"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    CONFLICT = "conflict"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"  # a body not sent as the route's Content-Type
    REQUEST_TIMEOUT = "request_timeout"  # the body did not arrive within [http] body_timeout_s
    NOT_READY = "not_ready"
    STOPPING = "stopping"
    UNAVAILABLE = "unavailable"
    STORE_UNAVAILABLE = "store_unavailable"  # the store actor is down: nothing was written; retry later
    INTERNAL = "internal"

    @property
    def http_status(self) -> int:
        return _HTTP_STATUS[self]


_HTTP_STATUS = {
    ErrorCode.BAD_REQUEST: 400,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.CONFLICT: 409,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: 415,
    ErrorCode.REQUEST_TIMEOUT: 408,
    ErrorCode.NOT_READY: 503,
    ErrorCode.STOPPING: 503,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.STORE_UNAVAILABLE: 503,
    ErrorCode.INTERNAL: 500,
}


class ApiError(Exception):
    """An error that crosses the wire as ``{"error": {"code", "message", "details"}}``."""

    def __init__(self, code: ErrorCode, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code.value, "message": self.message, "details": self.details}}

    @classmethod
    def from_body(cls, body: Any) -> ApiError | None:
        """Parse an error body; None when ``body`` is not one."""
        if not isinstance(body, dict) or not isinstance(body.get("error"), dict):
            return None
        err = body["error"]
        try:
            code = ErrorCode(err.get("code"))
        except ValueError:
            code = ErrorCode.INTERNAL
        details = err.get("details") if isinstance(err.get("details"), dict) else {}
        return cls(code, str(err.get("message", "")), details)


# Process exit codes shared by gpuplaned and gpuplanectl.
EXIT_OK = 0
EXIT_FAILURE = 1  # a runtime error; for gpuplanectl also "no daemon is running"
EXIT_USAGE = 2
EXIT_ENDPOINT_BUSY = 3  # gpuplaned: another daemon owns the endpoint
