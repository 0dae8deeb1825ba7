"""build_model: from an EngineConfig to the synchronous cores (model runner, scheduler, tokenizer).

Runs in a worker thread at start-up (loading weights takes seconds). It also settles the context
window: the model's own, lowered to what the KV pool can hold, and an explicit value the pool
cannot hold refuses to start.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from gpu_stage.attention.cpu_decode_kernel import enable as enable_decode_kernel
from gpu_stage.cuda_graphs import MIXED_TOKEN_BUCKETS
from gpu_stage.kv.cache import blocks_for_memory
from gpu_stage.kv.format import check_kv_format, resolve_kv_format
from gpu_stage.loaders import load_model_source
from gpu_stage.loaders.model_source import ModelSource
from gpu_stage.model.cpu_fused import enable as enable_fused_ops
from gpu_stage.model.skinny_products import check_skinny_gemm
from gpu_stage.model_runner import ModelRunner
from gpu_stage.parallel import worker
from gpu_stage.parallel.driver import TensorParallelDriver
from ingress.chat_template import ChatTemplate, load_chat_template
from ingress.tokenizer import Tokenizer
from pipeline.build_parallel import (ParallelStartupError, cpu_threads_per_rank, kv_shard_config, runner_spec,
                                     start_tensor_parallel)
from pipeline.build_spec import attach_speculation, spec_graph_families
from pipeline.build_structured import attach_structured
from pipeline.build_tiers import BuiltTiers, build_tiers
from pipeline.config import EngineConfig
from pipeline.faults import install_faults
from pipeline.flag_checks import StartupError
from pipeline.spec_flags import resolve_speculative
from scheduler.config import SchedulerConfig
from scheduler.scheduler import Scheduler
from scheduler.step_budget import StepBudgetConfig
from stages.options import fill
from stages.speculative import SpeculativeConfig
from structured.compiler import GrammarCompiler

log = logging.getLogger("ttft.build")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEFAULT_CPU_KV_GB = 1.0
# SchedulerConfig's fields that EngineConfig spells otherwise; the others of the same name are copied.
SCHEDULER_RENAMES = {"policy": "scheduler_policy", "chunked_prefill": "enable_chunked_prefill"}


@dataclass
class BuiltModel:
    source: ModelSource
    runner: ModelRunner
    scheduler: Scheduler
    tokenizer: Tokenizer
    chat_template: ChatTemplate
    max_model_len: int
    num_blocks: int
    tiers: BuiltTiers = field(default_factory=BuiltTiers.off)
    parallel: TensorParallelDriver | None = None  # --tensor-parallel-size > 1: the workers' group
    grammars: GrammarCompiler | None = None  # structured outputs' compiler (ingress submits to it)

    @property
    def model_name(self) -> str:
        return self.source.name


def resolve_max_model_len(requested: int | None, model_len: int, pool_tokens: int) -> int:
    if requested is not None:
        if requested > pool_tokens:
            raise StartupError(
                f"--max-model-len {requested} does not fit the KV cache, which holds {pool_tokens} "
                f"tokens: lower --max-model-len or raise --kv-cache-gb"
            )
        if requested > model_len:
            raise StartupError(f"--max-model-len {requested} exceeds the model's context ({model_len})")
        return requested
    if pool_tokens < model_len:
        log.warning("max_model_len lowered from %d to %d: what the KV cache holds", model_len, pool_tokens)
        return pool_tokens
    return model_len


def build_model(cfg: EngineConfig) -> BuiltModel:
    template = _chat_template_override(cfg)  # before the weights load: a bad file refuses at once
    source, device, dtype, runner_args = plan_runner(cfg)
    if cfg.tensor_parallel_size == 1:
        spec = speculative(cfg)
        runner = ModelRunner.build(source, device=device, dtype=dtype, graph_families=spec_graph_families(spec),
                                   **runner_args)
        try:
            attach_speculation(cfg, spec, source, runner, dtype, runner_args)
        except ValueError as exc:
            raise StartupError(str(exc)) from None
        return _build_rest(cfg, source, runner, None, template)
    try:
        parallel = start_tensor_parallel(cfg, source, device.type, cfg.resolved_dtype(), runner_args)
    except ParallelStartupError as exc:
        raise StartupError(str(exc)) from exc
    try:
        return _build_rest(cfg, source, parallel.runner, parallel, template)
    except BaseException:
        parallel.close(timeout_s=0.0)
        raise


def run_worker_rank(cfg: EngineConfig) -> int:
    """Under torchrun, a rank other than 0 of `ttft serve -tp N`: the worker loop, not a server."""
    source, device, _, runner_args = plan_runner(cfg)
    return worker.main(runner_spec(cfg, device.type, cfg.resolved_dtype(), runner_args), source)


def speculative(cfg: EngineConfig) -> SpeculativeConfig | None:
    try:
        return resolve_speculative(cfg)
    except ValueError as exc:
        raise StartupError(str(exc)) from None


def plan_runner(cfg: EngineConfig) -> tuple[ModelSource, torch.device, torch.dtype, dict]:
    """The model source, device, dtype and ModelRunner.build arguments (the same on every rank)."""
    speculative(cfg)  # refuses what cannot work, and turns async scheduling off, before anything is built
    cfg.resolve_budgets()
    device = torch.device(cfg.resolved_device())
    if (threads := cpu_threads_per_rank(cfg, device.type)) is not None:
        torch.set_num_threads(threads)
    if cfg.cpu_decode_kernel and device.type == "cpu":  # compiled before the weights load (CpuOps reads them)
        enable_decode_kernel()  # a failure leaves the torch path, with a warning
        enable_fused_ops()
    dtype = DTYPES[cfg.resolved_dtype()]
    try:  # before the weights load: a format this device cannot run refuses at once
        kv_format = resolve_kv_format(cfg.kv_cache_dtype, dtype)
        check_kv_format(kv_format, device)
    except ValueError as exc:
        raise StartupError(str(exc)) from exc
    try:
        source = load_model_source(cfg.model, seed=cfg.seed)
    except ValueError as exc:  # a model (or config field) we cannot run: the user's to fix, not a fault
        raise StartupError(f"cannot load the model: {exc}") from exc
    try:
        kv_config = kv_shard_config(cfg, source.config)  # one rank's KV heads under tensor parallelism
    except ParallelStartupError as exc:
        raise StartupError(str(exc)) from exc
    on_gpu = device.type == "cuda"
    if cfg.num_kv_blocks is not None:
        num_blocks: int | None = cfg.num_kv_blocks
    elif cfg.kv_cache_gb is not None or not on_gpu:
        kv_gb = cfg.kv_cache_gb if cfg.kv_cache_gb is not None else DEFAULT_CPU_KV_GB
        num_blocks = blocks_for_memory(kv_config, cfg.block_size, kv_format, int(kv_gb * 2**30))
    else:
        num_blocks = None  # the runner sizes the pool from a memory profile (--gpu-memory-utilization)
    if num_blocks is not None and num_blocks < 2:
        raise StartupError("the KV cache holds fewer than 2 blocks for this model")
    backend = cfg.attention_backend if cfg.attention_backend != "auto" else ("triton" if on_gpu else "torch")
    try:
        check_skinny_gemm(cfg.skinny_gemm, backend)
    except ValueError as exc:
        raise StartupError(str(exc)) from None
    runner_args = dict(
        num_blocks=num_blocks, block_size=cfg.block_size,
        max_num_batched_tokens=cfg.max_num_batched_tokens, max_num_seqs=cfg.max_num_seqs,
        attention_backend=backend, enforce_eager=cfg.enforce_eager,
        mixed_graph_tokens=[t for t in MIXED_TOKEN_BUCKETS if t <= cfg.mixed_graph_max_tokens],
        gpu_memory_utilization=cfg.gpu_memory_utilization,
        max_model_len=cfg.max_model_len or source.config.max_position_embeddings,
        kv_cache_dtype=cfg.kv_cache_dtype, long_context_attention=cfg.long_context_attention,
        skinny_gemm=cfg.skinny_gemm,
    )
    return source, device, dtype, runner_args


def _chat_template_override(cfg: EngineConfig) -> str | None:
    if cfg.chat_template is None:
        return None
    try:
        return load_chat_template(cfg.chat_template)
    except ValueError as exc:
        raise StartupError(str(exc)) from exc


def _build_rest(cfg: EngineConfig, source: ModelSource, runner: ModelRunner,
                parallel: TensorParallelDriver | None, template_override: str | None) -> BuiltModel:
    """Everything after the runner: context window, fault hooks, tiers, scheduler, template."""
    log.info(runner.kv_cache.summary())
    num_blocks = runner.kv_cache.num_blocks
    max_model_len = resolve_max_model_len(
        cfg.max_model_len, source.config.max_position_embeddings, (num_blocks - 1) * cfg.block_size
    )
    install_faults(runner)
    grammars = attach_structured(runner, source.tokenizer, source.config.vocab_size, cfg.grammar_compile_timeout_s)
    try:
        tiers = build_tiers(cfg, runner)
    except ValueError as exc:
        raise StartupError(str(exc)) from exc
    tok = source.tokenizer
    scheduler = Scheduler(fill(
        SchedulerConfig, cfg, SCHEDULER_RENAMES, num_blocks=num_blocks, max_model_len=max_model_len,
        eos_token_ids=frozenset(tok.eos_token_ids), speculative=speculative(cfg),
        prefill_context_weight=source.config.attention_weight() if cfg.context_aware_chunks else 0.0,
    ), tiers=tiers.config, disk_blocks=tiers.disk_blocks,
        budget=StepBudgetConfig(cfg.step_budget_ms, cfg.step_cost_device, cfg.step_decode_ratio)
        if cfg.concurrent_lanes else None)
    template = ChatTemplate(
        template_override or tok.chat_template, bos_token=getattr(tok, "bos_token", None), eos_token=getattr(tok, "eos_token", None)
    )
    return BuiltModel(source, runner, scheduler, tok, template, max_model_len, num_blocks, tiers, parallel, grammars)
