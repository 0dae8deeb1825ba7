"""Speculative decoding at start-up, its config resolved (pipeline/spec_flags.py): the target's
verification CUDA graphs (spec_graph_families), and the runner's verification hook attached, for
the draft_model method with the draft loaded beside the target (its vocabulary must be the
target's). (The scheduler attaches its own hook from SchedulerConfig.speculative.) A config that
cannot work raises ValueError naming the field; pipeline/build.py turns it into a refusal to start."""
from __future__ import annotations

import torch

from gpu_stage.graph_families import FamilyFactory
from gpu_stage.loaders import load_model_source
from gpu_stage.loaders.model_source import ModelSource
from gpu_stage.model_runner import ModelRunner
from gpu_stage.spec.draft_model import DraftModel
from gpu_stage.spec.graph_shapes import verify_graphs
from gpu_stage.spec.verifier import Verifier
from pipeline.config import EngineConfig
from stages.speculative import SpeculativeConfig


def spec_graph_families(spec: SpeculativeConfig | None) -> list[FamilyFactory]:
    """The target runner's own graph shapes under speculation: verification graphs for its k."""
    return [verify_graphs(spec.k)] if spec is not None else []


def attach_speculation(cfg: EngineConfig, spec: SpeculativeConfig | None, target: ModelSource, runner: ModelRunner,
                       dtype: torch.dtype, runner_args: dict) -> None:
    """Speculation on: `runner` verifies drafts (its hook); draft_model: with the draft loaded (same
    device, dtype, block ids; its own KV pool)."""
    if spec is None:
        return
    if spec.method != "draft_model":
        runner.hook = Verifier()
        return
    try:
        source = load_model_source(spec.model, seed=cfg.seed)
    except ValueError as exc:
        raise ValueError(f"speculative_config.model: cannot load {spec.model!r}: {exc}") from None
    if source.config.vocab_size != target.config.vocab_size:
        raise ValueError(f"speculative_config.model: the draft's vocabulary ({source.config.vocab_size} ids) "
                         f"differs from the target's ({target.config.vocab_size})")
    try:
        draft = DraftModel.build(
            source, runner.device, dtype, runner.kv_cache.num_blocks, runner.block_size,
            runner.max_num_batched_tokens, runner.max_num_seqs, runner.max_model_len, runner.attention_backend,
            runner_args["enforce_eager"], spec.k)
    except torch.OutOfMemoryError:
        # The target's pool was sized from a memory profile that knows nothing of the draft.
        raise ValueError(f"speculative_config.model: the draft and its KV pool ({runner.kv_cache.num_blocks} "
                         "blocks, the target's block ids) do not fit beside the target: set --num-kv-blocks "
                         "or a lower --gpu-memory-utilization") from None
    runner.hook = Verifier(draft)
