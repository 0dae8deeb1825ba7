"""StepCostModel: how long one scheduler step takes on the GPU, in seconds, without a GPU.

Llama-3.1-8B (the Llama-3-8B shape: hidden 4096, 32 layers, 32 q / 8 kv heads, head 128, vocab
128256, with a 128K context) in bf16 on one H200, from ../shared/PERFORMANCE.md:
  FLOPs = 13.96 GFLOP per computed token (every linear layer; the embedding is a lookup)
        + causal attention: a query at position p attends p + 1 keys at 2 * 262,144 FLOPs each,
          so a chunk covering positions [s, e) costs 262,144 * (e(e+1) - s(s+1)), and a whole
          prompt of S tokens 262,144 * S * (S+1) as in PERFORMANCE.md
        + 1.05 GFLOP of lm_head per sampled sequence (only the last position of a chunk)
  bytes = 16.06 GB of weights read once per step + 131,072 B of KV per context token per sequence
  time  = max(FLOPs / 790 TFLOP/s, bytes / 4.3 TB/s) + 1 ms fixed per-step overhead
so many tiny chunks are not free. Recalibrate the constants from measured step times once the GPU
stage lands (e.g. the measured 179 ms for an 8,192-token prefill against 167 ms here).
"""
from __future__ import annotations

from dataclasses import dataclass

from stages.messages import StepBatch


@dataclass(frozen=True, slots=True)
class StepCostModel:
    linear_flops_per_token: float = 13.96e9
    attention_flops_coeff: float = 262_144.0  # FLOPs = coeff * (e(e+1) - s(s+1)) per chunk
    lm_head_flops_per_sample: float = 1.05e9
    weight_bytes: float = 16.06e9
    kv_bytes_per_token: float = 131_072.0
    peak_flops: float = 790e12
    peak_bytes_per_s: float = 4.3e12
    fixed_overhead_s: float = 1e-3

    def flops(self, batch: StepBatch) -> float:
        total = 0.0
        for chunk in batch.chunks:
            start, end = chunk.start_pos, chunk.start_pos + len(chunk.token_ids)
            total += self.linear_flops_per_token * (end - start)
            total += self.attention_flops_coeff * (end * (end + 1) - start * (start + 1))
            if chunk.sample:
                total += self.lm_head_flops_per_sample
        return total

    def bytes(self, batch: StepBatch) -> float:
        context = sum(c.start_pos + len(c.token_ids) for c in batch.chunks)
        return self.weight_bytes + self.kv_bytes_per_token * context

    def step_s(self, batch: StepBatch) -> float:
        return max(self.flops(batch) / self.peak_flops,
                   self.bytes(batch) / self.peak_bytes_per_s) + self.fixed_overhead_s
