"""`ttft bench --ablate`: the same workload against `ttft serve` with one optimization off at a time.

    ttft bench --ablate --model dummy:llama-3.1-8b --num-requests 48 --concurrency 8
        --serve-args="--device cuda --max-model-len 8192 --max-num-batched-tokens 8192" --result-dir DIR

(`--serve-args=...` with the `=`: a value that starts with `--` is otherwise taken for a flag.)

Bare `--ablate` runs the reference workload (prompts cycling 512..4096 tokens, 128 output tokens);
`--ablate WORKLOAD` runs the workload the other flags describe instead (a CPU smoke run uses
`--ablate random --input-len 32`). For each configuration a fresh server starts with the shared
`--serve-args` plus that configuration's flags, gets the workload (warm-up first), and stops before
the next one starts. The table is the round-by-round one published write-ups show, measured on our
own system: TTFT P50/P95, ITL P50 and throughput per configuration, and the TTFT change against
`full`. A configuration that cannot apply (CUDA graphs on a CPU) is listed as n/a, one whose server
does not start as an error: the others still run.
"""
from __future__ import annotations

import argparse
import asyncio
import copy
import datetime as dt
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench.baselines.server_process import free_port, start_server, ttft_serve_command
from bench.load import run_bench
from bench.report import machine_info

READY_TIMEOUT_S = 300.0  # a GPU server draws 8B weights and captures its CUDA graphs first


@dataclass(frozen=True)
class Ablation:
    name: str
    flags: tuple[str, ...]
    what: str
    gpu_only: bool = False


ABLATIONS: tuple[Ablation, ...] = (
    Ablation("full", (), "every optimization on"),
    Ablation("no-cuda-graphs", ("--enforce-eager",), "no CUDA graphs (eager launches)", gpu_only=True),
    Ablation("no-async-scheduling", ("--no-async-scheduling",), "each step built after the last result"),
    Ablation("no-chunked-prefill", ("--no-enable-chunked-prefill",), "whole prompts in one step"),
    Ablation("no-prefix-caching", ("--no-enable-prefix-caching",), "no KV reuse across requests"),
    Ablation("fcfs", ("--scheduler-policy", "fcfs"), "lanes off: vLLM V1's arrival order"),
    Ablation("no-shadow", ("--no-shadow",), "no arrival-time KV reservation"),
)


def selected(names: str | None) -> list[Ablation]:
    """The configurations named (comma-separated), in table order; `full` is always first."""
    if not names:
        return list(ABLATIONS)
    wanted = {n.strip() for n in names.split(",") if n.strip()}
    unknown = wanted - {a.name for a in ABLATIONS}
    if unknown:
        raise ValueError(f"unknown ablations {sorted(unknown)}; choose from {[a.name for a in ABLATIONS]}")
    return [a for a in ABLATIONS if a.name in wanted or a.name == "full"]


def serves_on_gpu(serve_flags: list[str]) -> bool:
    """Whether `ttft serve` with these flags runs on a GPU (where CUDA graphs exist)."""
    if "--device" in serve_flags:
        i = serve_flags.index("--device")
        if i + 1 < len(serve_flags) and serve_flags[i + 1] != "auto":
            return serve_flags[i + 1].startswith("cuda")
    import torch

    return torch.cuda.is_available()


def row_of(ablation: Ablation, metrics: dict | None, status: str, note: str = "") -> dict:
    row = {"name": ablation.name, "flags": list(ablation.flags), "what": ablation.what, "status": status,
           "note": note}
    if metrics is not None:
        row.update(ttft_p50_ms=metrics["median_ttft_ms"], ttft_p95_ms=metrics["p95_ttft_ms"],
                   itl_p50_ms=metrics["median_itl_ms"], output_tok_per_s=metrics["output_throughput"],
                   request_per_s=metrics["request_throughput"], completed=metrics["completed"],
                   failed=metrics["failed"])
    return row


