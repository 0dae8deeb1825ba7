"""build_parts: what a ModelRunner runs steps with, built so that a constructed runner is ready to serve.

In order: the model is loaded; the sampler, its penalty pools and the step buffers are made; on
CUDA with `num_blocks` None the KV pool is sized from a memory profile of the largest step
(memory_profile.py); the pool is allocated; for CUDA graphs the one-row and the decode graphs'
products are tuned (tuning/); on CUDA the kernels of the eager path are compiled (warm_up.py);
the graphs are captured (cuda_graphs.py). Triton compiles after that are reported (compile_watch).

Under tensor parallelism (`parallel`, a gpu_stage.parallel.TensorParallel) two steps differ: the
model takes the shard's shape and loads only the shard's weights (`shard_config`, `load_model`),
and the profiled pool size is the smallest any rank can hold (`agree_num_blocks`: the block ids
are shared). Every rank builds in the same order, so the steps that run the model (the profile,
the warm-up, the captures) meet in the same collectives. With `parallel` None (one device) both
are today's steps unchanged.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import torch

from gpu_stage.attention import get_attention_backend
from gpu_stage.attention.long_backend import LongContextBackend, build_long_context
from gpu_stage.attention.long_context import LongContextAttention
from gpu_stage.compile_watch import WATCH
from gpu_stage.cpu_malloc import keep_freed_memory
from gpu_stage.cuda_graphs import (MIXED_SEQ_BUCKETS, MIXED_TOKEN_BUCKETS, PREFILL_BUCKETS, CudaGraphRunner,
                                   decode_buckets, graph_buckets)
from gpu_stage.graph_families import FamilyFactory
from gpu_stage.kernels import triton_available
from gpu_stage.kv.cache import KvCache
from gpu_stage.kv.format import resolve_kv_format
from gpu_stage.kv.invariance import kv8_invariant
from gpu_stage.loaders.model_source import ModelSource
from gpu_stage.memory_profile import profile_num_blocks
from gpu_stage.model import get_layer_ops
from gpu_stage.model.cpu_ops import prepare_cpu_model
from gpu_stage.model.config import ModelConfig
from gpu_stage.model.interface import CausalLM
from gpu_stage.model.registry import build_model
from gpu_stage.model.skinny_products import attach_skinny_products, check_skinny_gemm
from gpu_stage.parallel.tensor_parallel import TensorParallel
from gpu_stage.sampling.penalties import PenaltyCache
from gpu_stage.sampling.sampler import Sampler
from gpu_stage.step_inputs import StepInputs
from gpu_stage.warm_up import warm_up_kernels

log = logging.getLogger("ttft.gpu")

GRAPH_RESERVE_BYTES = 1 << 30  # kept out of the KV pool for the CUDA graph pool (measured: logged)


@dataclass
class RunnerParts:
    """A runner's model, KV pool, step buffers, sampler and graphs, built and warmed up."""

    model: CausalLM
    kv_cache: KvCache
    inputs: StepInputs  # also the step limits: max_num_tokens, max_num_seqs, block_size
    sampler: Sampler
    penalties: PenaltyCache  # the sampler's
    graphs: CudaGraphRunner | None  # None: every step runs eagerly
    dtype: torch.dtype
    max_model_len: int
    attention_backend: str
    parallel: TensorParallel | None = None  # this rank's part of a tensor-parallel group
    long_context: LongContextAttention | None = None  # chunks over long contexts (its plans: warm_thread)


