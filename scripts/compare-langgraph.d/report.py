"""The table of scripts/compare-langgraph: each part's figures per run on
both sides, their ratios, and PASS or MISS against issue 41's targets; then
the PostgreSQL statements each side made per run. Exits 1 if a run of
either side did not complete (the figures are printed all the same)."""

import argparse
import json
import os

MIB = 1 << 20


def load(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def completed(side):
    return side["statuses"].get("completed", 0)


def row(name, lh, lg, unit, target=None, fmt="{:.2f}"):
    ratio = lh / lg if lg else None
    verdict = ""
    if target is not None:
        verdict = f"≤ {target}× {'PASS' if ratio is not None and ratio <= target else 'MISS'}"
    shown = "—" if ratio is None else f"{ratio:.2f}×"
    unit = f" {unit}" if unit else ""
    print(f"| {name} | {fmt.format(lh)}{unit} | {fmt.format(lg)}{unit} | {shown} | {verdict} |")


def header(title):
    print()
    print(f"## {title}")
    print()
    print("| per run | leasehold | LangGraph | ratio | target |")
    print("|---|---|---|---|---|")


def sides(lh, lg, runs):
    print(f"| runs completed | {completed(lh)} of {runs} | {completed(lg)} of {runs} | | |")
    print(f"| model calls | {lh['model_calls'] / runs:.2f} | {lg['model_calls'] / runs:.2f} | | |")
    print(f"| wall time, all runs | {lh['wall_s']:.1f} s | {lg['wall_s']:.1f} s | | |")
    print(f"| model server's CPU | {1000 * lh['model_cpu_s'] / runs:.3f} ms "
          f"| {1000 * lg['model_cpu_s'] / runs:.3f} ms | | |")


def problems(side):
    out = []
    other = {k: v for k, v in side["statuses"].items() if k != "completed" and v}
    if completed(side) != side["runs"]:
        out.append(f"{side['side']}: {completed(side)} of {side['runs']} runs completed; others {other}")
    for error in side.get("errors", []):
        out.append(f"{side['side']}: {error}")
    return out


def statements(path, runs, top=25):
    """Per run: the statements the side sent (top level), those PostgreSQL
    ran inside them (nested: foreign-key checks, a function's queries),
    and the list of both, most called first."""
    if not os.path.exists(path):
        return 0.0, 0.0, []
    sent = nested = 0.0
    lines = []
    with open(path) as f:
        for line in f:
            toplevel, calls, exec_ms, query = line.rstrip("\n").split("\t", 3)
            if "pg_stat_statements" in query:
                continue
            per_run = float(calls) / runs
            ms = float(exec_ms) / runs
            if toplevel == "t":
                sent += per_run
                lines.append((per_run, ms, query))
            else:
                nested += per_run
                lines.append((per_run, ms, "(nested) " + query))
    return sent, nested, lines[:top]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--load-start")
    parser.add_argument("--load-end")
    parser.add_argument("--executors", type=int)
    parser.add_argument("--chunks", type=int)
    parser.add_argument("--chunk-ms")
    args = parser.parse_args()
    d = args.dir
    failures = []

    lh, lg = load(f"{d}/memory-leasehold.json"), load(f"{d}/memory-langgraph.json")
    if lh and lg:
        runs = lh["runs"]
        header(f"In memory: {runs} streaming runs at once ({args.chunks} chunks {args.chunk_ms} ms apart)")
        row("CPU", 1000 * lh["cpu_s"] / runs, 1000 * lg["cpu_s"] / runs, "ms", 0.25, "{:.3f}")
        row("peak RSS (whole process)", sum(lh["peak_rss"]) / MIB, sum(lg["peak_rss"]) / MIB,
            "MiB", 0.5, "{:.1f}")
        row("RSS before the runs", sum(lh["rss_before"]) / MIB, sum(lg["rss_before"]) / MIB,
            "MiB", None, "{:.1f}")
        lh_growth = (sum(lh["peak_rss"]) - sum(lh["rss_before"])) / runs / 1024
        lg_growth = (sum(lg["peak_rss"]) - sum(lg["rss_before"])) / runs / 1024
        row("peak RSS over RSS before, per run", lh_growth, lg_growth, "KiB", None, "{:.1f}")
        sides(lh, lg, runs)
        print(f"| runs live at once (sampled) | {lh['max_live']} | {runs} (all gathered) | | |")
        if lh["max_live"] < runs:
            print()
            print(f"Note: leasehold held at most {lh['max_live']} of the {runs} runs live at once "
                  "(sampled 4 times a second): runs ended before the last were posted, so its peak "
                  "RSS is that of fewer live runs than LangGraph's; longer answers (--chunk-ms 200) "
                  "hold them all.")
        failures += problems(lh) + problems(lg)

    lh, lg = load(f"{d}/postgres-leasehold.json"), load(f"{d}/postgres-langgraph.json")
    if lh and lg:
        runs = lh["runs"]
        header(f"On PostgreSQL: {runs} durable runs at once (leasehold: {lh['executors']} "
               f"executor{'s' if lh['executors'] > 1 else ''}; LangGraph: one process, AsyncPostgresSaver)")
        row("CPU, the database's included", 1000 * (lh["cpu_s"] + lh["db_cpu_s"]) / runs,
            1000 * (lg["cpu_s"] + lg["db_cpu_s"]) / runs, "ms", 0.4, "{:.3f}")
        row("of which the process(es)", 1000 * lh["cpu_s"] / runs, 1000 * lg["cpu_s"] / runs,
            "ms", None, "{:.3f}")
        row("of which the database", 1000 * lh["db_cpu_s"] / runs, 1000 * lg["db_cpu_s"] / runs,
            "ms", None, "{:.3f}")
        row("peak RSS (whole process(es))", sum(lh["peak_rss"]) / MIB, sum(lg["peak_rss"]) / MIB,
            "MiB", None, "{:.1f}")
        lh_sent, lh_nested, lh_statements = statements(f"{d}/postgres-leasehold.statements", runs)
        lg_sent, lg_nested, lg_statements = statements(f"{d}/postgres-langgraph.statements", runs)
        row("statements sent (pg_stat_statements)", lh_sent, lg_sent, "", None, "{:.1f}")
        row("statements nested in them", lh_nested, lg_nested, "", None, "{:.1f}")
        sides(lh, lg, runs)
        failures += problems(lh) + problems(lg)
        for name, listing in (("leasehold", lh_statements), ("LangGraph", lg_statements)):
            print()
            print(f"{name}: statements per run (and their execution time per run,"
                  " in ms), sent then nested, most called first")
            print()
            for per_run, ms, query in listing:
                query = query if len(query) <= 120 else query[:117] + "..."
                print(f"    {per_run:6.2f} {ms:7.3f}  {query}")

    for name in ("memory", "postgres"):
        side = load(f"{d}/{name}-langgraph.json")
        if side:
            print()
            print(f"LangGraph {side['version']}: the node calls the model with "
                  f"{'langchain-openai ChatOpenAI' if side['client'] == 'langchain' else 'openai AsyncOpenAI'}"
                  f" over {side['http']}")
            break
    print()
    print(f"load average at start {args.load_start}, at end {args.load_end}")
    if failures:
        print()
        for failure in failures:
            print(f"FAILED {failure}")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