def add_deltas(rows: list[dict]) -> None:
    """TTFT P50 change against `full`, in percent (positive: that optimization was helping)."""
    full = next((r for r in rows if r["name"] == "full" and r["status"] == "ok"), None)
    for r in rows:
        if full is not None and r["status"] == "ok" and full["ttft_p50_ms"] > 0:
            r["ttft_p50_delta_pct"] = 100.0 * (r["ttft_p50_ms"] - full["ttft_p50_ms"]) / full["ttft_p50_ms"]


def table(result: dict) -> str:
    cfg = result["config"]
    lines = [f"### ablation: {cfg['model']}, {cfg['workload']} workload, {cfg['num_requests']} requests, "
             f"concurrency {cfg['concurrency']}", "",
             "| configuration | TTFT P50 (ms) | TTFT P95 (ms) | ITL P50 (ms) | output tok/s | TTFT P50 vs full |",
             "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        if r["status"] != "ok":
            lines.append(f"| {r['name']} | {r['status']} | | | | {r['note'].splitlines()[0] if r['note'] else ''} |")
            continue
        delta = r.get("ttft_p50_delta_pct")
        lines.append(f"| {r['name']} | {r['ttft_p50_ms']:.1f} | {r['ttft_p95_ms']:.1f} | {r['itl_p50_ms']:.2f} | "
                     f"{r['output_tok_per_s']:.1f} | {'' if delta is None else f'{delta:+.1f}%'} |"
                     + (f" ({r['failed']} failed)" if r["failed"] else ""))
    return "\n".join(lines) + "\n"


def run_one(ablation: Ablation, args: argparse.Namespace, serve_flags: list[str], out: Path) -> dict:
    port = free_port()
    command = ttft_serve_command(args.model, port, [*serve_flags, *ablation.flags])
    try:
        server = start_server(command, port, out / f"server-{ablation.name}.log", READY_TIMEOUT_S)
    except RuntimeError as exc:
        return row_of(ablation, None, "error", str(exc))
    with server:
        bench_args = copy.copy(args)
        bench_args.base_url, bench_args.uds, bench_args.workload = server.base_url, None, args.ablate
        bench_args.label, bench_args.result_dir = f"ablate-{ablation.name}", str(out)
        try:
            metrics = asyncio.run(run_bench(bench_args))["metrics"]
        except (RuntimeError, OSError, ValueError) as exc:
            return row_of(ablation, None, "error", f"{exc}\n{server.log_tail()}")
    row = row_of(ablation, metrics, "ok")
    row["startup_s"] = server.started_s
    return row


def run_ablation(args: argparse.Namespace) -> int:
    """Run every configuration, print the table, write ablation.json/.md; 0 when all ran cleanly."""
    if args.model is None:
        print("ttft bench --ablate: error: --model is required (the model every server loads)")
        return 2
    serve_flags = [*shlex.split(args.serve_args), "--log-level", "warning"]
    try:
        ablations = selected(args.ablate_configs)
    except ValueError as exc:
        print(f"ttft bench --ablate: error: {exc}")
        return 2
    stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    # server logs always land somewhere readable; with --no-save not under bench/results
    out = Path(args.result_dir) / f"ablation-{stamp}" if args.save else Path(tempfile.mkdtemp(prefix="ttft-ablate-"))
    out.mkdir(parents=True, exist_ok=True)
    on_gpu = serves_on_gpu(serve_flags)
    rows = []
    for ablation in ablations:
        print(f"== ablation {ablation.name}: {ablation.what}", flush=True)
        if ablation.gpu_only and not on_gpu:
            rows.append(row_of(ablation, None, "n/a", "needs a GPU"))
            continue
        rows.append(run_one(ablation, args, serve_flags, out))
    add_deltas(rows)
    result = {"config": {"model": args.model, "serve_args": args.serve_args, "workload": args.ablate,
                         "num_requests": args.num_requests, "concurrency": args.concurrency,
                         "output_len": args.output_len, "seed": args.seed},
              "machine": machine_info(), "rows": rows}
    text = table(result)
    print(text, end="")
    if args.save:
        (out / "ablation.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
        (out / "ablation.md").write_text(text)
        print(f"wrote {out / 'ablation.json'}")
    return 0 if all(r["status"] in ("ok", "n/a") and not r.get("failed") for r in rows) else 1
