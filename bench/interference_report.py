"""The interference workload's figures and table: each loaded-phase figure over its idle baseline.

- shorts: TTFT P50 and P95 of the short requests that arrived while a long prompt was prefilling
  (sent after the long one was sent and before its first token), over the idle P50;
- streams: P99 of the inter-token gaps that overlap a long prefill, over the idle gap's P50;
- longs: the long prompts' TTFT P50 under load, over their solo P50.
A figure with no sample (no short arrived during a prefill) is None, and so is its ratio.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from bench.interference import Phases
from bench.sample import RequestSample

Window = tuple[float, float]


def prefill_windows(longs: Sequence[RequestSample]) -> list[Window]:
    """[sent, first token] of each long prompt that got one, in perf_counter seconds."""
    return [(s.t_send_s, s.t_send_s + s.ttft_s) for s in longs if s.ttft_s is not None]


def inside(t: float, windows: Sequence[Window]) -> bool:
    return any(a <= t < b for a, b in windows)


def overlaps(gap: Window, windows: Sequence[Window]) -> bool:
    return any(gap[0] < b and gap[1] > a for a, b in windows)


def stream_gaps(streams: Sequence[RequestSample]) -> list[Window]:
    """Each stream's gaps between consecutive tokens, as absolute (start, end)."""
    gaps = []
    for s in streams:
        times = [s.t_send_s + t for t in s.chunk_times_s]
        gaps.extend(zip(times, times[1:]))
    return gaps


def _pct_ms(values_s: Sequence[float], p: float) -> float | None:
    return float(np.percentile(values_s, p)) * 1000 if len(values_s) else None


def _ratio(x: float | None, base: float | None) -> float | None:
    return x / base if x is not None and base else None


def _ttfts(samples: Sequence[RequestSample]) -> list[float]:
    return [s.ttft_s for s in samples if s.ttft_s is not None]


def interference_figures(phases: Phases) -> dict:
    windows = prefill_windows(phases.longs)
    during = [s for s in phases.shorts if s.ttft_s is not None and inside(s.t_send_s, windows)]
    gaps = stream_gaps(phases.streams)
    gaps_during = [b - a for a, b in gaps if overlaps((a, b), windows)]
    idle_gaps = [b - a for a, b in stream_gaps(phases.idle_streams)]
    f = {
        "short_ttft_idle_p50_ms": _pct_ms(_ttfts(phases.idle_shorts), 50),
        "short_ttft_during_p50_ms": _pct_ms(_ttfts(during), 50),
        "short_ttft_during_p95_ms": _pct_ms(_ttfts(during), 95),
        "short_ttft_all_p50_ms": _pct_ms(_ttfts(phases.shorts), 50),
        "num_shorts_during": len(during),
        "num_shorts": len(phases.shorts),
        "itl_idle_p50_ms": _pct_ms(idle_gaps, 50),
        "itl_during_p99_ms": _pct_ms(gaps_during, 99),
        "itl_all_p99_ms": _pct_ms([b - a for a, b in gaps], 99),
        "num_gaps_during": len(gaps_during),
        "long_ttft_solo_p50_ms": _pct_ms(_ttfts(phases.solo_longs), 50),
        "long_ttft_p50_ms": _pct_ms(_ttfts(phases.longs), 50),
        "long_ttft_max_ms": _pct_ms(_ttfts(phases.longs), 100),
        "num_longs": len(windows),
        "failed": sum(not s.success for s in [*phases.idle_shorts, *phases.solo_longs, *phases.longs,
                                              *phases.shorts]),
    }
    f["short_p50_over_idle"] = _ratio(f["short_ttft_during_p50_ms"], f["short_ttft_idle_p50_ms"])
    f["short_p95_over_idle"] = _ratio(f["short_ttft_during_p95_ms"], f["short_ttft_idle_p50_ms"])
    f["itl_p99_over_idle"] = _ratio(f["itl_during_p99_ms"], f["itl_idle_p50_ms"])
    f["long_over_solo"] = _ratio(f["long_ttft_p50_ms"], f["long_ttft_solo_p50_ms"])
    return f


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def interference_table(rows: Sequence[tuple[str, dict]], title: str) -> str:
    """One row per run (label, figures): each figure beside its ratio to the idle baseline."""
    lines = [f"### {title}", "",
             "| run | short TTFT idle P50 | during prefill P50 / P95 (ms) | / idle P50 | ITL idle P50 | "
             "ITL P99 during (ms) | / idle P50 | long TTFT solo | long TTFT (ms) | / solo | shorts during |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, f in rows:
        lines.append(
            f"| {label} | {_ms(f['short_ttft_idle_p50_ms'])} | {_ms(f['short_ttft_during_p50_ms'])} / "
            f"{_ms(f['short_ttft_during_p95_ms'])} | {_x(f['short_p50_over_idle'])} / {_x(f['short_p95_over_idle'])} | "
            f"{_ms(f['itl_idle_p50_ms'])} | {_ms(f['itl_during_p99_ms'])} | {_x(f['itl_p99_over_idle'])} | "
            f"{_ms(f['long_ttft_solo_p50_ms'])} | {_ms(f['long_ttft_p50_ms'])} | {_x(f['long_over_solo'])} | "
            f"{f['num_shorts_during']} of {f['num_shorts']} |")
    return "\n".join(lines) + "\n"
