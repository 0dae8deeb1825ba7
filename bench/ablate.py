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

Bare `--ablate` also runs each mechanism on the workload it exists for (bench/ablate_workloads.py:
prefix caching on shared-prefix and multi-turn, chunked prefill and lanes on mixed, shadow
reservation on a pool run near full, the 8-bit KV cache and async scheduling at 64 streams), each
beside `full` on the same workload, in a second table (`--ablate-workloads` picks them,
`--ablate-scale smoke` shrinks them for a CPU). A configuration whose flag this build refuses
(`--kv-cache-dtype` before the 8-bit KV cache lands) is listed as not run. `--budget-s` starts no
server past that many seconds.
"""
from __future__ import annotations

import argparse
import copy
import datetime as dt
import shlex
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench.ablate_report import add_deltas, add_figure_deltas, mechanism_table, row_of, table
from bench.ablate_workloads import MechanismWorkload, bench_args_for, chosen, figures
from bench.baselines.server_process import free_port, ttft_serve_command
from bench.report import machine_info
from bench.serve_runs import failure_reason, serve_and_bench

READY_TIMEOUT_S = 300.0  # a GPU server draws 8B weights and captures its CUDA graphs first


@dataclass(frozen=True)
class Ablation:
    name: str
    flags: tuple[str, ...]
    what: str
    gpu_only: bool = False
    workloads: tuple[str, ...] = ()  # the mechanism workloads it runs (bench/ablate_workloads.py)
    reference: bool = True  # a row on the reference workload (the one-off-at-a-time table)
    optional: bool = False  # a server that refuses its flags is "not run", not an error


ALL = "shared-prefix", "multi-turn", "mixed", "pool-full", "decode-64"
ABLATIONS: tuple[Ablation, ...] = (
    Ablation("full", (), "every optimization on", workloads=ALL),
    Ablation("no-cuda-graphs", ("--enforce-eager",), "no CUDA graphs (eager launches)", gpu_only=True),
    Ablation("no-async-scheduling", ("--no-async-scheduling",), "each step built after the last result",
             workloads=("decode-64",)),
    Ablation("no-chunked-prefill", ("--no-enable-chunked-prefill",), "whole prompts in one step",
             workloads=("mixed",)),
    Ablation("no-prefix-caching", ("--no-enable-prefix-caching",), "no KV reuse across requests",
             workloads=("shared-prefix", "multi-turn")),
    Ablation("fcfs", ("--scheduler-policy", "fcfs"), "lanes off: vLLM V1's arrival order", workloads=("mixed",)),
    Ablation("no-shadow", ("--no-shadow",), "no arrival-time KV reservation", workloads=("pool-full",)),
)
# Mechanisms that are off by default: only on the workloads they exist for.
EXTRA_ABLATIONS: tuple[Ablation, ...] = (
    Ablation("kv-fp8", ("--kv-cache-dtype", "fp8"), "8-bit KV cache (fp8 e4m3), on top of full",
             workloads=("decode-64",), reference=False, optional=True),
)


def selected(names: str | None) -> list[Ablation]:
    """The configurations named (comma-separated), in table order; `full` is always first."""
    every = [*ABLATIONS, *EXTRA_ABLATIONS]
    if not names:
        return every
    wanted = {n.strip() for n in names.split(",") if n.strip()}
    unknown = wanted - {a.name for a in every}
    if unknown:
        raise ValueError(f"unknown ablations {sorted(unknown)}; choose from {[a.name for a in every]}")
    return [a for a in every if a.name in wanted or a.name == "full"]


def serves_on_gpu(serve_flags: list[str]) -> bool:
    """Whether `ttft serve` with these flags runs on a GPU (where CUDA graphs exist)."""
    if "--device" in serve_flags:
        i = serve_flags.index("--device")
        if i + 1 < len(serve_flags) and serve_flags[i + 1] != "auto":
            return serve_flags[i + 1].startswith("cuda")
    import torch

    return torch.cuda.is_available()


# One planned run: (the mechanism workload, or None for the reference row; its bench arguments).
Run = tuple[MechanismWorkload | None, argparse.Namespace]


def plan(ablation: Ablation, args: argparse.Namespace, workloads: list[MechanismWorkload],
         out: Path) -> list[tuple[tuple[str, ...], list[Run]]]:
    """The servers a configuration needs: (extra serve flags, its runs), the reference row first.
    Workloads that need no flags of their own share the configuration's main server."""
    servers: dict[tuple[str, ...], list[Run]] = {}
    if ablation.reference:
        ref = copy.copy(args)
        ref.workload, ref.label, ref.result_dir = args.ablate, f"ablate-{ablation.name}", str(out)
        servers[()] = [(None, ref)]
    for index, w in enumerate(workloads):
        if w.name not in ablation.workloads:
            continue
        bench = bench_args_for(w, index, args, args.ablate_scale)
        bench.label, bench.result_dir = f"ablate-{ablation.name}-{w.name}", str(out)
        servers.setdefault(w.serve_flags(args.ablate_scale), []).append((w, bench))
    return list(servers.items())


