"""The async client against the same real `leasehold serve`: what the
sync tests do, through `AsyncClient` and its async event stream."""

from __future__ import annotations

import json
import time
from typing import List

import pytest

from conftest import Served, flow
from leasehold_client import (
    AsyncClient,
    BadRequest,
    Event,
    Forbidden,
    NotFound,
    TextDelta,
    Unprocessable,
)
from support.cut import AsyncCutOnce
from support.scripted_model import ANSWER_TEXT, ScriptedModel
from test_client import kinds, whole_log

pytestmark = pytest.mark.anyio


async def until(stream, kind: str) -> List[Event]:
    seen = []
    async for item in stream:
        if isinstance(item, Event):
            seen.append(item)
            if item.kind == kind:
                return seen
    pytest.fail(f"the stream ended ({stream.end}) before a {kind} event: {kinds(seen)}")


async def rest(stream) -> List[Event]:
    return [item async for item in stream if isinstance(item, Event)]


async def status_becomes(client: AsyncClient, run_id: str, status: str, patience: float = 10.0):
    deadline = time.monotonic() + patience
    while True:
        run = await client.get_run(run_id)
        if run.status == status:
            return run
        if time.monotonic() > deadline:
            pytest.fail(f"run {run_id} is {run.status}, not {status}")


async def test_runs_start_from_a_dict_and_a_file_and_are_followed(
    served: Served, name: str, tmp_path
) -> None:
    toml = tmp_path / "flow.toml"
    toml.write_text(f'name = "{name}"\ntask = "answer from TOML"\nmax_steps = 3\n')
    async with served.async_client() as client:
        from_dict = await client.start_run(flow(name))
        from_file = await client.start_run_file(toml)
        for posted in (from_dict, from_file):
            stream = client.events(posted.run_id)
            events = await rest(stream)
            whole_log(events)
            assert events[-1].kind == "run_completed" and stream.end.status == "completed"
            run = await status_becomes(client, posted.run_id, "completed")
            assert run.answer == ANSWER_TEXT
        assert (await client.get_run(from_file.run_id)).task == "answer from TOML"

        page = await client.list_runs(flow=name, limit=1)
        assert [r.run_id for r in page.runs] == [from_file.run_id] and page.next
        listed = [run.run_id async for run in client.iter_runs(flow=name, page_size=1)]
        assert listed == [from_file.run_id, from_dict.run_id]
        trace = await client.trace(from_dict.run_id)
        assert trace.run_id == from_dict.run_id and trace.summary.pauses == 0


async def test_an_idempotency_key_starts_one_run(served: Served, name: str) -> None:
    async with served.async_client() as client:
        first = await client.start_run(flow(name), idempotency_key=name)
        again = await client.start_run(flow(name), idempotency_key=name)
        assert again.run_id == first.run_id and again.replayed and not first.replayed
        await rest(client.events(first.run_id))


async def test_a_cut_stream_is_picked_up_with_no_event_twice_or_missing(
    served: Served, name: str
) -> None:
    async with served.async_client() as client:
        run_id = (await client.start_run(flow(name))).run_id
        logged = await rest(client.events(run_id))
    cut = AsyncCutOnce(after_bytes=900)
    async with served.async_client(transport=cut) as client:
        stream = client.events(run_id)
        events = await rest(stream)
    assert [e.seq for e in events] == [e.seq for e in logged]
    whole_log(events)
    assert stream.reconnects == 1 and len(cut.last_event_ids) == 2
    assert int(cut.last_event_ids[1]) in [e.seq for e in events[:-1]]


async def test_text_arrives_while_the_model_writes(
    served: Served, model: ScriptedModel, name: str
) -> None:
    async with served.async_client() as client:
        run_id = (await client.start_run(flow(name, task=f"write at text-gate:{name}"))).run_id
        pieces = []
        async for piece in client.text(run_id):
            pieces.append(piece)
            model.open(name)
        assert "".join(pieces) == ANSWER_TEXT


async def test_pause_resume_steer_and_cancel(
    served: Served, model: ScriptedModel, name: str
) -> None:
    async with served.async_client() as client:
        paused_run = (await client.start_run(flow(name, task=f"wait at gate:{name}-p"))).run_id
        stream = client.events(paused_run)
        await until(stream, "model_call_started")
        await client.pause(paused_run, reason="a look", in_flight="cancel")
        await until(stream, "paused")
        await status_becomes(client, paused_run, "waiting_human")
        await client.resume(paused_run, guidance="GO-AHEAD, async resume")
        await rest(stream)
        assert stream.end.status == "completed" and model.saw("GO-AHEAD, async resume")

        steered_run = (await client.start_run(flow(name, task=f"wait at gate:{name}-s"))).run_id
        stream = client.events(steered_run)
        await until(stream, "model_call_started")
        await client.steer(steered_run, "GO-AHEAD, async steer", policy="interrupt")
        assert "message_received" in kinds(await rest(stream))
        assert stream.end.status == "completed" and model.saw("GO-AHEAD, async steer")

        cancelled_run = (await client.start_run(flow(name, task=f"wait at gate:{name}-c"))).run_id
        stream = client.events(cancelled_run)
        await until(stream, "model_call_started")
        await client.cancel(cancelled_run, reason="not needed")
        await rest(stream)
        assert stream.end.status == "cancelled"


async def test_reconcile_and_fork(served: Served, model: ScriptedModel, name: str) -> None:
    charging = flow(
        name, task="charge-order 8", tools=[{"name": "ledger"}], leases={"tool_call": "100ms"}
    )
    async with served.async_client() as client:
        run_id = (await client.start_run(charging)).run_id
        stream = client.events(run_id)
        asked = (await until(stream, "reconciliation_required"))[-1]
        await status_becomes(client, run_id, "reconciliation_required")
        await client.reconcile(
            run_id, asked.get("idempotency_key"), "mark_done", result="charged, async"
        )
        await rest(stream)
        assert stream.end.status == "completed" and model.saw("charged, async")

        forked = await client.fork(run_id, "1", guidance="GO-AHEAD, async fork")
        assert forked.fork.parent == run_id
        stream = client.events(forked.run_id)
        await rest(stream)
        assert stream.end.status == "completed"


async def test_refusals_are_raised_with_their_code_and_status(
    served: Served, name: str
) -> None:
    async with served.async_client() as client:
        with pytest.raises(NotFound) as refused:
            await client.get_run("run-that-never-was")
        assert (refused.value.status, refused.value.code) == (404, "not_found")
        with pytest.raises(NotFound):
            await rest(client.events("run-that-never-was"))
        with pytest.raises(Unprocessable) as refused:
            await client.start_run({"name": name, "task": "no steps"})
        assert (refused.value.status, refused.value.code) == (422, "invalid_flow")
        with pytest.raises(BadRequest) as refused:
            await client.list_runs(since="yesterday")
        assert (refused.value.status, refused.value.code) == (400, "bad_request")
        reader = await client.create_key("read", tenant=name)
        assert [key.id for key in await client.list_keys(tenant=name)] == [reader.id]
    async with served.async_client(token=reader.secret) as reading:
        with pytest.raises(Forbidden) as refused:
            await reading.start_run(flow(name))
        assert (refused.value.status, refused.value.code) == (403, "forbidden_scope")


async def test_a_json_flow_file_is_sent_as_json(served: Served, name: str, tmp_path) -> None:
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(flow(name)))
    async with served.async_client() as client:
        posted = await client.start_run_file(path)
        items = [item async for item in client.events(posted.run_id, text=True)]
        assert any(isinstance(item, Event) for item in items)
        assert all(isinstance(item, (Event, TextDelta)) for item in items)
