"""The table of `ttft bench --rounds`: cuts, Markdown, JSON and the bar chart.

cut = 1 - P50_round / P50_other (positive: faster than the other row), against the baseline (the
first row, transformers `generate()`) and against the previous round that ran. The Markdown shows
the change instead (P50_round / P50_other - 1, e.g. -77% for a cut of 0.77), as published tables do.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import orjson

from bench.bar_chart import write_bar_chart
from bench.report import machine_info
from bench.serve_runs import failure_reason
from bench.workloads import REFERENCE_LENGTHS


def _cut(p50: float, other: float) -> float | None:
    return 1.0 - p50 / other if other > 0 else None


def add_cuts(rows: list[dict]) -> None:
    """ttft_p50_cut_vs_baseline / _vs_previous (and `previous`, the row it was taken against)."""
    baseline = rows[0] if rows and rows[0]["status"] == "ok" else None
    previous = None
    for r in rows:
        if r["status"] != "ok":
            continue
        r["ttft_p50_cut_vs_baseline"] = None if baseline is None else _cut(r["ttft_p50_ms"], baseline["ttft_p50_ms"])
        r["previous"] = None if previous is None else previous["name"]
        r["ttft_p50_cut_vs_previous"] = None if previous is None else _cut(r["ttft_p50_ms"], previous["ttft_p50_ms"])
        previous = r


def _change(cut: float | None) -> str:
    return "" if cut is None else f"{-100.0 * cut:+.1f}%"


def rounds_table(result: dict) -> str:
    cfg = result["config"]
    lengths = "/".join(str(n) for n in cfg["reference_lengths"])
    base = result["rows"][0]["name"] if result["rows"] else "baseline"
    lines = [f"### rounds: {cfg['model'] or 'the packaged model'}, reference workload ({lengths}-token prompts, "
             f"{cfg['output_len']} output tokens), {cfg['num_requests']} requests, concurrency {cfg['concurrency']}",
             "", f"| round | what | TTFT P50 (ms) | TTFT P95 (ms) | ITL P50 (ms) | output tok/s | TTFT P50 vs {base} | "
             "vs previous round |", "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        head = f"| {r['name']} | {r['what']} |"
        if r["status"] != "ok":
            lines.append(f"{head} {r['status']} | | | | {failure_reason(r['note'])} | |")
            continue
        versus_base = "" if r is result["rows"][0] else _change(r["ttft_p50_cut_vs_baseline"])
        lines.append(f"{head} {r['ttft_p50_ms']:.1f} | {r['ttft_p95_ms']:.1f} | {r['itl_p50_ms']:.2f} | "
                     f"{r['output_tok_per_s']:.1f} | {versus_base} | "
                     f"{_change(r['ttft_p50_cut_vs_previous'])} |" + (f" ({r['failed']} failed)" if r["failed"] else ""))
    lines += ["", "Change = P50 / P50 of the other row - 1 (negative: faster); rounds.json has the cut, "
                  "1 - P50 / P50 of the other row. Previous round = the last row above that ran.", ""]
    lines += [f"- {r['name']}: `{' '.join(r['flags'])}`" for r in result["rows"]]
    return "\n".join(lines) + "\n"


def write_rounds(out: Path, args: argparse.Namespace, rows: list[dict], save: bool = True) -> dict:
    """Print the table; with `save`, write rounds.json, rounds.md and rounds.png into `out`."""
    result = {"config": {"model": args.model, "serve_args": args.serve_args, "hf_args": args.hf_args,
                         "workload": "reference", "reference_lengths": list(args.reference_lengths or REFERENCE_LENGTHS),
                         "num_requests": args.num_requests, "concurrency": args.concurrency,
                         "output_len": args.output_len, "seed": args.seed, "budget_s": args.budget_s},
              "machine": machine_info(), "rows": rows, "chart": None}
    text = rounds_table(result)
    print(text, end="")
    if not save:
        return result
    title = f"TTFT by round: {args.model or 'packaged model'}, reference x{args.num_requests}, c{args.concurrency}"
    ok = [r.get("ttft_p50_ms") if r["status"] == "ok" else None for r in rows]
    p95 = [r.get("ttft_p95_ms") if r["status"] == "ok" else None for r in rows]
    backend = write_bar_chart(out / "rounds.png", title, [r["name"] for r in rows],
                              {"TTFT P50 (ms)": ok, "TTFT P95 (ms)": p95}, "ms")
    if backend is not None:
        result["chart"] = {"file": "rounds.png", "drawn_by": backend}
    (out / "rounds.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    (out / "rounds.md").write_text(text)
    print(f"wrote {out / 'rounds.json'}")
    return result
