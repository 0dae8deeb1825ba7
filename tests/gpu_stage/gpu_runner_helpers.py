"""Test support for GPU runner tests: a tiny model source and a greedy driver through execute()."""
from __future__ import annotations

import torch
from tiny_hf_models import model_config

from gpu_stage.model_runner import ModelRunner
from gpu_stage.model_source import ModelSource
from stages.messages import NewRequestData, ScheduledChunk, StepBatch
from stages.sampling import SamplingParams


class TinyTokenizer:
    vocab_size = 400
    eos_token_ids = frozenset({1})


def source_from_hf(hf) -> ModelSource:
    state = {k: v.detach().cpu() for k, v in hf.state_dict().items()}
    return ModelSource("tiny", model_config(hf), lambda d, dt: ((k, v.to(d, dt)) for k, v in state.items()),
                       TinyTokenizer(), "tiny")


def greedy(runner: ModelRunner, request_id: str, prompt: list[int], num_new: int, first_block: int = 1,
           chunk: int | None = None) -> list[int]:
    """Prefill (in chunks of `chunk` tokens) then decode greedily, one request alone; its blocks are
    first_block, first_block + 1, ... (never the null block 0)."""
    bs = runner.block_size
    table = list(range(first_block, first_block + -(-(len(prompt) + num_new) // bs)))
    new = [NewRequestData(request_id, list(prompt), SamplingParams(temperature=0.0, max_tokens=num_new))]
    pos, step, out = 0, 0, []
    while pos < len(prompt):
        end = min(len(prompt), pos + (chunk or len(prompt)))
        batch = StepBatch(step, new if step == 0 else [], [ScheduledChunk(request_id, prompt[pos:end], pos, table, end == len(prompt))])
        result = runner.execute(batch)
        pos, step = end, step + 1
    out.append(result.sampled[0].token_id)
    while len(out) < num_new:
        chunk_ = ScheduledChunk(request_id, out[-1:], len(prompt) + len(out) - 1, table, True)
        out.append(runner.execute(StepBatch(step, [], [chunk_])).sampled[0].token_id)
        step += 1
    runner.execute(StepBatch(step, [], [], [request_id]))
    return out


def make_runner(source: ModelSource, dtype: torch.dtype = torch.float32, **kwargs) -> ModelRunner:
    args = dict(num_blocks=256, block_size=4, max_num_batched_tokens=128, max_num_seqs=8,
                attention_backend="triton", max_model_len=256)
    args.update(kwargs)
    return ModelRunner(source, "cuda", dtype, **args)
