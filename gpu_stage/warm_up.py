"""Start-up warm-ups, so that no request pays for a first use.

`warm_up_kernels` (the builder runs it on CUDA, before the graphs are captured) runs prefill and
decode steps over the first blocks, before any request owns them: it compiles the kernels of the
eager path and the sampler's fused variants. `warm_launch_thread` (the GPU stage's launch thread
runs it, through ModelRunner.warm_thread, before it takes any step) builds what torch keeps per
thread: cuDNN's attention plans and the cuBLAS kernels of every row count.
"""
from __future__ import annotations

import logging
import time

import torch

from gpu_stage.attention.long_context import LongContextAttention
from gpu_stage.kv.cache import KvCache
from gpu_stage.model.interface import CausalLM
from gpu_stage.sampling.rows import SamplingRow
from gpu_stage.sampling.sampler import Sampler
from gpu_stage.step_inputs import StepInputs, forward_step
from stages.messages import ScheduledChunk
from stages.sampling import SamplingParams

log = logging.getLogger("ttft.gpu")


def warm_up_kernels(model: CausalLM, kv_cache: KvCache, inputs: StepInputs, sampler: Sampler,
                    attention_backend: str, num_tokens: int = 16) -> None:
    """Prefill and decode steps over the first blocks, before any request owns them: compiles
    the kernels of the eager path (on CUDA with Triton, every decode split count)."""
    num_blocks = -(-(num_tokens + 1) // inputs.block_size)
    if num_blocks > kv_cache.num_blocks:
        return
    cuda = inputs.device.type == "cuda"
    vocab_size = model.config.vocab_size
    table = list(range(num_blocks))
    steps = [[ScheduledChunk("w", [0] * num_tokens, 0, table, True)],
             [ScheduledChunk("w", [0], num_tokens, table, True)]]
    if cuda:  # Triton specialises integer arguments equal to 1: several sequences too
        steps.append([ScheduledChunk(f"w{i}", [0] * 3, 0, table, True) for i in range(2)])
    rows = [SamplingRow(SamplingParams(temperature=0.0), [], [], None)]
    with torch.inference_mode():
        for chunks in steps:
            staged = inputs.stage(chunks, rows * len(chunks), [0.0] * len(chunks), vocab_size)
            sampler(forward_step(model, staged, kv_cache), rows * len(chunks), staged.sampling)
        sampler.warm_up(vocab_size, inputs.device)
        if cuda and attention_backend == "triton":
            from gpu_stage.kernels.decode_attention import MAX_SPLITS

            splits = 1
            while splits <= MAX_SPLITS:
                staged = inputs.stage(steps[1], vocab_size=vocab_size)
                staged.meta.decode_num_splits = splits
                forward_step(model, staged, kv_cache)
                splits *= 2
    if cuda:
        torch.cuda.synchronize(inputs.device)


def warm_launch_thread(model: CausalLM, attention_backend: str, dtype: torch.dtype,
                       device: torch.device, max_num_batched_tokens: int, max_num_seqs: int,
                       long_context: LongContextAttention | None = None) -> None:
    """Build, on the calling thread, what a step would otherwise build the first time it meets
    a shape: cuDNN's attention plans for every SDPA length bucket (tens of milliseconds each;
    torch keeps them per thread), the long-context path's (its kernels checked first) and
    cuBLAS's kernels for every row count of the matrix products (milliseconds per kernel loaded)."""
    if device.type != "cuda":
        return
    from gpu_stage.tuning.gemm_warmup import warm_gemm_kernels

    t0 = time.perf_counter()
    n = warm_gemm_kernels(model, max_num_batched_tokens, max_num_seqs)
    log.info("ran the matrix products at every row count (%d calls) in %.1f s", n, time.perf_counter() - t0)
    if attention_backend != "triton":
        return
    from gpu_stage.attention.triton_backend import warm_sdpa_plans

    t0 = time.perf_counter()
    c = model.config
    with torch.inference_mode():
        n = warm_sdpa_plans(c.num_heads, c.num_kv_heads, c.head_dim, dtype, device, max_num_batched_tokens)
    log.info("built the attention plans of %d prefill lengths in %.1f s", n, time.perf_counter() - t0)
    if long_context is not None:
        t0 = time.perf_counter()
        with torch.inference_mode():
            kernels = long_context.warm()
        log.info("long-context attention (chunks over >= %d cached tokens): %s, %.2f GiB of scratch, in %.1f s",
                 long_context.min_context, kernels or "off", long_context.num_bytes / 2**30, time.perf_counter() - t0)
