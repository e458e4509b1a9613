"""What the sync and async clients share: each route as a request to send
and the model its answer is read into, without any I/O. The clients only
send the request and hand the answer back to [`read`]."""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union
from urllib.parse import quote

from pydantic import BaseModel, TypeAdapter, ValidationError

from .errors import ApiError, MalformedResponse, StreamLost, error_from
from .models import (
    ControlAnswer,
    RolledBack,
    ForkStarted,
    NewKeyView,
    KeyView,
    RunPosted,
    RunsPage,
    RunView,
    TraceView,
)

#: An instant as `GET /runs` takes it: Unix milliseconds, an RFC 3339 text,
#: or a datetime (an aware one; a naive one is taken as UTC).
Instant = Union[int, str, _dt.datetime]

#: How a flow file is written, by its suffix.
_FLOW_TYPES = {".json": "application/json", ".toml": "application/toml"}


@dataclass
class Call:
    """One request and how its answer is read."""

    method: str
    path: str
    answer: Any
    params: Dict[str, str] = field(default_factory=dict)
    headers: Dict[str, str] = field(default_factory=dict)
    content: Optional[bytes] = None


def run_path(run_id: str, *rest: str) -> str:
    return "/".join(["/runs", quote(run_id, safe="")] + list(rest))


def _json(body: Mapping[str, Any]) -> bytes:
    return json.dumps({k: v for k, v in body.items() if v is not None}).encode()


def _json_call(method: str, path: str, answer: Any, body: Mapping[str, Any]) -> Call:
    return Call(
        method,
        path,
        answer,
        headers={"content-type": "application/json"},
        content=_json(body),
    )


def _ms(instant: Instant) -> str:
    if isinstance(instant, _dt.datetime):
        if instant.tzinfo is None:
            instant = instant.replace(tzinfo=_dt.timezone.utc)
        return str(int(instant.timestamp() * 1000))
    return str(instant)


def _post_headers(
    content_type: str, idempotency_key: Optional[str], traceparent: Optional[str]
) -> Dict[str, str]:
    headers = {"content-type": content_type}
    if idempotency_key is not None:
        headers["idempotency-key"] = idempotency_key
    if traceparent is not None:
        headers["traceparent"] = traceparent
    return headers


def start_run(
    flow: Mapping[str, Any],
    idempotency_key: Optional[str],
    traceparent: Optional[str],
) -> Call:
    return Call(
        "POST",
        "/runs",
        RunPosted,
        headers=_post_headers("application/json", idempotency_key, traceparent),
        content=json.dumps(flow).encode(),
    )


def start_run_file(
    path: Union[str, "os.PathLike[str]"],
    idempotency_key: Optional[str],
    traceparent: Optional[str],
    content_type: Optional[str] = None,
) -> Call:
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    media = content_type or _FLOW_TYPES.get(suffix)
    if media is None:
        raise ValueError(
            f"{os.fspath(path)}: a flow file is .json or .toml (or give content_type="
            "'application/json' or 'application/toml')"
        )
    with open(path, "rb") as file:
        content = file.read()
    return Call(
        "POST",
        "/runs",
        RunPosted,
        headers=_post_headers(media, idempotency_key, traceparent),
        content=content,
    )


def get_run(run_id: str) -> Call:
    return Call("GET", run_path(run_id), RunView)


def list_runs(
    *,
    limit: Optional[int],
    after: Optional[str],
    status: Optional[str],
    flow: Optional[str],
    since: Optional[Instant],
    until: Optional[Instant],
) -> Call:
    params: Dict[str, str] = {}
    if limit is not None:
        params["limit"] = str(limit)
    if after is not None:
        params["after"] = after
    if status is not None:
        params["status"] = status
    if flow is not None:
        params["flow"] = flow
    if since is not None:
        params["since"] = _ms(since)
    if until is not None:
        params["until"] = _ms(until)
    return Call("GET", "/runs", RunsPage, params=params)


def trace(run_id: str) -> Call:
    return Call("GET", run_path(run_id, "trace"), TraceView)


def pause(run_id: str, reason: Optional[str], in_flight: Optional[str], by: Optional[str]) -> Call:
    body = {"reason": reason, "in_flight": in_flight, "by": by}
    return _json_call("POST", run_path(run_id, "pause"), ControlAnswer, body)


def steer(run_id: str, text: str, policy: Optional[str], by: Optional[str]) -> Call:
    body = {"text": text, "policy": policy, "by": by}
    # A rollback forks the run: its answer is the fork's.
    answer = RolledBack if policy == "rollback" else ControlAnswer
    return _json_call("POST", run_path(run_id, "messages"), answer, body)


