"""The synchronous client: [`Client`], and [`EventStream`], a run's events
as an iterator that picks the stream up again after a dropped connection."""

from __future__ import annotations

import os
import time
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Union

import httpx

from . import _core
from .errors import TransportError, error_from
from .models import (
    ControlAnswer,
    ForkStarted,
    NewKeyView,
    KeyView,
    RolledBack,
    RunPosted,
    RunsPage,
    RunView,
    StreamEnd,
    StreamItem,
    TextDelta,
    TraceView,
)
from .sse import Follow

DEFAULT_BASE_URL = "http://127.0.0.1:7878"


class Client:
    """A client of one leasehold server.

    `token` is the server's token (`LEASEHOLD_API_TOKEN`) or an API key
    (`lh_ID_SECRET`), sent as `Authorization: Bearer`. `timeout` bounds
    each request; an event stream waits `stream_read_timeout` seconds for
    its next bytes (the server sends a keep-alive every 15 s) and keeps
    trying to reconnect for `reconnect_patience` seconds. `transport` is
    handed to httpx (a test's, or one with retries or a proxy)."""

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        token: Optional[str] = None,
        timeout: float = 30.0,
        stream_read_timeout: float = 60.0,
        reconnect_patience: float = 60.0,
        transport: Optional[httpx.BaseTransport] = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={**_core.auth_headers(token), **(headers or {})},
            timeout=timeout,
            transport=transport,
        )
        self._stream_timeout = httpx.Timeout(timeout, read=stream_read_timeout)
        self._patience = reconnect_patience

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def _send(self, call: _core.Call) -> Any:
        try:
            response = self._http.request(
                call.method,
                call.path,
                params=call.params,
                headers=call.headers,
                content=call.content,
            )
        except httpx.TransportError as error:
            raise TransportError(f"{call.method} {call.path}: {error}") from error
        return _core.read(call, response.status_code, response.headers, response.content)

    # Runs

    def start_run(
        self,
        flow: Mapping[str, Any],
        *,
        idempotency_key: Optional[str] = None,
        traceparent: Optional[str] = None,
    ) -> RunPosted:
        """Starts a run of `flow` (a dict, sent as JSON). Under an
        `idempotency_key` a post retried gets the run the first started
        (`replayed`); `traceparent` starts it within the caller's trace."""
        return self._send(_core.start_run(flow, idempotency_key, traceparent))

    def start_run_file(
        self,
        path: Union[str, "os.PathLike[str]"],
        *,
        idempotency_key: Optional[str] = None,
        traceparent: Optional[str] = None,
        content_type: Optional[str] = None,
    ) -> RunPosted:
        """Starts a run of the flow file at `path`, sent as it is written:
        `.json` as `application/json`, `.toml` as `application/toml`."""
        call = _core.start_run_file(path, idempotency_key, traceparent, content_type)
        return self._send(call)

    def get_run(self, run_id: str) -> RunView:
        return self._send(_core.get_run(run_id))

    def list_runs(
        self,
        *,
        limit: Optional[int] = None,
        after: Optional[str] = None,
        status: Optional[str] = None,
        flow: Optional[str] = None,
        since: Optional[_core.Instant] = None,
        until: Optional[_core.Instant] = None,
    ) -> RunsPage:
        """One page of runs, newest first; pass its `next` as `after` for
        the following page."""
        call = _core.list_runs(
            limit=limit, after=after, status=status, flow=flow, since=since, until=until
        )
        return self._send(call)

    def iter_runs(self, *, page_size: Optional[int] = None, **filters: Any) -> Iterator[RunView]:
        """Every run the filters select (those of [`list_runs`]), page
        after page."""
        after = None
        while True:
            page = self.list_runs(limit=page_size, after=after, **filters)
            yield from page.runs
            if page.next is None:
                return
            after = page.next

    def trace(self, run_id: str) -> TraceView:
        return self._send(_core.trace(run_id))

    def events(
        self,
        run_id: str,
        *,
        after: Optional[int] = None,
        live: bool = True,
        text: bool = False,
    ) -> "EventStream":
        """The run's events from after the seq `after` (from its first
        without), then live until the run ends; with `live=False` only
        those logged so far. With `text=True` the text its model calls
        stream comes between them as [`TextDelta`]s. A dropped connection
        is picked up again with `Last-Event-ID`: no event is yielded twice
        or skipped."""
        return EventStream(self, Follow(run_id, after=after, text=text), live)

    def text(self, run_id: str, *, after: Optional[int] = None) -> Iterator[str]:
        """The text the run's model calls stream from now on, piece by
        piece, until the run ends."""
        with self.events(run_id, after=after, text=True) as stream:
            for item in stream:
                if isinstance(item, TextDelta):
                    yield item.text

    # A person's controls

    def pause(
        self,
        run_id: str,
        *,
        reason: Optional[str] = None,
        in_flight: Optional[str] = None,
        by: Optional[str] = None,
    ) -> ControlAnswer:
        """Pauses a running run for a person; `in_flight` is `finish` (the
        default) or `cancel`."""
        return self._send(_core.pause(run_id, reason, in_flight, by))

    def steer(
        self,
        run_id: str,
        text: str,
        *,
        policy: Optional[str] = None,
        by: Optional[str] = None,
    ) -> Union[ControlAnswer, RolledBack]:
        """Sends the run a person's message; `policy` is `enqueue` (the
        default), `interrupt`, `reject` or `rollback` (then the answer is
        a `RolledBack`, its `run_id` the fork's)."""
        return self._send(_core.steer(run_id, text, policy, by))

    def resume(self, run_id: str, guidance: Optional[str] = None) -> ControlAnswer:
        """Answers a paused run, with guidance for its next model call."""
        return self._send(_core.resume(run_id, guidance))

    def cancel(self, run_id: str, reason: Optional[str] = None) -> ControlAnswer:
        return self._send(_core.cancel(run_id, reason))

    def reconcile(
        self, run_id: str, key: str, decision: str, *, result: Optional[str] = None
    ) -> ControlAnswer:
        """Decides the call of unknown outcome `key` of a run in
        `reconciliation_required`: `mark_done` (with its `result`),
        `retry` or `cancel`."""
        return self._send(_core.reconcile(run_id, key, decision, result))

    def fork(
        self,
        run_id: str,
        at: Union[int, str],
        *,
        guidance: Optional[str] = None,
        changes: Iterable[str] = (),
    ) -> ForkStarted:
        """A new run from the run's state before step `at` (`3`, or
        `run/worker:research:1:2`), with `guidance` for its first step and
        `changes` to its flow (`leases.tool_call=30s`)."""
        return self._send(_core.fork(run_id, at, guidance, changes))

    # API keys

    def create_key(
        self, scope: str, *, tenant: Optional[str] = None, name: Optional[str] = None
    ) -> NewKeyView:
        """Makes a key of `scope` (`read`, `operate`, `admin`); its secret
        is in this answer only."""
        return self._send(_core.create_key(scope, tenant, name))

    def list_keys(self, *, tenant: Optional[str] = None) -> List[KeyView]:
        return self._send(_core.list_keys(tenant))

    def revoke_key(self, key_id: str) -> KeyView:
        return self._send(_core.revoke_key(key_id))

    def health(self) -> Dict[str, Any]:
        return self._send(_core.health())


