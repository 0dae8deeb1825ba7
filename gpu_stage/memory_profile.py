"""Size the KV pool from a memory profile (CUDA): what is left of `gpu_memory_utilization` of the
card once the weights, the activations of the largest step, the CUDA graph pool and the memory
outside torch's allocator (CUDA context, library handles, other processes) are accounted for.

The largest step is max_num_batched_tokens tokens spread over max_num_seqs sampled sequences (the
lm_head and the sampler's sort scale with the sampled rows, everything else with the tokens), the
first of them also scoring its prompt (prompt logprobs: an lm_head slice of up to PROMPT_SLICE_ROWS
rows), run once through the model and the sampler against a temporary pool just big enough for it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import torch

from gpu_stage.kv.cache import KvCache, blocks_for_memory
from gpu_stage.kv.format import KvFormat
from gpu_stage.model.interface import CausalLM
from gpu_stage.sampling.prompt_logprobs import PromptLogprobsPass, PromptProgress, plan_prompt_rows
from gpu_stage.sampling.rows import SamplingRow, draw_uniforms
from gpu_stage.sampling.sampler import Sampler
from gpu_stage.step_inputs import StepInputs, forward_step
from stages.messages import ScheduledChunk
from stages.sampling import SamplingParams

log = logging.getLogger("ttft.gpu")


@dataclass
class MemoryProfile:
    total_bytes: int
    persistent_bytes: int  # weights and buffers alive before the step (temporary pool excluded)
    activation_peak_bytes: int
    non_torch_bytes: int
    graph_reserve_bytes: int
    utilization: float

    @property
    def kv_budget_bytes(self) -> int:
        budget = (self.utilization * self.total_bytes - self.persistent_bytes - self.activation_peak_bytes
                  - self.non_torch_bytes - self.graph_reserve_bytes)
        return max(0, int(budget))

    def summary(self) -> str:
        gib = 2**30
        return (f"GPU memory: total {self.total_bytes / gib:.1f} GiB x {self.utilization:.2f}; weights and "
                f"buffers {self.persistent_bytes / gib:.2f}, activation peak {self.activation_peak_bytes / gib:.2f}, "
                f"outside torch {self.non_torch_bytes / gib:.2f}, graph reserve {self.graph_reserve_bytes / gib:.2f} "
                f"-> KV cache {self.kv_budget_bytes / gib:.2f} GiB")


def profile_step(run_step: Callable[[], None], temporary_bytes: int, utilization: float,
                 graph_reserve_bytes: int, device: torch.device) -> MemoryProfile:
    """`run_step` runs the largest step; `temporary_bytes` is memory allocated for the profile alone
    (its temporary KV pool), alive now and freed by the caller afterwards."""
    if not 0.0 < utilization <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {utilization}")
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    run_step()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    free, total = torch.cuda.mem_get_info(device)
    non_torch = max(0, (total - free) - torch.cuda.memory_reserved(device))
    profile = MemoryProfile(total, before - temporary_bytes, peak - before, non_torch, graph_reserve_bytes, utilization)
    log.info(profile.summary())
    return profile


def profile_num_blocks(model: CausalLM, inputs: StepInputs, sampler: Sampler, dtype: torch.dtype,
                       kv_format: KvFormat, utilization: float, graph_reserve_bytes: int) -> int:
    """Run the largest step against a temporary pool (in the pool's format); the KV pool gets what
    is left -> its blocks."""
    config, block_size, device = model.config, inputs.block_size, inputs.device
    num_tokens = inputs.max_num_tokens
    num_seqs = min(inputs.max_num_seqs, num_tokens)
    lens = [num_tokens // num_seqs + (i < num_tokens % num_seqs) for i in range(num_seqs)]
    chunks, next_block = [], 1
    for i, n in enumerate(lens):
        width = -(-n // block_size)
        table = list(range(next_block, next_block + width))
        chunks.append(ScheduledChunk(f"profile{i}", [1 + i % 7] * n, 0, table, True))
        next_block += width
    temporary = KvCache(config, next_block, block_size, device, dtype, kv_format)
    gen = torch.Generator().manual_seed(0)
    rows = [SamplingRow(SamplingParams(temperature=1.0, top_p=0.9, top_k=50, logprobs=5), [], [], gen)] * num_seqs

    # The first sequence also asks for prompt logprobs: their lm_head slice is part of the peak.
    prompt = plan_prompt_rows(chunks[:1], {chunks[0].request_id: PromptProgress(5, chunks[0].token_ids)})

    def run() -> None:
        with torch.inference_mode():
            staged = inputs.stage(chunks, rows, draw_uniforms(rows), config.vocab_size, prompt=prompt)
            scores = PromptLogprobsPass(prompt, staged.prompt_targets) if prompt is not None else None
            logits = forward_step(model, staged, temporary, scores.add if scores is not None else None)
            sampler(logits, rows, staged.sampling)

    profile = profile_step(run, temporary.num_bytes, utilization, graph_reserve_bytes, device)
    del temporary
    torch.cuda.empty_cache()
    num_blocks = blocks_for_memory(config, block_size, kv_format, profile.kv_budget_bytes)
    if num_blocks < 2:
        raise RuntimeError(f"no room for the KV cache: {profile.summary()}")
    return num_blocks
