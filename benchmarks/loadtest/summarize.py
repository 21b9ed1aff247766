#!/usr/bin/env python3
"""Markdown tables of `llm loadtest --json-out` reports, for benchmarks/RESULTS.md.

  benchmarks/loadtest/summarize.py OUT_DIR/*.json
"""
import json
import os
import sys


def load(run):
    load = run["load"]
    if load["mode"] == "closed-loop":
        return f"{load['concurrency']} in flight"
    rate = load["offered_rate_rps"]
    rate = "all at once" if rate == "inf" else f"{rate:g} req/s"
    kind = "Poisson" if load["mode"] == "poisson" else f"gamma b={load['burstiness']:g}"
    return f"{kind} {rate}"


def ms(x):
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def row(name, run):
    lat, tp = run["latency_ms"], run["throughput"]
    sla = run.get("sla")
    sla_text = "" if sla is None else ("met" if sla["met"] else f"missed ({sla['failure']})")
    return (f"| {name} | {load(run)} | {run['requests']['completed']} | {tp['requests_per_s']:.2f} | "
            f"{tp['output_tokens_per_s']:.0f} | {ms(lat['ttft']['p50'])} | {ms(lat['ttft']['p99'])} | "
            f"{ms(lat['tpot']['p50'])} | {ms(lat['tpot']['p99'])} | {ms(lat['itl']['p99'])} | "
            f"{ms(lat['e2e']['p99'])} | {run['requests']['failed']} | {sla_text} |")


def main(paths):
    print("| report | load | completed | req/s | output tok/s | TTFT P50 ms | TTFT P99 ms | TPOT P50 ms | "
          "TPOT P99 ms | ITL P99 ms | E2E P99 ms | errors | SLA |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    searches = []
    for path in paths:
        report = json.load(open(path))
        name = os.path.splitext(os.path.basename(path))[0]
        for run in report["runs"]:
            print(row(name, run))
        if "sla_search" in report:
            searches.append((name, report))
    for name, report in searches:
        s, sla = report["sla_search"], report["sla"]
        limits = ", ".join(f"P99 {key.split('_')[0].upper()} <= {sla[key]:g} ms"
                           for key in ("ttft_p99_ms", "tpot_p99_ms", "itl_p99_ms", "e2e_p99_ms")
                           if sla.get(key) is not None)
        if s["found"]:
            stop = s.get("stopped_by", "converged")
            above = {"max rate": " (every rate tried passed)",
                     "probe budget": " (probe budget spent before converging)"}.get(
                         stop, f", {s['lowest_failing_rate_rps']:g} req/s missed")
            print(f"\n{name}: {limits}: max rate {s['max_rate_rps']:g} req/s{above}; goodput "
                  f"{s['goodput_rps']:.2f} req/s, {s['output_tokens_per_s']:.0f} output tok/s")
        else:
            print(f"\n{name}: {limits}: no rate tried met them")


if __name__ == "__main__":
    main(sys.argv[1:])
