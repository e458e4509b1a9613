"""The SSE decoder and a stream's bookkeeping, on bytes cut anywhere."""

from __future__ import annotations

import json

from leasehold_client import Event, TextDelta
from leasehold_client.sse import Follow, SseDecoder


def test_frames_are_decoded_whatever_the_line_ends_and_the_cuts() -> None:
    wire = (
        b": keep-alive\r\n\r\n"
        b"id: 7\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n"
        b"event: end\rdata: {\"status\": \"completed\"}\r\r"
        b"id: 9\ndata: half"
    )
    for size in range(1, len(wire) + 1):
        decoder = SseDecoder()
        frames = []
        for start in range(0, len(wire), size):
            frames += decoder.feed(wire[start : start + size])
        assert [(f.event, f.data, f.id) for f in frames] == [
            ("message", '{"a":\n1}', "7"),
            ("end", '{"status": "completed"}', None),
        ], size
        # The frame cut by the end of the bytes is never dispatched.
        assert decoder.last_id == "9"


def _event(seq: int, position: int) -> bytes:
    data = {"seq": seq, "position": position, "at": 1, "run_id": "r", "path": "run", "kind": "k"}
    return f"id: {seq}\ndata: {json.dumps(data)}\n\n".encode()


def test_a_follow_yields_each_event_and_text_once_and_reconnects_after_the_last() -> None:
    follow = Follow("r", after=None, text=True)
    assert "last-event-id" not in follow.headers()
    items = list(follow.feed(_event(3, 1) + _event(5, 2)))
    assert [i.seq for i in items] == [3, 5] and follow.headers()["last-event-id"] == "5"
    text = b'event: text\ndata: {"lease_id": 1, "path": "run", "offset": 0, "text": "abc"}\n\n'
    assert [i.text for i in follow.feed(text) if isinstance(i, TextDelta)] == ["abc"]

    follow.connection_opened()
    again = b'event: text\ndata: {"lease_id": 1, "path": "run", "offset": 0, "text": "abcde"}\n\n'
    items = list(follow.feed(_event(5, 2) + again + _event(8, 3)))
    assert [(type(i), getattr(i, "text", None)) for i in items] == [
        (TextDelta, "de"),
        (Event, None),
    ]
    assert items[0].offset == 3 and follow.last_event_id == 8
    assert list(follow.feed(b'event: end\ndata: {"status": "failed"}\n\n' + _event(9, 4))) == []
    assert follow.ended and follow.end.status == "failed"
