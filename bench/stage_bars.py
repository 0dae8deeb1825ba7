"""Per-stage stacked bars of a run's first tokens as SVG, written by hand (no optional package): one
bar per request, sorted by TTFT, each cut into the stages its first token crossed (from the server's
`/debug/traces`: parse, tokenize, queue, reserve, schedule, the prefill step, sampling, writing), so
a reader sees at once which stage makes the slow first tokens slow.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from html import escape
from pathlib import Path

from stages.trace import EDGES

FIRST_TOKEN_EDGES = EDGES[1:EDGES.index("first_token_written") + 1]
COLORS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
          "#bab0ac", "#86bcb6", "#d37295")
WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 900, 420, 60, 30, 50


def fetch_traces(base_url: str, limit: int, timeout_s: float = 10.0) -> list[dict]:
    """The server's last `limit` traces; [] from a server without /debug/traces (not ttft)."""
    try:
        with urllib.request.urlopen(f"{base_url}/debug/traces?limit={limit}", timeout=timeout_s) as r:
            return json.load(r).get("traces", [])
    except (urllib.error.URLError, OSError, ValueError):
        return []


def first_token_stages(trace: dict) -> dict[str, float] | None:
    """ms per stage before the first token, each from the previous marked edge (as the server's
    stage spans); None for a request that wrote no first token."""
    edges = trace.get("edges_ms") or {}
    if edges.get("first_token_written") is None or edges.get("received") is None:
        return None
    out, prev = {}, edges["received"]
    for edge in FIRST_TOKEN_EDGES:
        at = edges.get(edge)
        if at is None:
            continue
        out[edge] = max(0.0, at - prev)
        prev = max(prev, at)
    return out


def write_stage_bars(path: str | Path, title: str, traces: list[dict]) -> bool:
    """Write the SVG; False (nothing written) when no trace has a first token."""
    rows = sorted((r for r in map(first_token_stages, traces) if r), key=lambda r: sum(r.values()))
    if not rows:
        return False
    top = max(sum(r.values()) for r in rows) or 1.0
    plot_w, plot_h = WIDTH - LEFT - 10, HEIGHT - TOP - BOTTOM
    bar_w = plot_w / len(rows)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" '
             f'font-size="11"><rect width="100%" height="100%" fill="#fff"/>',
             f'<text x="{LEFT}" y="16" font-size="13">{escape(title)}: time to first token by stage, one bar per '
             f'request ({len(rows)})</text>']
    for i, edge in enumerate(FIRST_TOKEN_EDGES):  # the legend
        x, y = LEFT + (i % 6) * 140, 28 + (i // 6) * 13
        parts.append(f'<rect x="{x}" y="{y - 8}" width="9" height="9" fill="{COLORS[i]}"/>'
                     f'<text x="{x + 12}" y="{y}">{edge}</text>')
    for k in range(5):  # the axis: ms at a fifth of the top each
        y = TOP + plot_h - plot_h * k / 4
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                     f'<text x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{top * k / 4:.1f}</text>')
    parts.append(f'<text x="12" y="{TOP + plot_h / 2}" transform="rotate(-90 12 {TOP + plot_h / 2})">ms</text>')
    for j, row in enumerate(rows):
        y = TOP + plot_h
        for i, edge in enumerate(FIRST_TOKEN_EDGES):
            h = row.get(edge, 0.0) / top * plot_h
            if h <= 0:
                continue
            y -= h
            parts.append(f'<rect x="{LEFT + j * bar_w:.2f}" y="{y:.2f}" width="{max(bar_w - 1, 0.5):.2f}" '
                         f'height="{h:.2f}" fill="{COLORS[i]}"><title>{edge}: {row[edge]:.3f} ms</title></rect>')
    parts.append("</svg>")
    Path(path).write_text("\n".join(parts))
    return True
