"""The LangGraph side: a graph of one node that streams a chat completion
from the model server with langchain-openai's ChatOpenAI (what LangGraph's
documentation has users write; `--client openai` calls the `openai` client
directly instead) over openai's aiohttp transport (`--http httpx`: its
default), its state in a checkpointer — LangGraph's InMemorySaver,
or with `--pg DSN` langgraph-checkpoint-postgres's AsyncPostgresSaver on a
psycopg pool of 16 connections (leasehold's pool size) — and `--runs`
invocations started at once with asyncio, one thread each. Prints, as one
JSON object, what this process (and the model server, and PostgreSQL's
postmaster and its backends, when given) spent on them: the figures are
taken after the imports, the graph's compilation and the saver's setup.

    python langgraph_side.py --model URL --runs N --system S --task T
        [--client langchain|openai] [--http aiohttp|httpx] [--pg DSN --pg-pid PID]
"""

import argparse
import asyncio
import json
import os
import sys
import time
import urllib.request

import httpx2
import openai
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.graph import START, MessagesState, StateGraph

import procstat


def model_stats(url):
    with urllib.request.urlopen(url + "/stats") as response:
        return json.load(response)


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--system", required=True)
    parser.add_argument("--task", required=True)
    parser.add_argument("--client", choices=["langchain", "openai"], default="langchain")
    parser.add_argument("--http", choices=["aiohttp", "httpx"], default="aiohttp")
    parser.add_argument("--pg")
    parser.add_argument("--pg-pid", type=int)
    parser.add_argument("--reset-statements", action="store_true",
                        help="reset pg_stat_statements once the saver is set up")
    args = parser.parse_args()

    # The HTTP client under both: openai's aiohttp transport (`--http
    # aiohttp`, what the openai client's documentation gives for high
    # concurrency, and the cheapest at 2 000 calls), or its default
    # (`--http httpx`); either with as many connections as calls in
    # flight, as leasehold's client opens. (A plain httpx.AsyncClient is
    # worse than both: its pool scans every connection on every request.)
    limits = httpx2.Limits(max_connections=args.runs, max_keepalive_connections=args.runs)
    timeout = httpx2.Timeout(600, connect=10)
    if args.http == "aiohttp":
        http = openai.DefaultAioHttpClient(limits=limits, timeout=timeout)
    else:
        http = openai.DefaultAsyncHttpxClient(limits=limits, timeout=timeout)
    if args.client == "langchain":
        from langchain_openai import ChatOpenAI

        llm = ChatOpenAI(model="bench", base_url=args.model + "/v1", api_key="bench",
                         streaming=True, stream_usage=True, http_async_client=http)

        async def call_model(state: MessagesState):
            answer = None
            async for chunk in llm.astream(state["messages"]):
                answer = chunk if answer is None else answer + chunk
            return {"messages": [answer]}
    else:
        from openai import AsyncOpenAI

        client = AsyncOpenAI(base_url=args.model + "/v1", api_key="bench", http_client=http)

        async def call_model(state: MessagesState):
            roles = {"system": "system", "human": "user", "ai": "assistant"}
            messages = [{"role": roles[m.type], "content": m.content} for m in state["messages"]]
            stream = await client.chat.completions.create(
                model="bench", messages=messages, stream=True,
                stream_options={"include_usage": True})
            parts = []
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    parts.append(chunk.choices[0].delta.content)
            return {"messages": [AIMessage("".join(parts))]}

    builder = StateGraph(MessagesState)
    builder.add_node("call_model", call_model)
    builder.add_edge(START, "call_model")

    pool = None
    if args.pg:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool

        pool = AsyncConnectionPool(
            args.pg, min_size=16, max_size=16, open=False,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row})
        await pool.open(wait=True)
        checkpointer = AsyncPostgresSaver(pool)
        await checkpointer.setup()
        if args.reset_statements:
            async with pool.connection() as conn:
                await conn.execute("select pg_stat_statements_reset()")
        durability = "sync"
    else:
        from langgraph.checkpoint.memory import InMemorySaver

        checkpointer = InMemorySaver()
        durability = "async"
    graph = builder.compile(checkpointer=checkpointer)

    messages = [SystemMessage(args.system), HumanMessage(args.task)]

    async def invoke(i):
        config = {"configurable": {"thread_id": f"run-{i}"}}
        state = await graph.ainvoke({"messages": messages}, config, durability=durability)
        return len(state["messages"]) == 3 and bool(state["messages"][-1].content)

    model0 = model_stats(args.model)
    pid = os.getpid()
    cpu0 = procstat.cpu(pid)
    rss0 = procstat.rss(pid)
    pg0 = procstat.tree_cpu(args.pg_pid) if args.pg_pid else None
    start = time.monotonic()
    results = await asyncio.gather(*(invoke(i) for i in range(args.runs)), return_exceptions=True)
    elapsed = time.monotonic() - start
    cpu1 = procstat.cpu(pid)
    hwm = procstat.hwm(pid)
    pg1 = procstat.tree_cpu(args.pg_pid) if args.pg_pid else None
    model1 = model_stats(args.model)

    errors = [repr(r) for r in results if isinstance(r, BaseException)]
    completed = sum(1 for r in results if r is True)
    if pool is not None:
        await pool.close()
    await http.aclose()
    import langgraph.version

    print(json.dumps({
        "side": "langgraph",
        "version": langgraph.version.__version__,
        "client": args.client,
        "http": args.http,
        "runs": args.runs,
        "statuses": {"completed": completed, "failed": args.runs - completed},
        "errors": errors[:5],
        "wall_s": elapsed,
        "cpu_s": cpu1 - cpu0,
        "rss_before": [rss0],
        "peak_rss": [hwm],
        "model_calls": model1["calls"] - model0["calls"],
        "model_cpu_s": model1["cpu_s"] - model0["cpu_s"],
        "db_cpu_s": (pg1 - pg0) if args.pg_pid else None,
    }))


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
