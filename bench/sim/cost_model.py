"""StepCostModel: how long one scheduler step takes on the GPU, in seconds, without a GPU.

Llama-3.1-8B (the Llama-3-8B shape: hidden 4096, 32 layers, 32 q / 8 kv heads, head 128, vocab
128256, with a 128K context) in bf16 on one H200. The work, from ../shared/PERFORMANCE.md:
  FLOPs = 13.96 GFLOP per computed token (every linear layer; the embedding is a lookup)
        + causal attention: a query at position p attends p + 1 keys at 2 * 262,144 FLOPs each,
          so a chunk covering positions [s, e) costs 262,144 * (e(e+1) - s(s+1)), and a whole
          prompt of S tokens 262,144 * S * (S+1) as in PERFORMANCE.md
        + 1.05 GFLOP of lm_head per sampled sequence (only the last position of a chunk)
  bytes = 16.06 GB of weights read once per step + 131,072 B of KV per context token per sequence
  time  = max(FLOPs / effective FLOP/s, bytes / 4.3 TB/s)
        + a fixed cost per step + a cost per sequence in the step (launches, host-side batch
          building, sampling, per-request bookkeeping: what a step pays beyond the floors)
so many tiny steps are not free.

Calibrated on the served H200 figures of bench/results/20261129-NVIDIA-H200/summary.json (the
real engine through HTTP; each within 10% here, see tests/bench/test_sim.py):
  decode at batch 1, 5.69 ms/step, and at batch 64 with 2K context, 13.77 ms/step, fix the two
  overheads (1.9 ms per step, 65 us per sequence) above the weight and KV reads;
  TTFT 49.6 ms for 2,048 prompt tokens alone and 192 ms for 8,192 (two 4,096-token chunks) fix
  the effective rate: 680 TFLOP/s (86% of the 790 measured for a bare GEMM; it predicts 45.6 and
  198 ms: the first TTFT also pays ~2 ms outside any step, as the 128-token one, 7.7 ms against
  5.7 ms here, shows).
The first model (790 TFLOP/s, 1 ms per step, nothing per sequence) was 22% fast at 2,048 tokens
and 37% fast for a 64-sequence decode.
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
    peak_flops: float = 680e12  # effective, measured end to end (see above)
    peak_bytes_per_s: float = 4.3e12
    fixed_overhead_s: float = 1.9e-3
    per_seq_overhead_s: float = 65e-6

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
        return (max(self.flops(batch) / self.peak_flops, self.bytes(batch) / self.peak_bytes_per_s)
                + self.fixed_overhead_s + self.per_seq_overhead_s * len(batch.chunks))