def build_parts(
    source: ModelSource,
    device: torch.device | str,
    dtype: torch.dtype,
    num_blocks: int | None,  # None (CUDA only): size the pool from a memory profile
    block_size: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    attention_backend: str = "torch",  # "torch" | "triton" (kernels for norms/rope/act too)
    enforce_eager: bool = False,  # no CUDA graphs
    gpu_memory_utilization: float = 0.9,
    max_model_len: int | None = None,  # longest sequence (block-table width); default: the model's
    graph_reserve_bytes: int = GRAPH_RESERVE_BYTES,
    prefill_graph_sizes: Sequence[int] = PREFILL_BUCKETS,
    mixed_graph_tokens: Sequence[int] = MIXED_TOKEN_BUCKETS,  # (): no graphs for mixed steps
    mixed_graph_seqs: Sequence[int] = MIXED_SEQ_BUCKETS,
    kv_cache_dtype: str = "auto",  # --kv-cache-dtype (gpu_stage/kv/format.py)
    parallel: TensorParallel | None = None,  # this rank's shard; None: the whole model
    graph_families: Sequence[FamilyFactory] = (),  # a feature's own graph shapes (graph_families.py)
    long_context_attention: str = "auto",  # --long-context-attention (attention/long_backend.py)
    skinny_gemm: str = "off",  # --skinny-gemm (model/skinny_products.py)
) -> RunnerParts:
    check_skinny_gemm(skinny_gemm, attention_backend)
    device = resolve_device(device)
    cuda = device.type == "cuda"
    config = shard_config(source, parallel)
    max_model_len = max_model_len or config.max_position_embeddings
    kv_format = resolve_kv_format(kv_cache_dtype, dtype)
    if not cuda:
        keep_freed_memory()  # no page faults per layer on the CPU path (see cpu_malloc)
    # Before the memory profile: its scratch (~0.7 GiB at 128K for the Llama-3-8B shape) is the pool's to spare.
    long_context = build_long_context(long_context_attention, config.num_heads, config.num_kv_heads, config.head_dim,
                                      dtype, device, attention_backend, max_model_len, max_num_batched_tokens)
    model = load_model(source, device, dtype, attention_backend, parallel, long_context,
                       row_invariant=kv_format.is_quantized and kv8_invariant())
    attach_skinny_products(model.ops, skinny_gemm)  # before the profile, warm-up and captures run it
    # Penalised requests' histories on the device, advanced by each step's sampled ids; on CUDA
    # a slot for every running request now, so the memory profile below counts them.
    penalties = PenaltyCache(config.vocab_size, device, max_num_seqs + 1 if cuda else 0)
    sampler = Sampler(source.tokenizer.eos_token_ids, fused=cuda and triton_available(), penalties=penalties)
    inputs = StepInputs(max_num_batched_tokens, max_num_seqs, -(-max_model_len // block_size), block_size, device)
    if cuda:  # start-up compiles by design; what compiles once it is done is reported
        WATCH.install()
        WATCH.disarm()
    use_graphs = graphs_wanted(cuda, enforce_eager, attention_backend)
    if num_blocks is None:
        if not cuda:
            raise ValueError("num_blocks is required on CPU (the memory profile is CUDA only)")
        buckets = graph_buckets(max_num_seqs, max_num_batched_tokens, inputs.max_blocks_per_seq)
        reserve = graph_reserve_bytes + sum(make(buckets).reserve_bytes(config.vocab_size) for make in graph_families)
        num_blocks = profile_num_blocks(model, inputs, sampler, dtype, kv_format, gpu_memory_utilization,
                                        reserve if use_graphs else 0)
        num_blocks = agree_num_blocks(parallel, num_blocks)
    kv_cache = KvCache(config, num_blocks, block_size, device, dtype, kv_format)
    if use_graphs:
        tune_products(model, dtype, max_num_seqs, max_num_batched_tokens)
    if cuda:
        warm_up_kernels(model, kv_cache, inputs, sampler, attention_backend)
    graphs = None
    if use_graphs:
        graphs = CudaGraphRunner(model, kv_cache, inputs, max_num_seqs, max_num_batched_tokens, max_model_len,
                                 prefill_graph_sizes, mixed_graph_tokens, mixed_graph_seqs, graph_families)
        graphs.capture()
    if cuda:
        WATCH.arm()
    return RunnerParts(model, kv_cache, inputs, sampler, penalties, graphs, dtype, max_model_len, attention_backend,
                       parallel, long_context)


def resolve_device(device: torch.device | str) -> torch.device:
    """A CUDA device with its index (the current one when none is named)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def shard_config(source: ModelSource, parallel: TensorParallel | None) -> ModelConfig:
    """The shape this rank runs: the model's own, or its shard's (heads, KV heads, MLP width)."""
    return source.config if parallel is None else parallel.local_config


def load_model(source: ModelSource, device: torch.device, dtype: torch.dtype, attention_backend: str,
               parallel: TensorParallel | None = None,
               long_context: LongContextAttention | None = None, row_invariant: bool = False) -> CausalLM:
    """The model of the source's architecture (model/registry.py) with its weights (sharded: only
    this rank's part of each tensor is ever loaded); with `long_context`, its layers' attention goes
    through LongContextBackend. `row_invariant` (an 8-bit pool, kv/invariance.py): CPU products
    that give a row the same bits at any row count."""
    attention = get_attention_backend(attention_backend)
    if long_context is not None:
        attention = LongContextBackend(attention, long_context)
    model = build_model(shard_config(source, parallel), device, dtype, attention, get_layer_ops(attention_backend),
                        parallel)
    weights = source.weights(device, dtype) if parallel is None else source.weights(device, dtype,
                                                                                    shard=parallel.plan)
    model.load_weights(weights)
    if device.type == "cpu" and attention_backend == "torch":
        prepare_cpu_model(model, row_invariant)  # the CPU's BLAS layouts (model/cpu_ops.py); a GPU keeps TorchOps
    return model


def agree_num_blocks(parallel: TensorParallel | None, num_blocks: int) -> int:
    """The profiled pool size; under tensor parallelism the smallest of every rank's."""
    return num_blocks if parallel is None else parallel.agree_num_blocks(num_blocks)


def graphs_wanted(cuda: bool, enforce_eager: bool, attention_backend: str) -> bool:
    use_graphs = cuda and not enforce_eager
    if use_graphs and attention_backend != "triton":
        log.warning("CUDA graphs need --attention-backend triton; running eagerly")
        use_graphs = False
    return use_graphs


def tune_products(model: CausalLM, dtype: torch.dtype, max_num_seqs: int, max_num_batched_tokens: int) -> None:
    """Before the graphs capture the choices. One-row products (batch-1 decode): cuBLAS or the
    gemv kernel, whichever this GPU runs faster per weight shape inside a CUDA graph (eager steps
    keep cuBLAS: there a Triton launch's host cost outweighs the gain). Then cuBLASLt's algorithm
    per product at each decode graph's row count, where it beats F.linear's (gemm_tuning)."""
    from gpu_stage.tuning import cublaslt, gemm_tuning
    from gpu_stage.tuning.gemv_tuning import tune_gemv

    tune_gemv(model, model.ops)
    if not gemm_tuning.enabled() or not cublaslt.supports_dtype(dtype):
        return
    rows = gemm_tuning.tuned_row_counts(decode_buckets(max_num_seqs), max_num_batched_tokens)
    model.ops.lt_plan, _ = gemm_tuning.tune_products(model, rows, rows)
