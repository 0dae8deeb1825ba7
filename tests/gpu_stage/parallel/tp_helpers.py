"""Test support: a tensor-parallel driver in the test process next to a one-process runner, and
steps run on both with the logits each produced recorded."""
from __future__ import annotations

import torch

from gpu_stage.model_runner import ModelRunner
from gpu_stage.parallel.driver import TensorParallelDriver
from gpu_stage.parallel.runner_spec import DTYPES, RunnerSpec
from stages.messages import NewRequestData, ScheduledChunk, StepBatch
from stages.sampling import SamplingParams

RUNNER_ARGS = dict(num_blocks=96, block_size=4, max_num_batched_tokens=128, max_num_seqs=8, max_model_len=256)


def start_pair(spec: RunnerSpec, world_size: int) -> tuple[TensorParallelDriver, ModelRunner]:
    """(the TP driver, a one-process runner of the same model and arguments)."""
    driver = TensorParallelDriver.start(spec, world_size)
    reference = ModelRunner(spec.load_source(), spec.device, DTYPES[spec.dtype], **spec.runner)
    return driver, reference


def record_logits(runner: ModelRunner) -> list[torch.Tensor]:
    """Every batch of logits the runner's sampler is handed, from now on."""
    seen: list[torch.Tensor] = []
    start = runner.sampler.start

    def spy(logits, rows, tensors):
        seen.append(logits.detach().clone())
        return start(logits, rows, tensors)

    runner.sampler.start = spy
    return seen


def teacher_forced_logits(runner: ModelRunner, prompts: list[list[int]], forced: list[list[int]],
                          tag: str) -> list[torch.Tensor]:
    """Prefill every prompt in one step, then decode all of them together feeding `forced[i][k]`
    at step k -> each step's logits [len(prompts), vocab] (the same inputs on any runner)."""
    seen = record_logits(runner)
    bs = runner.block_size
    ids = [f"{tag}{i}" for i in range(len(prompts))]
    width = -(-max(len(p) + len(f) for p, f in zip(prompts, forced)) // bs)
    tables = [list(range(1 + i * width, 1 + (i + 1) * width)) for i in range(len(prompts))]
    new = [NewRequestData(r, list(p), SamplingParams(temperature=0.0)) for r, p in zip(ids, prompts)]
    runner.execute(StepBatch(0, new, [ScheduledChunk(r, list(p), 0, t, True) for r, p, t in zip(ids, prompts, tables)]))
    for k in range(len(forced[0])):
        chunks = [ScheduledChunk(r, [f[k]], len(p) + k, t, True) for r, p, f, t in zip(ids, prompts, forced, tables)]
        runner.execute(StepBatch(1 + k, [], chunks))
    runner.execute(StepBatch(1 + len(forced[0]), [], [], ids))
    del runner.sampler.start  # the spy
    return seen


def top2_gap(logits: torch.Tensor) -> float:
    top = logits.float().topk(2).values
    return float(top[0] - top[1])
