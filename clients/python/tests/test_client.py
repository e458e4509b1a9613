"""The synchronous client against a real `leasehold serve`: runs started,
read, listed, followed to their end across a dropped connection, paused
and resumed, steered, cancelled, reconciled and forked."""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import List

import pytest

from conftest import Served, flow
from leasehold_client import (
    Client,
    Event,
    RunPosted,
    StreamItem,
    TextDelta,
    Unprocessable,
)
from support.cut import CutOnce
from support.scripted_model import ANSWER_TEXT, ScriptedModel


def until(stream, kind: str) -> List[Event]:
    """The events of `stream` up to the first of `kind`, included."""
    seen = []
    for item in stream:
        if isinstance(item, Event):
            seen.append(item)
            if item.kind == kind:
                return seen
    pytest.fail(f"the stream ended ({stream.end}) before a {kind} event: {kinds(seen)}")


def status_becomes(client: Client, run_id: str, status: str, patience: float = 10.0):
    """The run's view once the server says it is `status`: a run's status
    is written just after the event that changes it, so the server is
    asked again until it says so (or `patience` seconds have passed)."""
    deadline = time.monotonic() + patience
    while True:
        run = client.get_run(run_id)
        if run.status == status:
            return run
        if time.monotonic() > deadline:
            pytest.fail(f"run {run_id} is {run.status}, not {status}")


def kinds(events: List[Event]) -> List[str]:
    return [event.kind for event in events]


def whole_log(events: List[Event]) -> None:
    """`events` are a run's log from its first event, each once, in order."""
    assert [e.position for e in events] == list(range(1, len(events) + 1)), kinds(events)
    seqs = [e.seq for e in events]
    assert seqs == sorted(set(seqs)), seqs


def test_a_run_started_from_a_dict_is_followed_to_its_end(client: Client, name: str) -> None:
    posted = client.start_run(flow(name))
    assert isinstance(posted, RunPosted) and posted.status == "running" and not posted.replayed

    stream = client.events(posted.run_id)
    events = [item for item in stream if isinstance(item, Event)]

    whole_log(events)
    assert events[0].kind == "run_started" and events[-1].kind == "run_completed"
    assert events[-1].get("answer") == ANSWER_TEXT
    assert stream.end is not None and stream.end.status == "completed"
    assert stream.last_event_id == events[-1].seq and stream.reconnects == 0
    run = status_becomes(client, posted.run_id, "completed")
    assert (run.answer, run.flow_name) == (ANSWER_TEXT, name)
    assert run.ended and run.flow is not None and run.usage is not None
    trace = client.trace(posted.run_id)
    assert trace.run_id == posted.run_id and trace.started_at == events[0].at
    # Read again once ended, the stream replays the same log and ends.
    assert [e.seq for e in client.events(posted.run_id, live=False)] == [e.seq for e in events]
    # After a seq: only what came after it.
    after = [e.seq for e in client.events(posted.run_id, after=events[1].seq)]
    assert after == [e.seq for e in events[2:]]


def test_runs_start_from_toml_and_json_flow_files(client: Client, name: str, tmp_path) -> None:
    toml = tmp_path / "flow.toml"
    toml.write_text(f'name = "{name}"\ntask = "answer from TOML"\nmax_steps = 3\n')
    as_json = tmp_path / "flow.json"
    as_json.write_text(json.dumps({"name": name, "task": "answer from JSON", "max_steps": 3}))

    for path, task in [(toml, "answer from TOML"), (as_json, "answer from JSON")]:
        posted = client.start_run_file(path)
        list(client.events(posted.run_id))
        run = status_becomes(client, posted.run_id, "completed")
        assert (run.flow_name, run.task) == (name, task)
    with pytest.raises(ValueError, match="json or .toml"):
        client.start_run_file(tmp_path / "flow.yaml")


