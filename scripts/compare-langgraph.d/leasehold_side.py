"""Posts `--runs` runs at once to one or more `leasehold serve`s (round
robin), waits until every executor holds none live or queued, and prints
what the servers (and the model server, and PostgreSQL's postmaster and its
backends, when given) spent meanwhile, as one JSON object.

    python leasehold_side.py --bases URL[,URL] --pids PID[,PID] --model URL
        --runs N --flow JSON [--pg-pid PID]
"""

import argparse
import asyncio
import json
import time

import aiohttp

import procstat


async def get_json(session, url):
    async with session.get(url) as response:
        response.raise_for_status()
        return await response.json()


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bases", required=True)
    parser.add_argument("--pids", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--flow", required=True)
    parser.add_argument("--pg-pid", type=int)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    bases = args.bases.split(",")
    pids = [int(p) for p in args.pids.split(",")]
    flow = json.loads(args.flow)

    connector = aiohttp.TCPConnector(limit=256)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        model0 = await get_json(session, args.model + "/stats")
        cpu0 = [procstat.cpu(pid) for pid in pids]
        rss0 = [procstat.rss(pid) for pid in pids]
        pg0 = procstat.tree_cpu(args.pg_pid) if args.pg_pid else None
        start = time.monotonic()

        answers = {}

        async def post(i):
            base = bases[i % len(bases)]
            async with session.post(base + "/runs", json=flow) as response:
                body = await response.text()
                answers[response.status] = answers.get(response.status, 0) + 1
                if response.status != 201:
                    return f"POST /runs to {base}: {response.status} {body[:300]}"
                return None

        posting = asyncio.gather(*(post(i) for i in range(args.runs)))
        max_live = 0
        while True:
            await asyncio.sleep(0.25)
            if time.monotonic() - start > args.timeout:
                raise SystemExit(f"leasehold: runs still live after {args.timeout:.0f} s")
            live = queued = 0
            for base in bases:
                executor = await get_json(session, base + "/executor")
                live += executor["live_runs"]
                queued = max(queued, executor.get("queued_runs") or 0)
            max_live = max(max_live, live)
            if posting.done() and live == 0 and queued == 0:
                break
        elapsed = time.monotonic() - start
        cpu1 = [procstat.cpu(pid) for pid in pids]
        hwm = [procstat.hwm(pid) for pid in pids]
        pg1 = procstat.tree_cpu(args.pg_pid) if args.pg_pid else None
        model1 = await get_json(session, args.model + "/stats")
        errors = [e for e in posting.result() if e]

        # What became of the runs: counted once the figures are taken.
        statuses = {}
        for base in bases[:1]:
            after = None
            while True:
                url = base + "/runs?limit=500" + (f"&after={after}" if after else "")
                page = await get_json(session, url)
                for run in page["runs"]:
                    statuses[run["status"]] = statuses.get(run["status"], 0) + 1
                after = page.get("next")
                if not after:
                    break

    print(json.dumps({
        "side": "leasehold",
        "runs": args.runs,
        "executors": len(bases),
        "answers": answers,
        "errors": errors[:5],
        "statuses": statuses,
        "wall_s": elapsed,
        "cpu_s": sum(cpu1) - sum(cpu0),
        "cpu_per_executor_s": [b - a for a, b in zip(cpu0, cpu1)],
        "rss_before": rss0,
        "peak_rss": hwm,
        "max_live": max_live,
        "model_calls": model1["calls"] - model0["calls"],
        "model_cpu_s": model1["cpu_s"] - model0["cpu_s"],
        "db_cpu_s": (pg1 - pg0) if args.pg_pid else None,
    }))


if __name__ == "__main__":
    asyncio.run(main())
