"""Test support: a tensor-parallel driver in the test process next to a one-process runner, and
steps run on both with the logits each produced recorded."""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

import torch
from gpu_runner_helpers import greedy

from exactness import FP32_GAP, ExactnessReport, compare_runs
from gpu_stage.loaders.model_source import ModelSource
from gpu_stage.model_runner import ModelRunner
from gpu_stage.parallel.driver import TensorParallelDriver
from gpu_stage.parallel.runner_spec import DTYPES, RunnerSpec
from stages.messages import NewRequestData, ScheduledChunk, StepBatch
from stages.sampling import SamplingParams

RUNNER_ARGS = dict(num_blocks=96, block_size=4, max_num_batched_tokens=128, max_num_seqs=8, max_model_len=256)


@contextmanager
def tp_pair(spec: RunnerSpec, world_size: int,
            source: ModelSource | None = None) -> Iterator[tuple[TensorParallelDriver, ModelRunner]]:
    """(the TP driver, a one-process runner of the same model and arguments), with one torch
    thread in this process meanwhile: the ranks share the machine's cores, and a rank that waits
    for a core holds every collective up (measured: 3 s per SmolLM2 step with two threads here,
    0.35 s with one). The driver's stop header must end every worker with status 0."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    source = source or spec.load_source()
    driver = TensorParallelDriver.start(spec, world_size, source=source)
    try:
        # The same pool (a pool sized by a memory profile here would see the driver's memory).
        args = {**spec.runner, "num_blocks": driver.runner.kv_cache.num_blocks}
        reference = ModelRunner.build(source, spec.device, DTYPES[spec.dtype], **args)
        print(f"TP={world_size} and one-process runners built in {time.perf_counter() - t0:.1f} s")
        yield driver, reference
    finally:
        statuses = driver.close()
        torch.set_num_threads(threads)
    assert statuses == {rank: 0 for rank in range(1, world_size)}, statuses


def record_logits(runner: ModelRunner) -> list[torch.Tensor]:
    """Every batch of logits the runner's sampler is handed, from now on."""
    seen: list[torch.Tensor] = []
    start = runner.sampler.start

    def spy(logits, rows, *args):  # start's other arguments pass through as they come
        seen.append(logits.detach().clone())
        return start(logits, rows, *args)

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


def compare_greedy(runner: ModelRunner, reference: ModelRunner, prompts: list[list[int]], num_new: int,
                   chunk: int | None = None, tolerance: float = FP32_GAP) -> ExactnessReport:
    """Each prompt's greedy continuation on both runners, compared under the exactness rule (the
    reference's top-2 gaps excuse a near-tie); the report is printed."""
    report = ExactnessReport()
    for i, prompt in enumerate(prompts):
        seen = record_logits(reference)  # one entry per sampled step: the k-th token's logits
        ref = greedy(reference, f"g{i}", prompt, num_new, chunk=chunk)
        del reference.sampler.start
        ours = greedy(runner, f"g{i}", prompt, num_new, chunk=chunk)
        compare_runs(report, f"prompt {i}", ref, ours, lambda k: top2_gap(seen[k][0]), tolerance)
    print(report.summary())
    return report


def top2_gap(logits: torch.Tensor) -> float:
    top = logits.float().topk(2).values
    return float(top[0] - top[1])