def test_an_idempotency_key_starts_one_run(client: Client, name: str) -> None:
    first = client.start_run(flow(name), idempotency_key=f"key-{name}")
    again = client.start_run(flow(name), idempotency_key=f"key-{name}")
    assert again.run_id == first.run_id
    assert (first.replayed, again.replayed) == (False, True)
    other = client.start_run(flow(name), idempotency_key=f"other-{name}")
    assert other.run_id != first.run_id

    with pytest.raises(Unprocessable) as refused:
        client.start_run(flow(name, task="another task"), idempotency_key=f"key-{name}")
    assert (refused.value.status, refused.value.code) == (422, "idempotency_key_reused")
    for run_id in (first.run_id, other.run_id):
        list(client.events(run_id))


def test_runs_are_read_and_listed_page_by_page(client: Client, name: str) -> None:
    before = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1)
    ids = []
    for _ in range(3):
        ids.append(client.start_run(flow(name)).run_id)
    for run_id in ids:
        list(client.events(run_id))
        status_becomes(client, run_id, "completed")

    first = client.list_runs(flow=name, limit=2)
    assert [run.run_id for run in first.runs] == ids[::-1][:2] and first.next is not None
    second = client.list_runs(flow=name, limit=2, after=first.next)
    assert [run.run_id for run in second.runs] == ids[:1] and second.next is None
    assert [run.run_id for run in client.iter_runs(flow=name, page_size=1)] == ids[::-1]
    assert len(client.list_runs(flow=name, status="completed", since=before).runs) == 3
    assert client.list_runs(flow=name, status="waiting_human").runs == []
    assert client.list_runs(flow=name, until=before).runs == []
    listed = client.list_runs(flow=name).runs[0]
    assert listed.flow is None and listed.answer == ANSWER_TEXT


def test_a_stream_cut_mid_frame_is_picked_up_from_the_last_event(
    served: Served, name: str
) -> None:
    with served.client() as client:
        run_id = client.start_run(flow(name)).run_id
        logged = list(client.events(run_id))
    cut = CutOnce(after_bytes=700)
    with served.client(transport=cut) as client:
        stream = client.events(run_id)
        events = list(stream)

    assert [e.seq for e in events] == [e.seq for e in logged]
    whole_log(events)
    assert stream.reconnects == 1 and stream.end.status == "completed"
    # The second connection asked for what came after the last event the
    # first one delivered whole: not the one it cut.
    assert cut.last_event_ids[0] is None
    resumed_after = int(cut.last_event_ids[1])
    assert resumed_after in [e.seq for e in events[:-1]]
    assert len(cut.last_event_ids) == 2


def test_a_live_stream_cut_while_the_run_waits_goes_on_to_its_end(
    served: Served, model: ScriptedModel, name: str
) -> None:
    cut = CutOnce(after_bytes=200)
    with served.client(transport=cut) as client:
        run_id = client.start_run(flow(name, task=f"wait at gate:{name}")).run_id
        stream = client.events(run_id)
        seen = until(stream, "model_call_started")
        assert stream.reconnects == 1, "the first connection was cut within its first event"
        model.open(name)
        seen += list(stream)

    whole_log(seen)
    assert seen[-1].kind == "run_completed" and stream.end.status == "completed"
    assert cut.last_event_ids[:1] == [None] and len(cut.last_event_ids) == 2


def test_text_is_followed_as_the_model_writes_it(
    served: Served, model: ScriptedModel, name: str
) -> None:
    with served.client() as client:
        run_id = client.start_run(flow(name, task=f"write at text-gate:{name}")).run_id
        stream = client.events(run_id, text=True)
        items: List[StreamItem] = []
        for item in stream:
            items.append(item)
            if isinstance(item, TextDelta):
                # The first words arrived while the call is in flight.
                model.open(name)
        texts = [item for item in items if isinstance(item, TextDelta)]
        assert "".join(t.text for t in texts) == ANSWER_TEXT
        assert [t.offset for t in texts] == sorted(t.offset for t in texts)
        assert stream.end.status == "completed"


