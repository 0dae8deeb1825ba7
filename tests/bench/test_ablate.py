"""`ttft bench --ablate` on dummy:tiny: one real server per configuration, one table."""
from __future__ import annotations

import argparse
import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from bench.ablate import ABLATIONS, Ablation, add_deltas, plan, run_one, selected, serves_on_gpu, table
from bench.ablate_workloads import chosen
from bench.cli import add_bench_arguments
from pipeline.cli import main as ttft_main

SERVE = "--serve-args=--device cpu --max-model-len 256 --num-kv-blocks 256 --max-num-batched-tokens 256"
WORKLOAD = ["--input-len", "32", "--output-len", "8", "--num-requests", "6", "--concurrency", "3",
            "--vocab-size", "512", "--warmup", "1"]


MECHANISMS = ["--ablate-workloads", "shared-prefix,multi-turn,pool-full,decode-64", "--ablate-scale", "smoke",
              "--ablate-configs", "no-cuda-graphs,no-async-scheduling,no-chunked-prefill,no-prefix-caching,fcfs,"
              "no-shadow,kv-fp8"]


@pytest.fixture(scope="module")
def ablation(tmp_path_factory) -> tuple[Path, dict, str]:
    """One `ttft bench --ablate random` of every configuration, each also on the workloads of the
    mechanism it switches off: a configuration's reference row and its mechanism runs share its
    server, so the two tables below cost one server per configuration (and pool size), not two.
    -> (the run's folder, ablation.json, what it printed)."""
    tmp_path = tmp_path_factory.mktemp("ablate")
    printed = io.StringIO()
    with redirect_stdout(printed):
        code = ttft_main(["bench", "--ablate", "random", "--model", "dummy:tiny", SERVE, *WORKLOAD, *MECHANISMS,
                          "--result-dir", str(tmp_path)])
    assert code == 0, printed.getvalue()
    [out_dir] = tmp_path.glob("ablation-*")
    return out_dir, json.loads((out_dir / "ablation.json").read_text()), printed.getvalue()


def test_every_configuration_gets_a_row(ablation):
    out_dir, result, printed = ablation
    rows = {r["name"]: r for r in result["rows"]}
    assert list(rows) == [a.name for a in ABLATIONS]
    assert rows["no-cuda-graphs"]["status"] == "n/a"  # CPU: there are no graphs to switch off
    ran = [r for r in rows.values() if r["status"] == "ok"]
    assert len(ran) == len(ABLATIONS) - 1
    for r in ran:
        assert (r["completed"], r["failed"]) == (6, 0) and r["ttft_p50_ms"] > 0 and r["itl_p50_ms"] > 0
    assert rows["full"]["ttft_p50_delta_pct"] == 0.0
    assert rows["fcfs"]["flags"] == ["--scheduler-policy", "fcfs"]
    md = (out_dir / "ablation.md").read_text()
    assert md in printed and all(f"| {name} |" in md for name in rows)
    assert len(list(out_dir.glob("*-ablate-*-c3.json"))) == len(ran)  # every run's samples kept
    assert "server-no-chunked-prefill.log" in {p.name for p in out_dir.iterdir()}


def test_a_server_that_cannot_start_is_an_error_row(tmp_path):
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    args = parser.parse_args(["--model", "dummy:tiny", "--ablate", "random", *WORKLOAD])
    # without chunking the step budget must hold max_model_len: refused at start-up, with the reason
    flags = ["--device", "cpu", "--max-model-len", "256", "--max-num-batched-tokens", "128", "--log-level", "warning"]
    row = run_one(Ablation("no-chunked-prefill", ("--no-enable-chunked-prefill",), "x"), args, flags, tmp_path)
    assert row["status"] == "error"
    assert "max_num_batched_tokens (128) must be >= max_model_len (256)" in row["note"]


def test_selection_deltas_and_device():
    assert [a.name for a in selected("fcfs")] == ["full", "fcfs"]
    with pytest.raises(ValueError, match="unknown ablations"):
        selected("no-such")
    assert serves_on_gpu(["--device", "cuda"]) and not serves_on_gpu(["--device", "cpu"])
    rows = [{"name": "full", "status": "ok", "ttft_p50_ms": 200.0},
            {"name": "fcfs", "status": "ok", "ttft_p50_ms": 250.0},
            {"name": "no-shadow", "status": "error", "note": "boom\nmore"}]
    add_deltas(rows)
    assert rows[1]["ttft_p50_delta_pct"] == pytest.approx(25.0) and "ttft_p50_delta_pct" not in rows[2]
    for r in rows[:2]:
        r.update(ttft_p95_ms=1.0, itl_p50_ms=1.0, output_tok_per_s=1.0, failed=0)
    cfg = {"model": "m", "workload": "reference", "num_requests": 4, "concurrency": 8}
    text = table({"config": cfg, "rows": rows})
    assert "| fcfs | 250.0 |" in text and "+25.0%" in text and "| no-shadow | error | | | | boom |" in text