def rows_of(ablation: Ablation, runs: list[Run], status: str, note: str) -> list[tuple[MechanismWorkload | None, dict]]:
    return [(w, row_of(ablation, None, status, note)) for w, _ in runs]


def run_server(ablation: Ablation, model: str, runs: list[Run], serve_flags: list[str], out: Path,
               log_name: str) -> list[tuple[MechanismWorkload | None, dict]]:
    """One server with the configuration's flags, its runs in order; a row per run."""
    port = free_port()
    command = ttft_serve_command(model, port, [*serve_flags, *ablation.flags])
    session = serve_and_bench(command, port, out / log_name, [bench for _, bench in runs], READY_TIMEOUT_S)
    if session.error:
        if ablation.optional:
            return rows_of(ablation, runs, "not run", f"refused: {failure_reason(session.error)}")
        return rows_of(ablation, runs, "error", session.error)
    rows = []
    for (w, bench), run in zip(runs, session.runs):
        if run.result is None:
            rows.append((w, row_of(ablation, None, "error", run.error)))
            continue
        row = row_of(ablation, run.result["metrics"], "ok")
        row["startup_s"] = session.startup_s
        if w is not None:
            found = figures(run.result, run.counters, bench.input_len)
            row.update(figure=w.figure, figure_value=found.get(w.figure), preemptions=found["preemptions"],
                       cached_fraction=found["cached_fraction"], short_ttft_p95_ms=found["short_ttft_p95_ms"])
        rows.append((w, row))
    return rows


def run_one(ablation: Ablation, args: argparse.Namespace, serve_flags: list[str], out: Path) -> dict:
    """The configuration's reference row alone (its own server)."""
    [(_, runs)] = plan(ablation, args, [], out)
    return run_server(ablation, args.model, runs, serve_flags, out, f"server-{ablation.name}.log")[0][1]


def run_ablation(args: argparse.Namespace) -> int:
    """Run every configuration, print the tables, write ablation.json/.md; 0 when all ran cleanly."""
    if args.model is None:
        print("ttft bench --ablate: error: --model is required (the model every server loads)")
        return 2
    serve_flags = [*shlex.split(args.serve_args), "--log-level", "warning"]
    try:
        ablations = selected(args.ablate_configs)
        workloads = chosen(args.ablate_workloads, default_all=args.ablate == "reference")
    except ValueError as exc:
        print(f"ttft bench --ablate: error: {exc}")
        return 2
    stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    # server logs always land somewhere readable; with --no-save not under bench/results
    out = Path(args.result_dir) / f"ablation-{stamp}" if args.save else Path(tempfile.mkdtemp(prefix="ttft-ablate-"))
    out.mkdir(parents=True, exist_ok=True)
    on_gpu = serves_on_gpu(serve_flags)
    deadline = time.monotonic() + args.budget_s if args.budget_s else None
    rows, mechanism_rows = [], []
    for ablation in ablations:
        for extra, runs in plan(ablation, args, workloads, out):
            print(f"== ablation {ablation.name}: {ablation.what}"
                  + (f" ({' '.join(extra)})" if extra else ""), flush=True)
            if ablation.gpu_only and not on_gpu:
                done = rows_of(ablation, runs, "n/a", "needs a GPU")
            elif deadline is not None and time.monotonic() > deadline:
                done = rows_of(ablation, runs, "not run", f"time budget ({args.budget_s:.0f} s) spent")
            else:
                # a server with a workload's own flags runs that workload alone: its log says which
                tag = f"-{runs[0][0].name}" if extra and runs[0][0] is not None else ""
                done = run_server(ablation, args.model, runs, [*serve_flags, *extra], out,
                                  f"server-{ablation.name}{tag}.log")
            for w, row in done:
                if w is None:
                    rows.append(row)
                else:
                    mechanism_rows.append({"workload": w.name, **row, "figure": w.figure})
    add_deltas(rows)
    order = [w.name for w in workloads]
    mechanism_rows.sort(key=lambda r: order.index(r["workload"]))  # stable: full first in each workload
    add_figure_deltas(mechanism_rows)
    result = {"config": {"model": args.model, "serve_args": args.serve_args, "workload": args.ablate,
                         "num_requests": args.num_requests, "concurrency": args.concurrency,
                         "output_len": args.output_len, "seed": args.seed, "scale": args.ablate_scale,
                         "mechanism_workloads": order},
              "machine": machine_info(), "rows": rows, "mechanism_rows": mechanism_rows}
    text = table(result) + ("\n" + mechanism_table(result) if mechanism_rows else "")
    print(text, end="")
    if args.save:
        (out / "ablation.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
        (out / "ablation.md").write_text(text)
        print(f"wrote {out / 'ablation.json'}")
    every = rows + mechanism_rows
    return 0 if all(r["status"] in ("ok", "n/a", "not run") and not r.get("failed") for r in every) else 1
