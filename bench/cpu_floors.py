"""The CPU's floors, as bench/floors.py gives the GPU's: measure this machine's memory bandwidth and
matrix rate, and turn a served CPU figure into a ratio to the floor it cannot beat.

    python -m bench.cpu_floors [--out FLOORS_JSON] [--preset smollm2-135m] [--repeats 5]

Ceilings (best of N, on torch's threads, the way a step runs):
- read bandwidth: the faster of a sum and a vector-matrix product (a decode step's own access) over
  a float32 buffer far larger than any cache (a decode step reads its weights once and writes
  little); copy bandwidth (read + write bytes) beside it;
- matrix rate: the faster of a 2,048-cube product and a prefill chunk's (256 rows through a
  576 x 1,536 weight) in float32; bf16 on the chunk's shape only (without bf16 dot products,
  cpu_caps.py, oneDNN emulates it at a small fraction of float32's rate).
Floors for the served model in float32 (the comparison's dtype):
- decode step = (weights read + batch x context x KV bytes per token) / read bandwidth;
- prefill of n tokens = bench/floors.prefill_flops(n) / float32 matrix rate.
`ratios(records, floors)` adds, to each bench/vllm_cpu_compare record, ITL P50 over its row's decode
floor and TTFT P50 over its prompt's prefill floor (1.0 would be the machine's limit).
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from bench.floors import prefill_flops
from gpu_stage.cpu_caps import KNOWN_FLAGS, detect
from gpu_stage.loaders.dummy_loader import dummy_preset
from gpu_stage.model.config import ModelConfig

FLOAT32_BYTES = 4
BUFFER_MIB = 512  # far larger than a server CPU's last-level cache
GEMV_COLUMNS = 4096
CUBE = (2048, 2048, 2048)
CHUNK = (256, 576, 1536)  # a prefill chunk through SmolLM2's gate_up


def _best_s(fn, repeats: int) -> float:
    fn()  # first touch and warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bandwidth_gbps(buffer_mib: int = BUFFER_MIB, repeats: int = 5) -> dict[str, float]:
    """{"read_gbps", "copy_gbps"}: GB/s (1e9 bytes) read by a sum, and read + written by a copy."""
    n = buffer_mib * 2**20 // FLOAT32_BYTES
    src, dst = torch.ones(n), torch.empty(n)
    num_bytes = n * FLOAT32_BYTES
    weight, row = src.view(-1, GEMV_COLUMNS), torch.ones(1, n // GEMV_COLUMNS)
    read_s = min(_best_s(lambda: src.sum(), repeats), _best_s(lambda: row @ weight, repeats))
    copy_s = _best_s(lambda: dst.copy_(src), repeats)
    return {"read_gbps": num_bytes / read_s / 1e9, "copy_gbps": 2 * num_bytes / copy_s / 1e9}


def matmul_gflops(dtype: torch.dtype, shapes: tuple[tuple[int, int, int], ...] = (CUBE, CHUNK),
                  repeats: int = 5) -> float:
    """The best rate over `shapes` (m, k, n) of an [m, k] @ [k, n] product."""
    best = 0.0
    for m, k, n in shapes:
        a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
        best = max(best, 2.0 * m * k * n / _best_s(lambda: a @ b, repeats) / 1e9)
    return best


def weight_read_bytes_f32(c: ModelConfig) -> float:
    """A decode step's weight read in float32: every parameter but an untied embedding table
    (its rows are gathered); a tied table is read whole as the lm_head."""
    gathered = 0 if c.tie_word_embeddings else c.vocab_size * c.hidden_size
    return float(c.num_params() - gathered) * FLOAT32_BYTES


def decode_floor_ms(c: ModelConfig, batch: int, context: int, read_gbps: float) -> float:
    kv = batch * context * c.kv_bytes_per_token(FLOAT32_BYTES)
    return (weight_read_bytes_f32(c) + kv) / (read_gbps * 1e9) * 1e3


def prefill_floor_ms(c: ModelConfig, num_tokens: int, gflops: float) -> float:
    return prefill_flops(c, num_tokens) / (gflops * 1e9) * 1e3


def measure(preset: str = "smollm2-135m", repeats: int = 5) -> dict:
    """The ceilings, the processor, and the model's shape figures the floors need."""
    caps = detect()
    c = dummy_preset(preset)
    return {
        "cpu_model": caps.model, "cpu_flags": [f for f in KNOWN_FLAGS if f in caps.flags],
        "usable_cores": caps.num_usable_cores, "torch_threads": torch.get_num_threads(),
        **bandwidth_gbps(repeats=repeats),
        "matmul_gflops_f32": matmul_gflops(torch.float32, repeats=repeats),
        "matmul_gflops_bf16": matmul_gflops(torch.bfloat16, (CHUNK,), repeats),
        "preset": preset, "weight_read_mb_f32": weight_read_bytes_f32(c) / 1e6,
        "model": asdict(c),
    }


def ratios(record: dict, floors: dict, concurrency: int, input_len: int, output_len: int) -> dict:
    """ITL P50 / decode floor (batch = concurrency, context = the prompt plus half the output) and
    TTFT P50 / prefill floor of one prompt; {} where the record has no figures."""
    if "median_itl_ms" not in record or "median_ttft_ms" not in record:
        return {}
    c = ModelConfig(**floors["model"])
    decode = decode_floor_ms(c, concurrency, input_len + output_len // 2, floors["read_gbps"])
    prefill = prefill_floor_ms(c, input_len, floors["matmul_gflops_f32"])
    return {"decode_floor_ms": decode, "itl_to_floor": record["median_itl_ms"] / decode,
            "prefill_floor_ms": prefill, "ttft_to_floor": record["median_ttft_ms"] / prefill}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help="write the JSON here as well")
    p.add_argument("--preset", default="smollm2-135m", help="the dummy preset whose shape is served")
    p.add_argument("--repeats", type=int, default=5, help="best of this many runs of each probe")
    a = p.parse_args(argv)
    if a.repeats < 1:
        p.error("--repeats must be >= 1")
    try:
        dummy_preset(a.preset)
    except (KeyError, ValueError) as exc:
        p.error(f"--preset: {exc}")
    floors = measure(a.preset, a.repeats)
    c = dummy_preset(a.preset)
    floors["decode_floor_ms"] = {f"b{b}_ctx{ctx}": decode_floor_ms(c, b, ctx, floors["read_gbps"])
                                 for b, ctx in ((1, 56), (4, 56), (4, 1216))}
    floors["prefill_floor_ms"] = {f"n{n}": prefill_floor_ms(c, n, floors["matmul_gflops_f32"]) for n in (40, 1200)}
    text = json.dumps({k: v for k, v in floors.items() if k != "model"} | {"model": floors["model"]}, indent=2)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
