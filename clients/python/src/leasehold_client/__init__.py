"""A Python client of leasehold's HTTP API (`leasehold serve`).

    from leasehold_client import Client

    with Client("http://127.0.0.1:7878", token="lh_…") as client:
        posted = client.start_run({"name": "triage", "task": "…"})
        for event in client.events(posted.run_id):
            print(event.position, event.kind)

[`Client`] is synchronous, [`AsyncClient`] its async twin; both read the
API's bodies into the same pydantic models, raise the same exceptions
([`LeaseholdError`] and its subclasses, an API refusal carrying its
`code`, `status` and `message`), and follow a run's event stream across
dropped connections with `Last-Event-ID`, yielding each event once.
"""

from .async_client import AsyncClient, AsyncEventStream
from .client import DEFAULT_BASE_URL, Client, EventStream
from .errors import (
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    LeaseholdError,
    MalformedResponse,
    NotFound,
    PayloadTooLarge,
    ServerError,
    StreamLost,
    TooManyRequests,
    TransportError,
    Unauthorized,
    Unprocessable,
)
from .models import (
    TERMINAL_STATUSES,
    ControlAnswer,
    ErrorBody,
    ErrorDetail,
    Event,
    ForkOrigin,
    ForkStarted,
    NewKeyView,
    KeyView,
    PauseRecord,
    RollbackOf,
    RolledBack,
    RunPosted,
    RunsPage,
    RunView,
    StreamEnd,
    StreamItem,
    TextDelta,
    ToolCallRecord,
    TraceSummary,
    TraceView,
)

__all__ = [
    "DEFAULT_BASE_URL",
    "TERMINAL_STATUSES",
    "ApiError",
    "AsyncClient",
    "AsyncEventStream",
    "BadRequest",
    "Client",
    "Conflict",
    "ControlAnswer",
    "ErrorBody",
    "ErrorDetail",
    "Event",
    "EventStream",
    "Forbidden",
    "ForkOrigin",
    "ForkStarted",
    "NewKeyView",
    "KeyView",
    "LeaseholdError",
    "MalformedResponse",
    "NotFound",
    "PauseRecord",
    "PayloadTooLarge",
    "RollbackOf",
    "RolledBack",
    "RunPosted",
    "RunView",
    "RunsPage",
    "ServerError",
    "StreamEnd",
    "StreamItem",
    "StreamLost",
    "TextDelta",
    "TooManyRequests",
    "ToolCallRecord",
    "TraceSummary",
    "TraceView",
    "TransportError",
    "Unauthorized",
    "Unprocessable",
]
