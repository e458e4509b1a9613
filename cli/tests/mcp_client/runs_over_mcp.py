"""Runs over MCP, driven by the Python MCP SDK's streamable-HTTP client.

Started by cli/tests/mcp_server.rs against a real `leasehold serve`, with
in its environment:

  MCP_URL        the server's /mcp
  MCP_KEY        an `operate` key of tenant acme
  MCP_READ_KEY   a `read` key of tenant acme
  MCP_OTHER_KEY  an `operate` key of tenant bravo
  MCP_FLOW       a file holding the flow (JSON) to start, one that pauses
                 for a person once and then completes

It lists the tools; starts a run, follows its events until it pauses,
answers the pause and follows it until it completes; steers and cancels
another run; gives tools bad arguments; checks that another tenant's key
finds neither run, that a read key starts nothing, and that a bad key is
refused. Every check that fails is printed; the exit status is 1 if any
did. The last line printed is `RESULT {json}` with the runs' ids, which the
Rust test reads back over HTTP.
"""

import asyncio
import json
import os
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

URL = os.environ["MCP_URL"]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"FAILED: {what}", flush=True)
    return ok


def connect(key):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    return Client(streamable_http_client(URL, http_client=http))


def body(result):
    """A tool result's structured content, or its text read as JSON."""
    if result.structured_content is not None:
        return result.structured_content
    for block in result.content:
        text = getattr(block, "text", None)
        if text is not None:
            try:
                return json.loads(text)
            except ValueError:
                return {"text": text}
    return {}


async def call(client, tool, arguments):
    """(is_error, content) of a call; a JSON-RPC error counts as a tool error."""
    try:
        result = await client.call_tool(tool, arguments)
    except Exception as error:  # the SDK raises an invalid-params error
        return True, {"error": {"code": "jsonrpc", "message": str(error)}}
    return bool(result.is_error), body(result)


async def ok(client, tool, arguments):
    is_error, content = await call(client, tool, arguments)
    check(not is_error, f"{tool}({arguments}) answered an error: {content}")
    return content


async def refused(client, tool, arguments, code, naming):
    is_error, content = await call(client, tool, arguments)
    message = json.dumps(content)
    check(
        is_error and code in message and naming in message,
        f"{tool}({arguments}) should be refused with {code} naming {naming!r}: {content}",
    )
    return content


async def follow(client, run_id, until, cursor=0):
    """wait_events from `cursor` until `until(events)` holds or the run ends:
    every event seen, the cursor after them, and the last answer."""
    seen = []
    last = {}
    for _ in range(500):
        last = await ok(client, "wait_events", {"run_id": run_id, "after": cursor, "timeout_ms": 30000})
        events = last.get("events", [])
        seen.extend(events)
        if events:
            check(events[0]["seq"] > cursor, f"an event at or before the cursor {cursor}: {events[0]}")
        cursor = last.get("next", cursor)
        if until(seen) or last.get("ended"):
            break
    return seen, cursor, last


def kinds(events):
    return [event["kind"]["kind"] if isinstance(event.get("kind"), dict) else event.get("kind") for event in events]


