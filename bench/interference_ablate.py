"""`ttft bench --ablate interference`: the interference workload against a server with concurrent
lanes (--concurrent-lanes) and one with --no-concurrent-lanes, one after the other, in one table.

    ttft bench --ablate interference --model dummy:llama-3.1-8b --serve-args="--device cuda ..."

Each server gets the shared --serve-args, runs the whole workload (its own idle baselines first, so
every ratio is measured against the same server), and stops before the next starts.
"""
from __future__ import annotations

import argparse
import copy
import datetime as dt
import shlex
import tempfile
from pathlib import Path

import orjson

from bench.ablate import READY_TIMEOUT_S
from bench.baselines.server_process import free_port, ttft_serve_command
from bench.interference_cli import spec_from_args
from bench.interference_report import interference_table
from bench.report import machine_info
from bench.serve_runs import serve_and_bench

CONFIGS = (("concurrent-lanes", ("--concurrent-lanes",)), ("no-concurrent-lanes", ("--no-concurrent-lanes",)))


def run_interference_ablation(args: argparse.Namespace) -> int:
    """Both servers; print the table, write interference-ablation.json/.md; 0 when both ran cleanly."""
    stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    out = Path(args.result_dir) / f"interference-{stamp}" if args.save else Path(tempfile.mkdtemp(prefix="ttft-"))
    out.mkdir(parents=True, exist_ok=True)
    serve_flags = [*shlex.split(args.serve_args), "--log-level", "warning"]
    rows, errors, model = [], {}, args.model
    for name, flags in CONFIGS:
        print(f"== interference: {name}", flush=True)
        bench = copy.copy(args)
        bench.workload, bench.label, bench.result_dir = "interference", name, str(out)
        port = free_port()
        session = serve_and_bench(ttft_serve_command(args.model, port, [*serve_flags, *flags]), port,
                                  out / f"server-{name}.log", [bench], READY_TIMEOUT_S)
        run = session.runs[0] if session.runs else None
        if session.error or run is None or run.result is None:
            errors[name] = session.error or (run.error if run else "no run")
            print(f"{name}: error: {errors[name]}", flush=True)
            continue
        rows.append((name, run.result["figures"]))
        model = run.result["config"]["model"]  # the name the server reports (the default model's too)
    spec = spec_from_args(args)
    title = (f"interference ablation: {model}, {spec.num_streams} streams, a {spec.long_len:,}-token prompt "
             f"every {spec.long_every_s:g} s, a {spec.short_len}-token request every {spec.short_every_s:g} s")
    text = interference_table(rows, title)
    print(text, end="")
    if args.save:
        result = {"config": {"model": model, "serve_args": args.serve_args, "spec": spec.__dict__},
                  "machine": machine_info(), "rows": [{"name": n, **f} for n, f in rows], "errors": errors}
        (out / "interference-ablation.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
        (out / "interference-ablation.md").write_text(text)
        print(f"wrote {out / 'interference-ablation.json'}")
    return 0 if not errors and all(not f["failed"] for _, f in rows) else 1
