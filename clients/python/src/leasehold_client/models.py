"""The API's bodies as pydantic models, each named after the server's Rust
type where it has one (`RunView`, `TraceView`, `Event`, …).

Every model keeps fields it does not know (`extra="allow"`): a newer
server that adds a field is read, not refused. A field the server may
leave out has a default here, so a model's required fields are those the
server always sends.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

#: The statuses a run ends in: its event stream ends with one of them.
TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class ErrorDetail(_Body):
    """What a refusal says: a stable snake_case `code` and a `message` for
    a person."""

    code: str
    message: str


class ErrorBody(_Body):
    """The body of every 4xx and 5xx: `{"error": {"code", "message"}}`."""

    error: ErrorDetail


class ToolCallRecord(_Body):
    """One tool call of a loop, recorded when it is sent and when it
    returns."""

    key: str
    path: str
    step: int
    index: int
    tool: str
    arguments: Any
    idempotent: Optional[bool] = None
    #: `sent`, `done` or `unknown`.
    state: str
    result: Optional[str] = None
    seq: int = 0
    by_person: bool = False
    made_by: Optional[str] = None


class PauseRecord(_Body):
    """Why a run waits for a person; `call` is the call of unknown outcome
    a reconciliation decides."""

    reason: str
    subject: str
    path: str
    call: Optional[ToolCallRecord] = None


class ForkOrigin(_Body):
    """Where a fork comes from: its parent and the step it starts at."""

    parent: str
    path: str
    step: int
    seq: int
    guidance: Optional[str] = None
    changes: List[str] = Field(default_factory=list)
    person_answers: List[str] = Field(default_factory=list)


class RunView(_Body):
    """A run as `GET /runs/{id}` shows it whole, or `GET /runs` as a
    summary (texts cut to 200 characters, named in `truncated`)."""

    run_id: str
    flow_name: str
    task: str
    #: `queued`, `running`, `waiting_human`, `reconciliation_required`,
    #: `orphaned`, `completed`, `failed` or `cancelled`.
    status: str
    reason: Optional[str] = None
    answer: Optional[str] = None
    pause: Optional[PauseRecord] = None
    owner_id: Optional[str] = None
    fence: int
    created_at_ms: int
    updated_at_ms: int
    live: bool
    flow: Optional[Dict[str, Any]] = None
    tool_calls: Optional[List[ToolCallRecord]] = None
    truncated: List[str] = Field(default_factory=list)
    events_dropped: Optional[Dict[str, int]] = None
    usage: Optional[Dict[str, Any]] = None
    fork: Optional[ForkOrigin] = None
    trace_id: Optional[str] = None
    resume_with: Optional[str] = None
    store_errors: Optional[int] = None

    @property
    def ended(self) -> bool:
        """Whether the run has ended (completed, failed or cancelled)."""
        return self.status in TERMINAL_STATUSES


class RunsPage(_Body):
    """A page of `GET /runs`, newest first; `next` is the cursor of the
    following page (`after`), or `None` when no other run matches."""

    runs: List[RunView]
    next: Optional[str] = None


class Event(_Body):
    """One event of a run's log, as the event stream and the trace carry
    it: `kind` names it (`run_started`, `verdict`, …) and its own fields
    are kept as extra fields (`event.answer`, `event.model_extra`)."""

    seq: int
    #: Its place in its run's log: 1, 2, 3, … with no gap (0 in logs
    #: written before positions existed).
    position: int = 0
    at: int
    run_id: str
    path: str
    kind: str

    def get(self, name: str, default: Any = None) -> Any:
        """A field of the event's kind (`event.get("answer")`)."""
        return (self.model_extra or {}).get(name, default)


class TextDelta(_Body):
    """A piece of the text a model call streams (`?text=true`): `text` at
    byte `offset` of the answer of the call of lease `lease_id`."""

    lease_id: int
    path: str
    offset: int
    text: str


class StreamEnd(_Body):
    """The last frame of an event stream (`event: end`): the run's status
    (when the stream was live, the status it ended in)."""

    status: str


class TraceSummary(_Body):
    """Counts of a run's decisions."""

    verdicts: int
    verdicts_by_decider: Dict[str, int]
    verdicts_by_verdict: Dict[str, int]
    evaluator_calls: int
    extensions: int
    wrap_ups: int
    restarts: int
    intervened: int
    escalated: int
    pauses: int
    events_dropped: Dict[str, int] = Field(default_factory=dict)


class TraceView(_Body):
    """A run's trace: every decision made about it, and who made it."""

    run_id: str
    started_at: Optional[int] = None
    entries: List[Event]
    summary: TraceSummary


class RunPosted(_Body):
    """The answer to `POST /runs`: the run and its status (`running` or
    `queued`); `replayed` when an `Idempotency-Key` named a run already
    started (answered 200, nothing new started)."""

    run_id: str
    status: str
    replayed: bool = False


class RollbackOf(_Body):
    """The run a `rollback` message forked and cancelled."""

    run_id: str
    #: The step of its root loop the fork starts before.
    step: int
    #: The status its cancel was answered with (200, or 202 forwarded).
    cancel: int


class RolledBack(_Body):
    """The answer to a message sent with the policy `rollback`: the fork,
    started with the message as its guidance, and the run it rolled
    back."""

    run_id: str
    status: str
    rolled_back: RollbackOf


class ControlAnswer(_Body):
    """The answer to a control (resume, pause, a message, cancel,
    reconcile): the run, its status, and `after_seq`, the seq of the last
    event logged before it (follow the events after it to see what the
    control made of the run). `forwarded_to` names the executor the control
    was handed to (202). A `rollback` message is answered with
    [`RolledBack`][leasehold_client.models.RolledBack] instead."""

    run_id: str
    status: str
    after_seq: int
    claimed: bool = False
    forwarded_to: Optional[str] = None


class ForkStarted(_Body):
    """The answer to `POST /runs/{id}/fork`: the new run and its lineage."""

    run_id: str
    status: str
    fork: Optional[ForkOrigin] = None


class KeyView(_Body):
    """An API key as the API shows it: everything but its secret."""

    id: str
    tenant: str
    #: `read`, `operate` or `admin`.
    scope: str
    name: Optional[str] = None
    created_at_ms: int
    revoked_at_ms: Optional[int] = None


class NewKeyView(KeyView):
    """A key just made: its `secret` (`lh_ID_SECRET`), given in this answer
    only."""

    secret: str


#: What an event stream yields: the run's events, and with `text=True` the
#: text its model calls stream.
StreamItem = Union[Event, TextDelta]