def resume(run_id: str, guidance: Optional[str]) -> Call:
    return _json_call("POST", run_path(run_id, "resume"), ControlAnswer, {"guidance": guidance})


def cancel(run_id: str, reason: Optional[str]) -> Call:
    return _json_call("POST", run_path(run_id, "cancel"), ControlAnswer, {"reason": reason})


def reconcile(run_id: str, key: str, decision: str, result: Optional[str]) -> Call:
    if decision not in ("mark_done", "retry", "cancel"):
        raise ValueError(f"a decision is mark_done, retry or cancel, not {decision!r}")
    if (result is not None) != (decision == "mark_done"):
        raise ValueError("a result is given with mark_done, and only with it")
    body = {"key": key, "decision": decision, "result": result}
    return _json_call("POST", run_path(run_id, "reconcile"), ControlAnswer, body)


def fork(run_id: str, at: Union[int, str], guidance: Optional[str], changes: Iterable[str]) -> Call:
    body = {"at": str(at), "guidance": guidance, "set": list(changes)}
    return _json_call("POST", run_path(run_id, "fork"), ForkStarted, body)


def create_key(scope: str, tenant: Optional[str], name: Optional[str]) -> Call:
    body = {"scope": scope, "tenant": tenant, "name": name}
    return _json_call("POST", "/keys", NewKeyView, body)


def list_keys(tenant: Optional[str]) -> Call:
    params = {"tenant": tenant} if tenant is not None else {}
    return Call("GET", "/keys", List[KeyView], params=params)


def revoke_key(key_id: str) -> Call:
    return Call("POST", "/keys/" + quote(key_id, safe="") + "/revoke", KeyView)


def health() -> Call:
    return Call("GET", "/health", Dict[str, Any])


_ADAPTERS: Dict[Any, TypeAdapter] = {}


def _adapter(answer: Any) -> TypeAdapter:
    adapter = _ADAPTERS.get(answer)
    if adapter is None:
        adapter = _ADAPTERS[answer] = TypeAdapter(answer)
    return adapter


def read(call: Call, status: int, headers: Any, content: bytes) -> Any:
    """The answer to `call`, read into its model; a refusal raised as its
    [`ApiError`](errors.ApiError), an answer of another shape as
    [`MalformedResponse`]."""
    if status >= 400:
        raise error_from(status, headers, content)
    try:
        data = json.loads(content)
    except ValueError:
        raise MalformedResponse(
            f"{call.method} {call.path} was answered {status} with a body that is not JSON: "
            f"{content[:300].decode('utf-8', errors='replace')!r}",
            status=status,
            body=content[:300].decode("utf-8", errors="replace"),
        ) from None
    try:
        if isinstance(call.answer, type) and issubclass(call.answer, BaseModel):
            return call.answer.model_validate(data)
        return _adapter(call.answer).validate_python(data)
    except ValidationError as error:
        raise MalformedResponse(
            f"{call.method} {call.path} was answered {status} with JSON that is not "
            f"{getattr(call.answer, '__name__', call.answer)}: {error}",
            status=status,
            body=content[:300].decode("utf-8", errors="replace"),
        ) from error


def auth_headers(token: Optional[str]) -> Dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


class Reconnecting:
    """When a stream is picked up again: at once after a connection that
    gave something, then after 0.1 s, doubling up to 2 s, until
    `patience` seconds have passed with nothing from the server."""

    def __init__(self, patience: float) -> None:
        self.patience = patience
        self._since: Optional[float] = None
        self._delay = 0.0

    def progress(self) -> None:
        self._since = None
        self._delay = 0.0

    def next_delay(self, now: float, why: str, run_id: str, wait: Optional[float] = None) -> float:
        """How long to wait before the next try; raises [`StreamLost`]
        past the patience."""
        if self._since is None:
            self._since = now
        if now - self._since > self.patience:
            raise StreamLost(
                f"run {run_id}'s event stream could not be picked up again within "
                f"{self.patience:g} s: {why}"
            )
        delay = self._delay if wait is None else wait
        self._delay = min(max(self._delay * 2, 0.1), 2.0)
        return max(0.0, min(delay, self.patience - (now - self._since)))


def retryable(error: Exception) -> bool:
    """Whether a refusal of a stream's (re)connection is worth another try:
    the server is busy or shutting down (503), or failed for now (5xx)."""
    return isinstance(error, ApiError) and error.status >= 500
