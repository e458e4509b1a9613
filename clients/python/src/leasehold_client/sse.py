"""Server-Sent Events, decoded as the WHATWG specification says, from bytes
as they arrive, and a run's event stream followed across reconnects.

[`SseDecoder`] turns chunks of any size into frames: lines end in CRLF,
LF or CR; `data` lines join with a line feed; a comment (`: keep-alive`)
is skipped; a frame is dispatched at its blank line, so a frame cut by a
dropped connection is never dispatched.

[`Follow`] is what the sync and async clients share about one run's
stream, without any I/O: the `Last-Event-ID` to reconnect with, the frames
turned into [`Event`]s and [`TextDelta`]s, none twice (an event at or
before the last one seen is dropped; a text already held is cut off),
and whether the stream has ended (`event: end`) or must be picked up again
(an `event: shutdown`, or a connection that ended without `end`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional

from pydantic import ValidationError

from .errors import MalformedResponse
from .models import Event, StreamEnd, StreamItem, TextDelta


@dataclass
class Frame:
    """One dispatched SSE frame."""

    event: str
    data: str
    id: Optional[str]


class SseDecoder:
    """Incremental SSE decoding: feed bytes, get the frames they complete."""

    def __init__(self) -> None:
        self._buffer = b""
        self._event = ""
        self._data: List[str] = []
        self._id: Optional[str] = None
        #: The last event id the stream set (kept across frames).
        self.last_id: Optional[str] = None

    def feed(self, chunk: bytes) -> List[Frame]:
        self._buffer += chunk
        frames: List[Frame] = []
        while True:
            line, found = self._next_line()
            if not found:
                return frames
            frame = self._line(line)
            if frame is not None:
                frames.append(frame)

    def _next_line(self):
        buffer = self._buffer
        ends = [i for i in (buffer.find(b"\n"), buffer.find(b"\r")) if i >= 0]
        if not ends:
            return b"", False
        i = min(ends)
        if buffer[i] == 0x0D:
            if i + 1 == len(buffer):
                # A CR at the end may be the first half of a CRLF.
                return b"", False
            skip = 2 if buffer[i + 1] == 0x0A else 1
        else:
            skip = 1
        self._buffer = buffer[i + skip :]
        return buffer[:i], True

    def _line(self, raw: bytes) -> Optional[Frame]:
        line = raw.decode("utf-8", errors="replace")
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
            self.last_id = value
        return None

    def _dispatch(self) -> Optional[Frame]:
        data, event, frame_id = self._data, self._event, self._id
        self._data, self._event, self._id = [], "", None
        if not data:
            return None
        return Frame(event=event or "message", data="\n".join(data), id=frame_id)


class Follow:
    """One run's event stream, followed across connections."""

    def __init__(self, run_id: str, *, after: Optional[int], text: bool) -> None:
        self.run_id = run_id
        self.text = text
        #: The seq of the last event yielded: the `Last-Event-ID` of the
        #: next connection.
        self.last_event_id: Optional[int] = after
        #: The stream's last frame, once the run has ended.
        self.end: Optional[StreamEnd] = None
        #: How many times the stream was picked up again.
        self.reconnects = 0
        self._decoder = SseDecoder()
        # Per model call (lease), how many bytes of its text were yielded.
        self._text_held: Dict[int, int] = {}

    @property
    def ended(self) -> bool:
        return self.end is not None

    def connection_opened(self) -> None:
        """A new connection: what a cut one left half-read is dropped."""
        self._decoder = SseDecoder()

    def headers(self) -> Dict[str, str]:
        headers = {"accept": "text/event-stream"}
        if self.last_event_id is not None:
            headers["last-event-id"] = str(self.last_event_id)
        return headers

    def params(self, live: bool) -> Dict[str, str]:
        params = {}
        if not live:
            params["live"] = "false"
        if self.text:
            params["text"] = "true"
        return params

    def feed(self, chunk: bytes) -> Iterator[StreamItem]:
        """The items `chunk` completes; after `end`, nothing more."""
        for frame in self._decoder.feed(chunk):
            if self.ended:
                return
            item = self._item(frame)
            if item is not None:
                yield item

    def _item(self, frame: Frame) -> Optional[StreamItem]:
        try:
            data = json.loads(frame.data)
        except ValueError as error:
            raise MalformedResponse(
                f"run {self.run_id}'s event stream sent a frame that is not JSON: {error}",
                status=200,
                body=frame.data[:300],
            ) from error
        try:
            if frame.event == "end":
                self.end = StreamEnd.model_validate(data)
                return None
            if frame.event == "shutdown":
                # The server stops: the stream is picked up again, from
                # the last event seen, once it (or another) listens.
                return None
            if frame.event == "text":
                return self._text(TextDelta.model_validate(data)) if self.text else None
            if frame.event != "message":
                return None
            event = Event.model_validate(data)
        except ValidationError as error:
            raise MalformedResponse(
                f"run {self.run_id}'s event stream sent an {frame.event!r} frame of another "
                f"shape: {error}",
                status=200,
                body=frame.data[:300],
            ) from error
        if self.last_event_id is not None and event.seq <= self.last_event_id:
            return None
        self.last_event_id = event.seq
        return event

    def _text(self, delta: TextDelta) -> Optional[TextDelta]:
        # A reconnect sends each call's text again from the start of what
        # is kept: only what was not yielded yet goes on.
        held = self._text_held.get(delta.lease_id, 0)
        encoded = delta.text.encode("utf-8")
        end = delta.offset + len(encoded)
        if end <= held:
            return None
        if delta.offset < held:
            cut = held - delta.offset
            delta = delta.model_copy(
                update={
                    "offset": held,
                    "text": encoded[cut:].decode("utf-8", errors="replace"),
                }
            )
        self._text_held[delta.lease_id] = end
        return delta
