"""Size the KV pool from a memory profile (CUDA): what is left of `gpu_memory_utilization` of the
card once the weights, the activations of the largest step, the CUDA graph pool and the memory
outside torch's allocator (CUDA context, library handles, other processes) are accounted for.

The largest step is max_num_batched_tokens tokens spread over max_num_seqs sampled sequences (the
lm_head and the sampler's sort scale with the sampled rows, everything else with the tokens), run
once through the model and the sampler against a temporary pool just big enough for it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import torch

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
