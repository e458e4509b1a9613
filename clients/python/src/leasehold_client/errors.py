"""The client's exceptions.

Every refusal of the API (a 4xx or 5xx with its JSON body
`{"error": {"code", "message"}}`) is raised as an [`ApiError`] subclass
chosen by the HTTP status, carrying the `code`, the `status` and the
`message`; `Retry-After` is kept when the server sent one. An answer that
is not the JSON the route promises (an HTML page from a proxy, a cut or
malformed body) is a [`MalformedResponse`]; a server that cannot be
reached, a [`TransportError`]. All are [`LeaseholdError`]s.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Type

from pydantic import ValidationError

from .models import ErrorBody


class LeaseholdError(Exception):
    """Anything the client raises."""


class TransportError(LeaseholdError):
    """The server could not be reached, or the connection failed."""


class StreamLost(TransportError):
    """An event stream that could not be picked up again within the
    client's patience: the server stayed away."""


class MalformedResponse(LeaseholdError):
    """An answer that is not what the route promises: not JSON, or JSON of
    another shape. `status` is its HTTP status, `body` its first
    characters."""

    def __init__(self, message: str, *, status: int, body: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class ApiError(LeaseholdError):
    """A refusal of the API: its HTTP `status`, its stable `code`
    (`not_found`, `forbidden_scope`, …) and its `message`."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        #: Seconds to wait before trying again, when the server said.
        self.retry_after = retry_after


class BadRequest(ApiError):
    """400: the request itself is wrong (a parameter, a header, a body)."""


class Unauthorized(ApiError):
    """401: a missing or wrong token, or an unknown or revoked key."""


class Forbidden(ApiError):
    """403: a key without the scope, a flow carrying its own tool servers,
    a host or origin refused."""


class NotFound(ApiError):
    """404: no such run (or none of the caller's tenant), key or route."""


class Conflict(ApiError):
    """409: the run is not in a state the control applies to."""


class PayloadTooLarge(ApiError):
    """413: a body, flow or text over its limit."""


class Unprocessable(ApiError):
    """422: a flow, fork or control value refused (`invalid_flow`, …)."""


class TooManyRequests(ApiError):
    """429: no room now (a full queue, too many runs or commands); see
    `retry_after`."""


class ServerError(ApiError):
    """5xx: the store, a tool server or the model setup failed."""


_BY_STATUS: Dict[int, Type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: Unprocessable,
    429: TooManyRequests,
}


def _excerpt(content: bytes) -> str:
    text = content[:300].decode("utf-8", errors="replace")
    return text + ("…" if len(content) > 300 else "")


def _retry_after(headers: Any) -> Optional[float]:
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def error_from(status: int, headers: Any, content: bytes) -> LeaseholdError:
    """The exception of a refusal: an [`ApiError`] of the status's class
    with the body's code and message, or a [`MalformedResponse`] when the
    body is not the API's error body."""
    try:
        body = ErrorBody.model_validate(json.loads(content))
    except (ValueError, ValidationError):
        return MalformedResponse(
            f"the server answered {status} without the API's error body "
            f"({{\"error\": {{\"code\", \"message\"}}}}): {_excerpt(content)!r}",
            status=status,
            body=_excerpt(content),
        )
    kind = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    return kind(
        status,
        body.error.code,
        body.error.message,
        retry_after=_retry_after(headers),
    )