def test_a_paused_run_goes_on_when_resumed(
    served: Served, model: ScriptedModel, name: str
) -> None:
    with served.client() as client:
        run_id = client.start_run(flow(name, task=f"wait at gate:{name}")).run_id
        stream = client.events(run_id)
        until(stream, "model_call_started")

        paused = client.pause(run_id, reason="a look first", in_flight="cancel", by="ana")
        assert paused.run_id == run_id and paused.after_seq is not None
        until(stream, "paused")
        run = status_becomes(client, run_id, "waiting_human")
        assert "a look first" in run.pause.reason

        resumed = client.resume(run_id, guidance="GO-AHEAD with the resume")
        assert resumed.status in ("running", "waiting_human")
        rest = list(stream)
        assert rest[-1].kind == "run_completed" and stream.end.status == "completed"
        assert model.saw("GO-AHEAD with the resume")
        assert client.trace(run_id).summary.pauses >= 1


def test_a_message_steers_a_running_run(
    served: Served, model: ScriptedModel, name: str
) -> None:
    with served.client() as client:
        run_id = client.start_run(flow(name, task=f"wait at gate:{name}")).run_id
        stream = client.events(run_id)
        until(stream, "model_call_started")

        steered = client.steer(run_id, "GO-AHEAD, steered", policy="interrupt", by="ana")
        assert steered.run_id == run_id
        rest = list(stream)
        assert "message_received" in kinds(rest) and stream.end.status == "completed"
        assert model.saw("GO-AHEAD, steered")
        received = [e for e in client.trace(run_id).entries if e.kind == "message_received"]
        assert received and received[0].get("text") == "GO-AHEAD, steered"


def test_a_cancelled_run_ends_cancelled(served: Served, name: str) -> None:
    with served.client() as client:
        run_id = client.start_run(flow(name, task=f"wait at gate:{name}")).run_id
        stream = client.events(run_id)
        until(stream, "model_call_started")
        client.cancel(run_id, reason="not needed")
        rest = list(stream)
        assert rest[-1].kind == "run_cancelled" and stream.end.status == "cancelled"
        run = status_becomes(client, run_id, "cancelled")
        assert "not needed" in run.reason


def test_a_call_of_unknown_outcome_is_reconciled(
    served: Served, model: ScriptedModel, name: str
) -> None:
    charging = flow(
        name,
        task="charge-order 7",
        tools=[{"name": "ledger"}],
        leases={"tool_call": "100ms"},
    )
    with served.client() as client:
        run_id = client.start_run(charging).run_id
        stream = client.events(run_id)
        asked = until(stream, "reconciliation_required")[-1]
        run = status_becomes(client, run_id, "reconciliation_required")
        assert run.pause.call.tool == "charge"
        assert run.pause.call.key == asked.get("idempotency_key")

        decided = client.reconcile(
            run_id, run.pause.call.key, "mark_done", result="charged by hand"
        )
        assert decided.run_id == run_id
        list(stream)
        assert stream.end.status == "completed"
        calls = client.get_run(run_id).tool_calls
        assert any(c.key == run.pause.call.key and c.by_person for c in calls)
        assert model.saw("charged by hand")


def test_a_fork_runs_from_a_step_of_its_parent(client: Client, name: str) -> None:
    parent = client.start_run(flow(name)).run_id
    list(client.events(parent))

    forked = client.fork(parent, 1, guidance="GO-AHEAD, forked")
    assert forked.run_id != parent and forked.fork.parent == parent and forked.fork.step == 1
    stream = client.events(forked.run_id)
    list(stream)
    assert stream.end.status == "completed"
    run = status_becomes(client, forked.run_id, "completed")
    assert run.fork.parent == parent and run.fork.guidance == "GO-AHEAD, forked"
