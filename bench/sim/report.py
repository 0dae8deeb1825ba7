"""Summaries of a simulated run: TTFT percentiles per request class, throughput, cache figures."""
from __future__ import annotations

from bench.sim.engine import RequestRecord, SimResult

_MAX_LENGTHS_BY_PROMPT = 8


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


def _by_prompt_len(recs: list[RequestRecord]) -> dict[str, float | None] | None:
    """TTFT P50 per prompt length, for workloads of a few fixed lengths (reference); else None."""
    lengths = sorted({r.num_prompt_tokens for r in recs})
    if len(lengths) > _MAX_LENGTHS_BY_PROMPT:
        return None
    return {str(n): _r(percentile([r.first_token_s - r.arrival_s for r in recs
                                   if r.num_prompt_tokens == n and r.first_token_s is not None], 50))
            for n in lengths}


def summarize(res: SimResult) -> dict[str, object]:
    """The figures `--json` prints. Everything but `host_us_per_step` is a function of the seed."""
    recs = list(res.records.values())
    ttft = {kind: [r.first_token_s - r.arrival_s for r in recs if r.kind == kind and r.first_token_s is not None]
            for kind in ("short", "long")}
    ttft_all = [r.first_token_s - r.arrival_s for r in recs if r.first_token_s is not None]
    e2e = [r.finish_s - r.arrival_s for r in recs if r.finish_s is not None and r.finish_reason != "rejected"]
    start_s = min((r.arrival_s for r in recs), default=0.0)
    span_s = max(res.end_s - start_s, 1e-12)
    num_output = sum(r.num_output_tokens for r in recs)
    stats = res.stats
    assert stats is not None
    return {
        "ttft_p50_s": _r(percentile(ttft_all, 50)),
        "ttft_p95_s": _r(percentile(ttft_all, 95)),
        "ttft_p99_s": _r(percentile(ttft_all, 99)),
        "ttft_mean_s": _r(sum(ttft_all) / len(ttft_all) if ttft_all else None),
        "ttft_p50_s_by_prompt_len": _by_prompt_len(recs),
        "short_ttft_p50_s": _r(percentile(ttft["short"], 50)),
        "short_ttft_p99_s": _r(percentile(ttft["short"], 99)),
        "long_ttft_p50_s": _r(percentile(ttft["long"], 50)),
        "long_ttft_p99_s": _r(percentile(ttft["long"], 99)),
        "short_ttft_mean_s": _r(sum(ttft["short"]) / len(ttft["short"]) if ttft["short"] else None),
        "e2e_p50_s": _r(percentile(e2e, 50)),
        "e2e_p99_s": _r(percentile(e2e, 99)),
        "output_tok_per_s": round(num_output / span_s, 1),
        "num_preemptions": stats.num_preemptions,
        "prefix_hit_rate": round(stats.prefix_hit_rate, 4),
        "num_requests": len(recs),
        "num_short": len(ttft["short"]),
        "num_long": len(ttft["long"]),
        "num_finished": sum(r.finish_reason in ("stop", "length") for r in recs),
        "num_rejected": sum(r.finish_reason == "rejected" for r in recs),
        "num_output_tokens": num_output,
        "num_scheduled_tokens": res.num_scheduled_tokens,
        "num_steps": res.num_steps,
        "mean_step_ms": round(1e3 * res.busy_s / max(res.num_steps, 1), 3),
        "makespan_s": round(span_s, 3),
        "gpu_busy_fraction": round(res.busy_s / span_s, 4),
        "compute_utilization": round(res.compute_s / span_s, 4),
        "num_evictions": stats.num_evictions,
        "num_reclaimed_blocks": stats.num_reclaimed_blocks,
        "num_revoked_reservations": stats.num_revoked_reservations,
        "num_admitted_short_lane": stats.num_admitted_short,
        "num_admitted_long_lane": stats.num_admitted_long,
        "host_us_per_step": round(1e6 * res.host_s / max(res.num_steps, 1), 1),
    }