async def main():
    with open(os.environ["MCP_FLOW"]) as file:
        flow = json.load(file)
    result = {}
    async with connect(os.environ["MCP_KEY"]) as client:
        listed = await client.list_tools()
        names = {tool.name for tool in listed.tools}
        check(
            names == {"start_run", "get_run", "wait_events", "answer_pause", "steer", "cancel"},
            f"the tools listed: {sorted(names)}",
        )

        # Bad arguments: each a tool error naming what was wrong.
        await refused(client, "get_run", {}, "invalid_arguments", "run_id")
        await refused(client, "get_run", {"run_id": 7}, "invalid_arguments", "string")
        await refused(client, "get_run", {"run_id": "r", "extra": 1}, "invalid_arguments", "extra")
        await refused(client, "wait_events", {"run_id": "r", "timeout_ms": 10**12}, "invalid_arguments", "timeout_ms")
        await refused(client, "wait_events", {"run_id": "r", "after": -1}, "invalid_arguments", "-1")
        await refused(client, "wait_events", {"run_id": "r", "limit": 0}, "invalid_arguments", "limit")
        await refused(client, "start_run", {}, "invalid_arguments", "flow")
        await refused(client, "start_run", {"flow": 12}, "invalid_arguments", "flow")
        await refused(client, "start_run", {"flow": "name = ["}, "invalid_flow", "TOML")
        huge = dict(flow, task="t" * 100_000)
        await refused(client, "start_run", {"flow": huge}, "too_large", "limits.task")
        await refused(client, "start_run", {"flow": flow, "idempotency_key": "has space"}, "bad_idempotency_key", "idempotency_key")
        await refused(client, "cancel", {"reason": "no run"}, "invalid_arguments", "run_id")
        await refused(client, "steer", {"run_id": "no-such-run", "text": "hello"}, "not_found", "no-such-run")
        await refused(client, "steer", {"run_id": "no-such-run"}, "invalid_arguments", "text")
        await refused(client, "answer_pause", {"run_id": "no-such-run"}, "not_found", "no-such-run")
        await refused(client, "get_run", {"run_id": "no-such-run"}, "not_found", "no-such-run")
        await refused(client, "no_such_tool", {}, "", "no_such_tool")

        # A run: started, followed until it pauses, answered, followed until it completes.
        started = await ok(client, "start_run", {"flow": flow, "idempotency_key": "mcp-first-run"})
        run_id = started.get("run_id")
        result["paused_run"] = run_id
        check(started.get("status") in ("running", "queued"), f"the start's status: {started}")
        again = await ok(client, "start_run", {"flow": flow, "idempotency_key": "mcp-first-run"})
        check(again.get("run_id") == run_id and again.get("replayed") is True, f"a retried start: {again}")

        seen, cursor, last = await follow(client, run_id, lambda events: "paused" in kinds(events))
        check("paused" in kinds(seen), f"the run paused: {kinds(seen)}")
        check(last.get("status") == "waiting_human", f"the wait that saw the pause says waiting_human: {last.get('status')}")
        view = await ok(client, "get_run", {"run_id": run_id})
        check(view.get("status") == "waiting_human", f"get_run of the paused run: {view.get('status')}")
        check(view.get("pause") is not None, f"get_run shows the pause: {view.get('pause')}")

        # Another tenant finds nothing, word for word as a run that does not exist.
        async with connect(os.environ["MCP_OTHER_KEY"]) as other:
            hidden = await refused(other, "get_run", {"run_id": run_id}, "not_found", run_id)
            missing = await refused(other, "get_run", {"run_id": "no-such-run"}, "not_found", "no-such-run")
            check(
                json.dumps(hidden).replace(run_id, "ID") == json.dumps(missing).replace("no-such-run", "ID"),
                f"another tenant's run and no run differ: {hidden} / {missing}",
            )
            for tool, arguments in [
                ("wait_events", {"run_id": run_id, "timeout_ms": 0}),
                ("answer_pause", {"run_id": run_id, "guidance": "not yours"}),
                ("steer", {"run_id": run_id, "text": "not yours"}),
                ("cancel", {"run_id": run_id, "reason": "not yours"}),
            ]:
                await refused(other, tool, arguments, "not_found", run_id)

        # A read key reads, and starts nothing.
        async with connect(os.environ["MCP_READ_KEY"]) as reader:
            read = await ok(reader, "get_run", {"run_id": run_id})
            check(read.get("run_id") == run_id, f"the read key's get_run: {read.get('run_id')}")
            await refused(reader, "start_run", {"flow": flow}, "forbidden_scope", "operate")
            await refused(reader, "answer_pause", {"run_id": run_id}, "forbidden_scope", "operate")

        # Still paused: nothing above reached it.
        view = await ok(client, "get_run", {"run_id": run_id})
        check(view.get("status") == "waiting_human", f"the run after the refusals: {view.get('status')}")

        await refused(client, "answer_pause", {"run_id": run_id, "guidance": 5}, "invalid_arguments", "guidance")
        answered = await ok(client, "answer_pause", {"run_id": run_id, "guidance": "Answered over MCP."})
        check(answered.get("run_id") == run_id, f"answer_pause: {answered}")
        seen, cursor, last = await follow(client, run_id, lambda events: False, cursor)
        check(last.get("ended") is True and last.get("status") == "completed", f"the run's end: {last}")
        check("resumed" in kinds(seen) and "run_completed" in kinds(seen), f"after the answer: {kinds(seen)}")
        check("Answered over MCP." in json.dumps(seen), "the guidance is in the run's events")
        # Past its end, a wait answers at once that it ended.
        after_end = await ok(client, "wait_events", {"run_id": run_id, "after": cursor, "timeout_ms": 60000})
        check(after_end.get("ended") is True and after_end.get("events") == [], f"a wait past the end: {after_end}")

        # Another run: steered, then cancelled.
        second = await ok(client, "start_run", {"flow": flow})
        second_id = second.get("run_id")
        result["cancelled_run"] = second_id
        seen, cursor, _ = await follow(client, second_id, lambda events: "step_started" in kinds(events))
        await refused(client, "steer", {"run_id": second_id, "text": "x", "policy": "sideways"}, "invalid_arguments", "policy")
        steered = await ok(client, "steer", {"run_id": second_id, "text": "Steered over MCP.", "by": "the mcp test"})
        check(steered.get("run_id") == second_id, f"steer: {steered}")
        seen, cursor, _ = await follow(client, second_id, lambda events: "Steered over MCP." in json.dumps(events), cursor)
        check("Steered over MCP." in json.dumps(seen), f"the message reached the run: {kinds(seen)}")
        cancelled = await ok(client, "cancel", {"run_id": second_id, "reason": "cancelled over MCP"})
        check(cancelled.get("run_id") == second_id, f"cancel: {cancelled}")
        seen, cursor, last = await follow(client, second_id, lambda events: False, cursor)
        check(last.get("ended") is True and last.get("status") == "cancelled", f"the second run's end: {last}")

    # A bad key is refused before MCP: 401, and the SDK cannot connect.
    async with httpx2.AsyncClient() as http:
        for key in ["lh_nosuchkey_secret", "not-a-key"]:
            response = await http.post(
                URL,
                headers={
                    "Authorization": f"Bearer {key}",
                    "Accept": "application/json, text/event-stream",
                    "Content-Type": "application/json",
                },
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            )
            check(response.status_code == 401, f"a bad key {key!r}: {response.status_code} {response.text}")
        # A page of another site cannot drive it (the guard's Origin check).
        response = await http.post(
            URL,
            headers={
                "Authorization": f"Bearer {os.environ['MCP_KEY']}",
                "Origin": "http://evil.example",
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
            },
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        )
        check(response.status_code == 403, f"another site's Origin: {response.status_code} {response.text}")
        # A body past the server's limit is refused before MCP reads it.
        response = await http.post(
            URL,
            headers={
                "Authorization": f"Bearer {os.environ['MCP_KEY']}",
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
            },
            content=b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": "' + b"x" * 2_000_000 + b'"}}',
        )
        check(response.status_code == 413, f"a body of 2 MB: {response.status_code} {response.text[:200]}")
    try:
        async with connect("lh_nosuchkey_secret") as client:
            await client.list_tools()
        check(False, "the SDK connected with a bad key")
    except Exception:
        pass

    print("RESULT " + json.dumps(result), flush=True)
    return 1 if failures else 0


sys.exit(asyncio.run(main()))
