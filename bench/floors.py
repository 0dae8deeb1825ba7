"""The physical floors of the headline figures, and the measured figures as ratios to them:
`python -m bench.floors SUMMARY_JSON [--preset llama-3.1-8b]` adds `floors_ms`,
`prefill_tok_per_s_floor` and `ratio_to_floor` to a GPU suite's summary.json and writes the targets
table (figure, measured, target, met, floor, ratio) next to it as summary.md.

Floors follow ../shared/PERFORMANCE.md from the model's shape and the GPU's measured ceilings
(`gemm_tflops`, `copy_tbps` in the summary, from bench/gpu_kernels.py):
- prefill compute: 2 x (linear-layer parameters) FLOPs per token, plus causal attention
  2 x layers x heads x head_dim x S x (S + 1), plus the lm_head on the last token;
- a forward's weight read: every parameter but the embedding table (rows are gathered, not read);
- a decode step reads the weights plus every sequence's KV: (weights + B x C x KV bytes per token);
- a request's TTFT floor is the larger of its compute and its weight-read time.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from gpu_stage.loaders.dummy_loader import dummy_preset
from gpu_stage.model.config import ModelConfig

DTYPE_BYTES = 2  # bf16
# (figure, target, "<=" or ">="): ../shared/PERFORMANCE.md's targets table.
TARGETS: tuple[tuple[str, float, str], ...] = (
    ("ttft_p50_ms_128", 8.0, "<="),
    ("ttft_p50_ms_2048", 45.0, "<="),
    ("ttft_p50_ms_8192", 192.0, "<="),
    ("prefill_tok_per_s", 45_000.0, ">="),
    ("itl_p50_ms_b1", 4.2, "<="),
    ("itl_p50_ms_b64_ctx2048", 9.0, "<="),
    ("ref_ttft_p50_ms", 80.0, "<="),
    ("ref_ttft_p95_ms", 150.0, "<="),
    ("host_overhead_p50_ms_c1", 1.0, "<="),
    ("host_overhead_p99_ms_c64", 5.0, "<="),
)


def linear_params(c: ModelConfig) -> int:
    """Parameters that multiply every token: the decoder layers' matrices (norms excluded)."""
    return c.num_linear_params()


def prefill_flops(c: ModelConfig, num_tokens: int) -> float:
    attention = 2.0 * c.num_layers * c.num_heads * c.head_dim * num_tokens * (num_tokens + 1)
    lm_head = 2.0 * c.hidden_size * c.vocab_size
    return 2.0 * linear_params(c) * num_tokens + attention + lm_head


def weight_read_bytes(c: ModelConfig) -> float:
    """A tied model's one table is read whole as the lm_head; an untied one's embedding is not."""
    gathered = 0 if c.tie_word_embeddings else c.vocab_size * c.hidden_size
    return float(c.num_params() - gathered) * DTYPE_BYTES


def ttft_floor_ms(c: ModelConfig, num_tokens: int, tflops: float, tbps: float) -> float:
    compute = prefill_flops(c, num_tokens) / (tflops * 1e12)
    memory = (weight_read_bytes(c) + num_tokens * c.kv_bytes_per_token(DTYPE_BYTES)) / (tbps * 1e12)
    return max(compute, memory) * 1e3


def decode_floor_ms(c: ModelConfig, batch: int, context: int, tbps: float,
                    kv_bytes_per_token: int | None = None) -> float:
    """kv_bytes_per_token: the pool's (an 8-bit pool's with its scales); bf16's if None."""
    kv = batch * context * (kv_bytes_per_token or c.kv_bytes_per_token(DTYPE_BYTES))
    return (weight_read_bytes(c) + kv) / (tbps * 1e12) * 1e3


def floors(c: ModelConfig, tflops: float, tbps: float) -> dict:
    """Floors of the suite's figures (bench/gpu_suite.py's scenarios)."""
    return {
        "floors_ms": {
            "ttft_p50_ms_128": ttft_floor_ms(c, 128, tflops, tbps),
            "ttft_p50_ms_2048": ttft_floor_ms(c, 2048, tflops, tbps),
            "ttft_p50_ms_8192": ttft_floor_ms(c, 8192, tflops, tbps),
            "itl_p50_ms_b1": decode_floor_ms(c, 1, 256, tbps),  # decode-b1: 128 + up to 256 tokens
            "itl_p50_ms_b64_ctx2048": decode_floor_ms(c, 64, 2048, tbps),
        },
        "prefill_tok_per_s_floor": 2048 / (prefill_flops(c, 2048) / (tflops * 1e12)),
    }


def annotate(summary: dict, c: ModelConfig) -> dict:
    """summary + floors and ratios (measured / floor; for throughput, measured / ceiling)."""
    out = dict(summary)
    out.update(floors(c, summary["gemm_tflops"], summary["copy_tbps"]))
    out["ratio_to_floor"] = {k: summary[k] / v for k, v in out["floors_ms"].items() if k in summary}
    if "prefill_tok_per_s" in summary:
        out["ratio_to_floor"]["prefill_tok_per_s"] = summary["prefill_tok_per_s"] / out["prefill_tok_per_s_floor"]
    return out


def targets_table(summary: dict) -> str:
    ratios = summary.get("ratio_to_floor", {})
    lines = ["| figure | measured | target | met | floor ratio |", "|---|---|---|---|---|"]
    for key, target, sense in TARGETS:
        if key not in summary:
            continue
        value = summary[key]
        met = value <= target if sense == "<=" else value >= target
        ratio = f"{ratios[key]:.3f}" if key in ratios else ""
        lines.append(f"| {key} | {value:,.2f} | {sense} {target:g} | {'yes' if met else 'no'} | {ratio} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("summary", type=Path)
    p.add_argument("--preset", default="llama-3.1-8b", help="the dummy preset whose shape was served")
    a = p.parse_args()
    summary = json.loads(a.summary.read_text())
    if "gemm_tflops" in summary and "copy_tbps" in summary:
        summary = annotate(summary, dummy_preset(a.preset))
        a.summary.write_text(json.dumps(summary, indent=2))
    else:  # bench/gpu_kernels.py did not run: no ceilings, no floors
        print("no measured ceilings (gemm_tflops, copy_tbps) in the summary: targets only")
    table = targets_table(summary)
    (a.summary.parent / "summary.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
