"""The rows and tables of `ttft bench --ablate`: the reference workload with one optimization off at a
time (`table`), and each mechanism beside `full` on the workload it exists for (`mechanism_table`)."""
from __future__ import annotations

from bench.ablate_workloads import BY_NAME
from bench.serve_runs import failure_reason

FIGURE_TITLES = {"ttft_p50_ms": "TTFT P50 (ms)", "returning_ttft_p50_ms": "returning-turn TTFT P50 (ms)",
                 "short_ttft_p95_ms": "short prompts' TTFT P95 (ms)", "preemptions": "preemptions",
                 "itl_p50_ms": "ITL P50 (ms)"}


def row_of(ablation, metrics: dict | None, status: str, note: str = "") -> dict:
    row = {"name": ablation.name, "flags": list(ablation.flags), "what": ablation.what, "status": status,
           "note": note}
    if metrics is not None:
        row.update(ttft_p50_ms=metrics["median_ttft_ms"], ttft_p95_ms=metrics["p95_ttft_ms"],
                   itl_p50_ms=metrics["median_itl_ms"], itl_p99_ms=metrics["p99_itl_ms"],
                   output_tok_per_s=metrics["output_throughput"], request_per_s=metrics["request_throughput"],
                   completed=metrics["completed"], failed=metrics["failed"])
    return row


def add_deltas(rows: list[dict]) -> None:
    """TTFT P50 change against `full`, in percent (positive: that optimization was helping)."""
    full = next((r for r in rows if r["name"] == "full" and r["status"] == "ok"), None)
    for r in rows:
        if full is not None and r["status"] == "ok" and full["ttft_p50_ms"] > 0:
            r["ttft_p50_delta_pct"] = 100.0 * (r["ttft_p50_ms"] - full["ttft_p50_ms"]) / full["ttft_p50_ms"]


def add_figure_deltas(rows: list[dict]) -> None:
    """Each mechanism row's key figure against `full`'s on the same workload: the difference, and in
    percent where full's is not 0 (a count of preemptions may well be)."""
    full = {r["workload"]: r for r in rows if r["name"] == "full" and r["status"] == "ok"}
    for r in rows:
        base = full.get(r["workload"])
        if r["status"] != "ok" or base is None or r.get("figure_value") is None or base.get("figure_value") is None:
            continue
        r["figure_delta"] = r["figure_value"] - base["figure_value"]
        if base["figure_value"]:
            r["figure_delta_pct"] = 100.0 * r["figure_delta"] / base["figure_value"]


def table(result: dict) -> str:
    cfg = result["config"]
    lines = [f"### ablation: {cfg['model']}, {cfg['workload']} workload, {cfg['num_requests']} requests, "
             f"concurrency {cfg['concurrency']}", "",
             "| configuration | TTFT P50 (ms) | TTFT P95 (ms) | ITL P50 (ms) | output tok/s | TTFT P50 vs full |",
             "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        if r["status"] != "ok":
            lines.append(f"| {r['name']} | {r['status']} | | | | {failure_reason(r['note'])} |")
            continue
        delta = r.get("ttft_p50_delta_pct")
        lines.append(f"| {r['name']} | {r['ttft_p50_ms']:.1f} | {r['ttft_p95_ms']:.1f} | {r['itl_p50_ms']:.2f} | "
                     f"{r['output_tok_per_s']:.1f} | {'' if delta is None else f'{delta:+.1f}%'} |"
                     + (f" ({r['failed']} failed)" if r["failed"] else ""))
    return "\n".join(lines) + "\n"


def _figure(name: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0f}" if name == "preemptions" else f"{value:.1f}"


def mechanism_table(result: dict) -> str:
    """One row per (workload, configuration), `full` first in each workload."""
    rows = result.get("mechanism_rows") or []
    if not rows:
        return ""
    scale = result["config"].get("scale", "full")
    lines = [f"### each mechanism on the workload it exists for ({scale} scale)", "",
             "| workload | configuration | TTFT P50 (ms) | TTFT P95 (ms) | ITL P50 (ms) | ITL P99 (ms) | "
             "output tok/s | figure | value | vs full |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head = f"| {r['workload']} | {r['name']} |"
        title = FIGURE_TITLES[r["figure"]]
        if r["status"] != "ok":
            lines.append(f"{head} {r['status']} | | | | | {title} | | {failure_reason(r['note'])} |")
            continue
        delta = r.get("figure_delta")
        if delta is None or r["name"] == "full":
            versus = ""
        elif r.get("figure_delta_pct") is not None:
            versus = f"{r['figure_delta_pct']:+.1f}%"
        else:
            versus = f"{delta:+.0f}"
        lines.append(f"{head} {r['ttft_p50_ms']:.1f} | {r['ttft_p95_ms']:.1f} | {r['itl_p50_ms']:.2f} | "
                     f"{r['itl_p99_ms']:.2f} | {r['output_tok_per_s']:.1f} | {title} | "
                     f"{_figure(r['figure'], r.get('figure_value'))} | {versus} |"
                     + (f" ({r['failed']} failed)" if r["failed"] else ""))
    lines.append("")
    for name in dict.fromkeys(r["workload"] for r in rows):
        w = BY_NAME[name]
        design = w.what if scale == "full" else ", ".join(f"{k} {v}" for k, v in w.smoke.items())
        serve = " ".join(w.serve_flags(scale))
        lines.append(f"- {name}: {design}" + (f" (`{serve}`)" if serve else ""))
    return "\n".join(lines) + "\n"
