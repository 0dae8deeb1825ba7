"""`python -m bench.kv_dtype_summary DETAIL OUTDIR`: the 8-bit KV cache's GPU figures against bf16
(bench/kv_dtype_suite.sh runs what this reads), in OUTDIR/kv_dtype_summary.json and .md.

Reads DETAIL/suite-<dtype>/summary.json (bench/gpu_suite.py with `--kv-cache-dtype <dtype>`),
OUTDIR/kv_debug_<dtype>.json (the server's /debug/kv) and, when present, the multi-turn runs
(DETAIL/multi-turn/*.json, labelled tiers-<dtype>). The fp8 figures get an `_fp8` suffix beside the
bf16 ones (`itl_p50_ms_b64_ctx2048_fp8`, `kv_pool_tokens_fp8`), and the issue's targets are checked:
64-stream ITL <= 7.0 ms with fp8, batch-1 ITL and TTFT at 128 / 2,048 / 8,192 within 2% of bf16,
pool tokens >= 1.95x bf16's from the same memory profile.

With OUTDIR/rates.json (bench/sustained_rate.py's copy_tbps, measured in the same call) it adds
each dtype's 64-stream decode floor (bench/floors.py: the weights plus 64 x 2,048 tokens of the
pool's bytes per token, at the measured copy rate) and the ITL's ratio to it, and each TTFT's
ratio to its floor at the sustained matrix rate (128, 512, 2,048 and 8,192 tokens), and the
batch-1 ITL's ratio to its floor (the weights and 256 tokens of context at the copy rate). The issue's 7.0 ms
is 1.27x its 5.5 ms fp8 floor on the H200: `itl_b64_ctx2048_fp8_le_1.27x_floor` checks that ratio,
which a GPU other than the H200 can be held to.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.floors import decode_floor_ms, ttft_floor_ms
from bench.tiers_summary import summarize as summarize_tiers
from gpu_stage.loaders.dummy_loader import dummy_preset

BASE, QUANT = "auto", "fp8"
ITL_B64_MAX_MS = 7.0
ITL_B64_FLOOR_MS = 5.5  # the fp8 floor on the H200, of which 7.0 ms is the ratio below
ITL_B64_MAX_RATIO = ITL_B64_MAX_MS / ITL_B64_FLOOR_MS
DECODE_SHAPE = ("llama-3.1-8b", 64, 2048)  # the suite's model (SUITE_SERVE_FLAGS), streams, context
WITHIN = 0.02  # fp8 may be this much slower than bf16 on these figures
SAME_AS_BF16 = ("ttft_p50_ms_128", "ttft_p50_ms_2048", "ttft_p50_ms_8192", "itl_p50_ms_b1")
POOL_RATIO_MIN = 1.95
FIGURES = SAME_AS_BF16 + ("itl_p50_ms_b64_ctx2048", "prefill_tok_per_s", "ref_ttft_p50_ms", "ref_ttft_p95_ms",
                          "ttft_p50_ms_2048_varied", "ttft_p50_ms_512")
B1_CONTEXT = 128 + 128  # the decode-b1 scenario: 128 prompt tokens, 256 out: its mean context


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def summarize(detail: Path, out: Path) -> dict:
    summary: dict = {"checks": {}}
    suites = {dt: _read(detail / f"suite-{dt}" / "summary.json") or {} for dt in (BASE, QUANT)}
    for key in FIGURES:
        for dt, suffix in ((BASE, ""), (QUANT, "_fp8")):
            if key in suites[dt]:
                summary[key + suffix] = suites[dt][key]
    for dt, suffix in ((BASE, ""), (QUANT, "_fp8")):
        kv = _read(out / f"kv_debug_{dt}.json")
        if kv:
            summary["kv_dtype" + suffix] = kv["dtype"]
            summary["kv_pool_tokens" + suffix] = kv["pool_tokens"]
            summary["kv_bytes_per_token" + suffix] = kv["bytes_per_token"]
    checks = summary["checks"]
    if "itl_p50_ms_b64_ctx2048_fp8" in summary:
        checks["itl_b64_ctx2048_fp8_le_7ms"] = summary["itl_p50_ms_b64_ctx2048_fp8"] <= ITL_B64_MAX_MS
    for key in SAME_AS_BF16:
        if key in summary and key + "_fp8" in summary and summary[key]:
            change = summary[key + "_fp8"] / summary[key] - 1
            summary[key + "_fp8_change"] = round(change, 4)
            checks[f"{key}_fp8_within_2pct"] = change <= WITHIN
    if summary.get("kv_pool_tokens") and summary.get("kv_pool_tokens_fp8"):
        ratio = summary["kv_pool_tokens_fp8"] / summary["kv_pool_tokens"]
        summary["kv_pool_tokens_ratio_fp8"] = round(ratio, 4)
        checks["kv_pool_tokens_fp8_ge_1.95x"] = ratio >= POOL_RATIO_MIN
    add_decode_floors(summary, _read(out / "rates.json"))
    runs = summarize_tiers(str(detail), str(out)).get("multi_turn", {})
    for dt, suffix in ((BASE, ""), (QUANT, "_fp8")):
        run = runs.get(f"tiers-{dt}")
        if run:
            summary["multi_turn_returning_ttft_p50_ms" + suffix] = run["returning"]["p50_ttft_ms"]
            summary["multi_turn_opening_ttft_p50_ms" + suffix] = run["opening_p50_ttft_ms"]
            summary["multi_turn_server_kv" + suffix] = run["server_kv"]
    return summary


def add_decode_floors(summary: dict, rates: dict | None) -> None:
    """The 64-stream ITL's floor per dtype at the measured copy rate, the ratio to it, and fp8's
    ratio checked against the issue's (7.0 over 5.5 ms); with the sustained matrix rate too, each
    TTFT's ratio to its floor."""
    if not rates or "copy_tbps" not in rates:
        return
    preset, batch, context = DECODE_SHAPE
    config = dummy_preset(preset)
    summary["copy_tbps"] = rates["copy_tbps"]
    for suffix in ("", "_fp8"):
        itl, per_token = summary.get("itl_p50_ms_b64_ctx2048" + suffix), summary.get("kv_bytes_per_token" + suffix)
        if itl is None or per_token is None:
            continue
        floor = decode_floor_ms(config, batch, context, rates["copy_tbps"], per_token)
        summary["itl_b64_ctx2048_floor_ms" + suffix] = round(floor, 3)
        summary["itl_b64_ctx2048_ratio_to_floor" + suffix] = round(itl / floor, 4)
    for suffix in ("", "_fp8"):  # one stream: the weights' read dominates its floor
        itl, per_token = summary.get("itl_p50_ms_b1" + suffix), summary.get("kv_bytes_per_token" + suffix)
        if itl is not None and per_token is not None:
            floor = decode_floor_ms(config, 1, B1_CONTEXT, rates["copy_tbps"], per_token)
            summary["itl_b1_floor_ms" + suffix] = round(floor, 3)
            summary["itl_b1_ratio_to_floor" + suffix] = round(itl / floor, 4)
    if "itl_b64_ctx2048_ratio_to_floor_fp8" in summary:
        summary["checks"]["itl_b64_ctx2048_fp8_le_1.27x_floor"] = (
            summary["itl_b64_ctx2048_ratio_to_floor_fp8"] <= ITL_B64_MAX_RATIO)
    if "sustained_tflops" in rates:  # TTFT's floors (bench/floors.py) at the sustained matrix rate
        for size in (128, 512, 2048, 8192):
            key = f"ttft_p50_ms_{size}"
            floor = ttft_floor_ms(config, size, rates["sustained_tflops"], rates["copy_tbps"])
            summary[key + "_floor"] = round(floor, 3)
            for suffix in ("", "_fp8"):
                if key + suffix in summary:
                    summary[key + "_ratio_to_floor" + suffix] = round(summary[key + suffix] / floor, 4)


def markdown(summary: dict) -> str:
    lines = ["| figure | bf16 (auto) | fp8 | change |", "|---|---|---|---|"]
    keys = [k for k in summary if k + "_fp8" in summary and not isinstance(summary[k], (dict, str))]
    for key in keys:
        base, quant = summary[key], summary[key + "_fp8"]
        change = f"{quant / base - 1:+.1%}" if isinstance(base, (int, float)) and base else "-"
        lines.append(f"| {key} | {base:.3f} | {quant:.3f} | {change} |" if isinstance(base, float)
                     else f"| {key} | {base} | {quant} | {change} |")
    lines += ["", "| target | met |", "|---|---|"] + [f"| {k} | {'yes' if v else 'NO'} |"
                                                      for k, v in summary["checks"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    detail, out = Path(argv[0]), Path(argv[1])
    summary = summarize(detail, out)
    (out / "kv_dtype_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "kv_dtype_summary.md").write_text(markdown(summary))
    print(markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
