"""Multi-turn metrics and table: opening turns (cold) apart from returning turns (prefix cached or
restored from a lower tier), and TTFT by turn index, so a tier's effect is one number to read:
returning-turn TTFT P50 with the tiers against the same run with recompute.

Throughputs are over the whole run (bench.metrics); percentiles are per phase, with the same
definitions (numpy's linear interpolation; only successful requests).
"""
from __future__ import annotations

from typing import Sequence

from bench.metrics import compute_metrics, summarize_ms
from bench.multi_turn_runner import MultiTurnRun, TurnRecord
from bench.report import _fmt, totals_lines


def phase_summary(records: Sequence[TurnRecord]) -> dict:
    """TTFT, ITL and E2E percentiles (ms) of some turns, and how much of their prompts was cached."""
    ok = [r.sample for r in records if r.sample.success]
    out: dict = {"completed": len(ok), "failed": len(records) - len(ok)}
    out.update(summarize_ms("ttft", [s.ttft_s for s in ok]))  # type: ignore[misc]
    out.update(summarize_ms("itl", [gap for s in ok for gap in s.itl_s()]))
    out.update(summarize_ms("e2el", [s.latency_s for s in ok]))  # type: ignore[misc]
    prompt = sum(s.prompt_tokens if s.prompt_tokens is not None else s.prompt_len for s in ok)
    reported = [s.cached_tokens for s in ok if s.cached_tokens is not None]
    out["mean_prompt_tokens"] = prompt / len(ok) if ok else 0.0
    # None when the server does not report cached tokens (an OpenAI-compatible server need not)
    out["mean_cached_tokens"] = sum(reported) / len(reported) if reported else None
    out["cached_fraction"] = sum(reported) / prompt if reported and prompt else None
    return out


def multi_turn_metrics(run: MultiTurnRun, num_turns: int) -> dict:
    """`overall` has bench.metrics' keys (so tools reading other runs read this one); `opening`,
    `returning` and `per_turn` (turn 0 = opening) split it."""
    overall = compute_metrics([r.sample for r in run.records], max(run.duration_s, 1e-9), run.max_in_flight)
    overall["skipped_turns"] = run.num_skipped
    per_turn = []
    for turn in range(num_turns + 1):
        s = phase_summary([r for r in run.records if r.turn == turn])
        per_turn.append({"turn": turn, **{k: s[k] for k in ("completed", "failed", "p50_ttft_ms",
                                                              "mean_prompt_tokens", "mean_cached_tokens")}})
    return {
        "overall": overall,
        "opening": phase_summary([r for r in run.records if r.turn == 0]),
        "returning": phase_summary([r for r in run.records if r.turn > 0]),
        "per_turn": per_turn,
    }


def _tokens(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.0f}"


def multi_turn_table(result: dict) -> str:
    cfg, mt, ws = result["config"], result["multi_turn"], result["working_set"]
    m = mt["overall"]
    lines = [
        f"### {cfg.get('label') or 'multi-turn'}: multi-turn, {cfg['conversations']} conversations x "
        f"(1 + {cfg['turns']} turns), concurrency {cfg['concurrency']}",
        "",
        f"working set {ws['tokens']:,} tokens ({cfg['conversations']} x {ws['max_context_tokens']:,}); "
        f"a quarter is {ws['quarter_tokens']:,} tokens = `--num-kv-blocks {ws['quarter_blocks']}` "
        f"at block size {ws['block_size']}",
    ]
    if kv := result.get("server_kv"):
        rate = kv.get("prefix_hit_rate")
        lines.append(f"server device pool {_tokens(kv.get('pool_blocks'))} blocks; {_tokens(kv.get('evictions'))} "
                     f"blocks evicted during the run; server prefix hit rate since start "
                     f"{'n/a' if rate is None else f'{rate:.1%}'}")
        if hits := kv.get("tier_hits"):
            lines.append("blocks found below the device pool during the run: "
                         + ", ".join(f"{tier} {num:,.0f}" for tier, num in sorted(hits.items())))
    lines += ["", "| turns | ok | TTFT P50 | TTFT P95 | TTFT P99 | ITL P50 | ITL P95 | ITL P99 | "
                  "prompt tok | cached tok |", "|---|---|---|---|---|---|---|---|---|---|"]
    for title, key in (("opening (cold)", "opening"), ("returning", "returning")):
        p = mt[key]
        cells = [p[f"p{q}_{n}_ms"] for n in ("ttft", "itl") for q in (50, 95, 99)]
        lines.append(f"| {title} | {p['completed']} | " + " | ".join(_fmt(c) for c in cells)
                     + f" | {_tokens(p['mean_prompt_tokens'])} | {_tokens(p['mean_cached_tokens'])} |")
    lines += ["", "| turn | ok | TTFT P50 (ms) | prompt tok | cached tok |", "|---|---|---|---|---|"]
    for t in mt["per_turn"]:
        lines.append(f"| {t['turn']} | {t['completed']} | {_fmt(t['p50_ttft_ms'])} | "
                     f"{_tokens(t['mean_prompt_tokens'])} | {_tokens(t['mean_cached_tokens'])} |")
    return "\n".join(lines + totals_lines(m, skipped=m["skipped_turns"])) + "\n"