def test_each_mechanism_runs_on_its_own_workload_beside_full(ablation):
    out_dir, result, printed = ablation
    assert [r["name"] for r in result["rows"]] == [a.name for a in ABLATIONS]  # reference rows kept
    rows = {(r["workload"], r["name"]): r for r in result["mechanism_rows"]}
    assert list(rows) == [("shared-prefix", "full"), ("shared-prefix", "no-prefix-caching"),
                          ("multi-turn", "full"), ("multi-turn", "no-prefix-caching"),
                          ("pool-full", "full"), ("pool-full", "no-shadow"),
                          ("decode-64", "full"), ("decode-64", "no-async-scheduling"), ("decode-64", "kv-fp8")]
    fp8 = rows[("decode-64", "kv-fp8")]
    assert fp8["status"] == "ok" or (fp8["status"] == "not run" and "--kv-cache-dtype" in fp8["note"])
    for key, r in rows.items():
        if r["status"] != "ok":
            continue
        assert r["failed"] == 0 and r["figure"] == {"shared-prefix": "ttft_p50_ms", "multi-turn": "returning_ttft_p50_ms",
                                                    "pool-full": "preemptions", "decode-64": "itl_p50_ms"}[key[0]]
    # what each mechanism exists for, seen in the server's own numbers:
    assert rows[("shared-prefix", "full")]["cached_fraction"] > 0.3  # prompts served from the prefix cache...
    assert rows[("shared-prefix", "no-prefix-caching")]["cached_fraction"] == 0  # ...and not without it
    assert rows[("pool-full", "full")]["preemptions"] == 0  # the shadow admits what the pool can finish
    assert rows[("pool-full", "no-shadow")]["preemptions"] > 0  # admission on prompt blocks alone preempts
    no_shadow = rows[("pool-full", "no-shadow")]
    assert no_shadow["figure_value"] == no_shadow["preemptions"] and no_shadow["figure_delta"] == no_shadow["preemptions"]
    # the figures come from the runs' samples
    [itl_run] = out_dir.glob("*-ablate-full-decode-64-c16.json")
    samples = json.loads(itl_run.read_text())["samples"]
    gaps = [b - a for s in samples for a, b in zip(s["chunk_times_s"], s["chunk_times_s"][1:])]
    assert rows[("decode-64", "full")]["figure_value"] == pytest.approx(1000 * float(np.median(gaps)))
    mt = rows[("multi-turn", "no-prefix-caching")]
    full_mt = rows[("multi-turn", "full")]
    assert mt["figure_delta_pct"] == pytest.approx(100 * (mt["figure_value"] / full_mt["figure_value"] - 1))
    assert "server-no-shadow-pool-full.log" in {p.name for p in out_dir.iterdir()}
    md = (out_dir / "ablation.md").read_text()
    assert "### each mechanism on the workload it exists for (smoke scale)" in md and md in printed
    assert "| pool-full | no-shadow |" in md and "`--num-kv-blocks 33`" in md


def test_the_plan_runs_each_configuration_on_its_workloads(tmp_path):
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    args = parser.parse_args(["--model", "dummy:tiny", "--ablate", "--ablate-scale", "full"])
    workloads = chosen("auto", default_all=args.ablate == "reference")
    assert [w.name for w in workloads] == ["shared-prefix", "multi-turn", "mixed", "pool-full", "decode-64"]
    assert chosen("auto", default_all=False) == [] and chosen("none", True) == []
    with pytest.raises(ValueError, match="unknown ablation workloads"):
        chosen("no-such", True)

    def servers(name: str) -> list[tuple[tuple[str, ...], list[str | None]]]:
        [ablation] = [a for a in selected(None) if a.name == name]
        return [(extra, [w and w.name for w, _ in runs]) for extra, runs in plan(ablation, args, workloads, tmp_path)]

    pool = ("--num-kv-blocks", "1025")
    assert servers("full") == [((), [None, "shared-prefix", "multi-turn", "mixed", "decode-64"]), (pool, ["pool-full"])]
    assert servers("no-cuda-graphs") == [((), [None])]
    assert servers("no-async-scheduling") == [((), [None, "decode-64"])]
    assert servers("no-chunked-prefill") == servers("fcfs") == [((), [None, "mixed"])]
    assert servers("no-prefix-caching") == [((), [None, "shared-prefix", "multi-turn"])]
    assert servers("no-shadow") == [((), [None]), (pool, ["pool-full"])]
    assert servers("kv-fp8") == [((), ["decode-64"])]  # no reference row: off by default
    [(_, runs)] = [s for s in plan(selected("full")[0], args, workloads, tmp_path) if s[0] == pool]
    bench = runs[0][1]
    assert (bench.workload, bench.input_len, bench.output_len, bench.concurrency, bench.num_requests) == \
        ("random", 256, 256, 64, 128)
    seeds = {b.seed for _, runs in plan(selected("full")[0], args, workloads, tmp_path) for _, b in runs}
    assert len(seeds) == 6  # each workload its own prompts: no prefix cache hit across workloads
