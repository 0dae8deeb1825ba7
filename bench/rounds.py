"""`ttft bench --rounds`: the published round-by-round table, measured on one machine in one run.

    ttft bench --rounds --model dummy:llama-3-8b --num-requests 16 --budget-s 450
        --serve-args="--seed 0 --device cuda --max-model-len 8192 --max-num-batched-tokens 8192" --result-dir DIR

The reference workload (8 closed-loop clients, prompts cycling 512..4,096 tokens, 128 output tokens)
goes to one server after another, each stopped before the next starts, all on the same weights
(dummy ones of one preset and seed, or any model ttft loads: the transformers servers read it
through ttft's own loader) and through the same client:

    generate     transformers `generate()`, one request at a time (the usual "before")
    continuous   transformers' continuous batching (paged attention)
    r1-paged     ttft with its mechanisms off: paged KV, FCFS, whole prompts per step, eager, torch attention
    r2-batching  + chunked prefill (prefills join running decodes in budgeted steps) and prefix caching
    r3-graphs    + CUDA graphs and ttft's Triton kernels
    r4-kv-fp8    + the 8-bit KV cache (`--kv-cache-dtype fp8`)
    r5-ttft      + ttft's own: the lanes policy, shadow reservation, async scheduling

Each round keeps what the rounds before it switched on. A round that cannot apply is listed and
skipped: r3 on a CPU (n/a: there its flags change nothing, so later rounds keep them), r4 where
this build refuses `--kv-cache-dtype` (not run: later rounds go on without it), and any round
once `--budget-s` is spent. The table gives TTFT P50/P95, ITL P50, output tok/s, and the TTFT P50
cut against the baseline (generate) and against the previous round that ran:
`cut = 1 - P50_round / P50_other`. Writes rounds.json, rounds.md and rounds.png (bench/bar_chart.py).
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

from bench.ablate import READY_TIMEOUT_S, serves_on_gpu
from bench.baselines.server_process import free_port, hf_server_command, ttft_serve_command
from bench.rounds_report import add_cuts, write_rounds
from bench.serve_runs import failure_reason, serve_and_bench

# ttft's mechanisms: (its flags while off, while on). r1 has every one off.
MECHANISMS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "chunked-prefill": (("--no-enable-chunked-prefill",), ()),
    "prefix-caching": (("--no-enable-prefix-caching",), ()),
    "cuda-graphs": (("--enforce-eager",), ()),
    "ttft-kernels": (("--attention-backend", "torch"), ()),  # on: auto (triton on a GPU, torch on a CPU)
    "kv-fp8": ((), ("--kv-cache-dtype", "fp8")),
    "lanes": (("--scheduler-policy", "fcfs"), ()),
    "shadow": (("--no-shadow",), ()),
    "async-scheduling": (("--no-async-scheduling",), ()),
}
HF_SHARED = ("--seed", "--device", "--max-model-len")  # the serve flags the transformers servers take too
LOG_FLAGS = ("--log-level", "warning")


@dataclass(frozen=True)
class Round:
    name: str
    what: str
    server: str = "ttft"  # "generate" | "continuous" (bench/baselines/hf_server.py) | "ttft"
    turns_on: tuple[str, ...] = ()  # MECHANISMS switched on from this round on
    gpu_only: bool = False
    optional: bool = False  # a server that refuses its flags is "not run", and later rounds drop them


ROUNDS: tuple[Round, ...] = (
    Round("generate", "transformers generate(), one request at a time", server="generate"),
    Round("continuous", "transformers continuous batching (paged attention)", server="continuous"),
    Round("r1-paged", "ttft: paged KV engine, FCFS, whole prompts per step, eager, torch attention"),
    Round("r2-batching", "+ chunked prefill and prefix caching", turns_on=("chunked-prefill", "prefix-caching")),
    Round("r3-graphs", "+ CUDA graphs and ttft's Triton kernels", turns_on=("cuda-graphs", "ttft-kernels"),
          gpu_only=True),
    Round("r4-kv-fp8", "+ 8-bit KV cache (fp8 e4m3)", turns_on=("kv-fp8",), optional=True),
    Round("r5-ttft", "+ lanes policy, shadow reservation, async scheduling (ttft's own)",
          turns_on=("lanes", "shadow", "async-scheduling")),
)


def ttft_flags(on: set[str]) -> list[str]:
    """The serve flags of a ttft round with these mechanisms on (the others off)."""
    return [flag for name, (off_flags, on_flags) in MECHANISMS.items()
            for flag in (on_flags if name in on else off_flags)]


def hf_shared_flags(serve_flags: list[str]) -> list[str]:
    """--seed, --device and --max-model-len as the ttft servers get them: same weights, same place."""
    out = []
    for i, flag in enumerate(serve_flags[:-1]):
        if flag in HF_SHARED:
            out += [flag, serve_flags[i + 1]]
    return out


def command_for(rnd: Round, model: str | None, port: int, flags: list[str]) -> list[str]:
    if rnd.server == "ttft":
        return ttft_serve_command(model, port, [*flags, *LOG_FLAGS])
    return hf_server_command(model, rnd.server, port, [*flags, *LOG_FLAGS])


def bench_args_for(rnd: Round, args: argparse.Namespace, out: Path, deadline: float | None) -> argparse.Namespace:
    bench = copy.copy(args)
    bench.workload, bench.rate, bench.model = "reference", None, None  # the name each server reports
    bench.label, bench.result_dir, bench.save = f"round-{rnd.name}", str(out), True
    if deadline is not None:  # a one-at-a-time server must not run past the budget
        bench.timeout = max(5.0, min(args.timeout, deadline - time.monotonic()))
    return bench


def run_round(rnd: Round, args: argparse.Namespace, flags: list[str], out: Path, deadline: float | None) -> dict:
    port = free_port()
    session = serve_and_bench(command_for(rnd, args.model, port, flags), port, out / f"server-{rnd.name}.log",
                              [bench_args_for(rnd, args, out, deadline)], READY_TIMEOUT_S)
    if session.error:
        if rnd.optional:
            return {"status": "not run", "note": f"refused: {failure_reason(session.error)}"}
        return {"status": "error", "note": session.error}
    [run] = session.runs
    if run.result is None:
        return {"status": "error", "note": run.error}
    m = run.result["metrics"]
    return {"status": "ok", "note": "", "startup_s": session.startup_s, "ttft_p50_ms": m["median_ttft_ms"],
            "ttft_p95_ms": m["p95_ttft_ms"], "itl_p50_ms": m["median_itl_ms"],
            "output_tok_per_s": m["output_throughput"], "completed": m["completed"], "failed": m["failed"],
            "duration_s": m["duration_s"], "bench_json": Path(run.result["paths"]["json"]).name}


def run_rounds(args: argparse.Namespace) -> int:
    """Every round in order; print the table; write rounds.json/.md/.png. 0 when all ran cleanly."""
    serve_flags = shlex.split(args.serve_args)
    hf_flags = [*hf_shared_flags(serve_flags), *shlex.split(args.hf_args)]
    stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    out = Path(args.result_dir) / f"rounds-{stamp}" if args.save else Path(tempfile.mkdtemp(prefix="ttft-rounds-"))
    out.mkdir(parents=True, exist_ok=True)
    on_gpu = serves_on_gpu(serve_flags)
    deadline = time.monotonic() + args.budget_s if args.budget_s else None
    on: set[str] = set()
    rows = []
    for index, rnd in enumerate(ROUNDS):
        wanted = on | set(rnd.turns_on)
        flags = hf_flags if rnd.server != "ttft" else [*serve_flags, *ttft_flags(wanted)]
        print(f"== round {rnd.name}: {rnd.what}", flush=True)
        if rnd.gpu_only and not on_gpu:
            done = {"status": "n/a", "note": "needs a GPU (on a CPU its flags change nothing; later rounds keep them)"}
        elif deadline is not None and time.monotonic() > deadline:
            done = {"status": "not run", "note": f"time budget ({args.budget_s:.0f} s) spent"}
        else:
            done = run_round(rnd, args, flags, out, deadline)
        if not (rnd.optional and done["status"] == "not run"):
            on = wanted  # a refused round's mechanisms stay off in the rounds after it
        rows.append({"round": index, "name": rnd.name, "what": rnd.what, "server": rnd.server,
                     "flags": flags, "mechanisms_on": sorted(wanted) if rnd.server == "ttft" else [], **done})
    add_cuts(rows)
    write_rounds(out, args, rows, save=args.save)
    return 0 if all(r["status"] in ("ok", "n/a", "not run") and not r.get("failed") for r in rows) else 1
