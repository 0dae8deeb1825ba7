"""Turn a run into files: JSON with everything (config, machine, commit, metrics, every sample), a short
Markdown table next to it, and a TTFT CDF plot (bench/cdf_chart.py: with or without matplotlib).

The metrics themselves are computed in `bench.metrics`.
"""
from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import orjson

from bench.cdf_chart import write_cdf_chart
from bench.stage_bars import write_stage_bars
from bench.metrics import METRIC_NAMES, PERCENTILES, percentile_word

ROWS = (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2E latency", "e2el"))


def _run(cmd: list[str]) -> str | None:
    try:
        # GIT_OPTIONAL_LOCKS=0: `git status` must not take the index lock while others commit
        env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def machine_info() -> dict:
    """Where the numbers came from. torch's version is read from package metadata (no slow import)."""
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = None
    gpus = None
    if shutil.which("nvidia-smi"):
        gpus = _run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"])
    repo = Path(__file__).resolve().parent.parent
    return {
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "torch": torch_version,
        "gpus": gpus.splitlines() if gpus else [],
        "git_commit": _run(["git", "-C", str(repo), "rev-parse", "HEAD"]),
        "git_dirty": bool(_run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"])),
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _fmt(x: float) -> str:
    x = round(x, 2)
    return f"{x:.2f}" if abs(x) < 100 else f"{x:.1f}"


def markdown_table(result: dict) -> str:
    """The run's table: a row per metric that has percentiles (--percentile-metrics), a column per
    percentile (--metric-percentiles); a result written before those existed has all four at P50/P95/P99."""
    cfg, m = result["config"], result["metrics"]
    load = f"rate {cfg['rate']}/s" if cfg.get("rate") is not None else f"concurrency {cfg.get('concurrency')}"
    words = [percentile_word(p) for p in m.get("percentiles", PERCENTILES)]
    chosen = m.get("percentile_metrics", METRIC_NAMES)
    lines = [
        f"### {cfg.get('label') or cfg.get('workload')}: {cfg.get('workload')}, "
        f"{m['completed'] + m['failed']} requests, {load}",  # (a dataset may have fewer than asked)
        "",
        "| metric (ms) | mean | " + " | ".join(f"P{w}" for w in words) + " |",
        "|---|---|" + "---|" * len(words),
    ]
    for title, key in ROWS:
        if key in chosen:
            cells = [m[f"mean_{key}_ms"]] + [m[f"p{w}_{key}_ms"] for w in words]
            lines.append(f"| {title} | " + " | ".join(_fmt(c) for c in cells) + " |")
    return "\n".join(lines + totals_lines(m)) + "\n"


def totals_lines(m: dict, skipped: int | None = None) -> list[str]:
    """The closing lines of a run's table: outcomes, duration, throughput, goodput, the first errors."""
    outcome = f"{m['completed']} ok, {m['failed']} failed" + ("" if skipped is None else f", {skipped} skipped")
    lines = [
        "",
        f"{outcome} in {m['duration_s']:.2f} s; "
        f"{m['request_throughput']:.2f} req/s, {m['output_throughput']:.1f} output tok/s, "
        f"{m['total_token_throughput']:.1f} total tok/s; peak in flight {m['max_concurrent_requests']}",
    ]
    if m.get("request_goodput") is not None:
        slos = ", ".join(f"{k} <= {v:g} ms" for k, v in m["goodput_slos_ms"].items())
        lines.append(f"goodput ({slos}): {m['request_goodput']:.2f} req/s, {m['num_good_requests']} requests "
                     f"({m['goodput_fraction'] * 100:.1f}%)")
    if m["errors"]:
        lines.append("errors: " + "; ".join(m["errors"][:3]))
    return lines


def result_stem(result: dict) -> str:
    cfg = result["config"]
    when = result["machine"]["timestamp"].replace(":", "").replace("-", "")[:15]
    load = f"r{cfg['rate']}" if cfg.get("rate") is not None else f"c{cfg.get('concurrency')}"
    name = f"{when}-{cfg.get('label') or cfg.get('workload')}-{load}"
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", name)


def plot_ttft_cdf(result: dict, path: Path) -> bool:
    """Write the TTFT CDF as PNG (matplotlib, or the built-in drawing without it); False when no
    request succeeded."""
    ttfts = [s["ttft_s"] * 1000 for s in result["samples"] if s["success"]]
    return write_cdf_chart(path, result_stem(result), ttfts, "TTFT (ms)") is not None


def write_report(result: dict, result_dir: str | Path, markdown: str | None = None,
                 server_traces: list[dict] | None = None) -> dict[str, str]:
    """Write <stem>.json, <stem>.md and <stem>_ttft_cdf.png (when a request succeeded); returns their paths.

    `markdown`: the table to write, for workloads with their own (default: `markdown_table`).
    `server_traces`: the run's traces from a ttft server's /debug/traces: <stem>_stages.svg too."""
    out_dir = Path(result_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = base = result_stem(result)
    num = 1
    while (out_dir / f"{stem}.json").exists():  # two runs in the same second keep both files
        num += 1
        stem = f"{base}-{num}"
    paths = {"json": out_dir / f"{stem}.json", "markdown": out_dir / f"{stem}.md"}
    options = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
    paths["json"].write_bytes(orjson.dumps(result, option=options, default=str))
    paths["markdown"].write_text(markdown if markdown is not None else markdown_table(result))
    png = out_dir / f"{stem}_ttft_cdf.png"
    if plot_ttft_cdf(result, png):
        paths["ttft_cdf"] = png
    svg = out_dir / f"{stem}_stages.svg"
    if server_traces and write_stage_bars(svg, stem, server_traces):
        paths["stage_bars"] = svg
    return {k: str(v) for k, v in paths.items()}