class EventStream:
    """A run's event stream as an iterator of [`Event`]s (and
    [`TextDelta`]s when asked for), ending when the run's stream ends.
    `end` is then its last frame; `last_event_id` the seq of the last event
    yielded; `reconnects` how often the stream was picked up again. Close it
    (or use it in a `with`) to leave early."""

    def __init__(self, client: Client, follow: Follow, live: bool) -> None:
        self._client = client
        self._follow = follow
        self._live = live
        self._items = self._run()

    @property
    def end(self) -> Optional[StreamEnd]:
        return self._follow.end

    @property
    def last_event_id(self) -> Optional[int]:
        return self._follow.last_event_id

    @property
    def reconnects(self) -> int:
        return self._follow.reconnects

    def __iter__(self) -> "EventStream":
        return self

    def __next__(self) -> StreamItem:
        return next(self._items)

    def close(self) -> None:
        self._items.close()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def _run(self) -> Iterator[StreamItem]:
        follow, http = self._follow, self._client._http
        path = _core.run_path(follow.run_id, "events")
        again = _core.Reconnecting(self._client._patience)
        while True:
            why, wait = "the connection ended before the run's end", None
            try:
                with http.stream(
                    "GET",
                    path,
                    params=follow.params(self._live),
                    headers=follow.headers(),
                    timeout=self._client._stream_timeout,
                ) as response:
                    if response.status_code >= 400:
                        error = error_from(
                            response.status_code, response.headers, response.read()
                        )
                        if not _core.retryable(error):
                            raise error
                        why, wait = str(error), getattr(error, "retry_after", None)
                    else:
                        follow.connection_opened()
                        for chunk in response.iter_bytes():
                            for item in follow.feed(chunk):
                                again.progress()
                                yield item
                            if follow.ended:
                                return
            except httpx.TransportError as error:
                why = f"{type(error).__name__}: {error}"
            delay = again.next_delay(time.monotonic(), why, follow.run_id, wait)
            follow.reconnects += 1
            if delay > 0:
                time.sleep(delay)
