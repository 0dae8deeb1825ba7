"""Test support for runner tests: a tiny model source, a greedy driver through execute(), and the
real Scheduler driving a runner the way the GpuStage does (`serve`)."""
from __future__ import annotations

import torch
from tiny_hf_models import model_config

from gpu_stage.loaders.model_source import ModelSource
from gpu_stage.model_runner import ModelRunner
from collections import deque

from scheduler.config import SchedulerConfig
from scheduler.scheduler import Scheduler
from stages.messages import PENDING_TOKEN, GenerateRequest, NewRequestData, ScheduledChunk, StepBatch
from stages.sampling import SamplingParams
from stages.trace import RequestTrace


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
    return ModelRunner.build(source, "cuda", dtype, **args)


def serve(runner: ModelRunner, requests: list[tuple[str, list[int], SamplingParams]], async_scheduling: bool,
          eos: int = 1) -> tuple[dict[str, list[int]], int]:
    """The real Scheduler driving the runner as the GpuStage does: with async scheduling, step N+1
    is launched before step N completes (its decodes read PENDING_TOKEN inputs from step N's
    sampled ids on the device). Returns each request's tokens and how many inputs were pending."""
    s = Scheduler(SchedulerConfig(num_blocks=runner.kv_cache.num_blocks, block_size=runner.block_size,
                                  max_num_seqs=runner.max_num_seqs, max_num_batched_tokens=16,
                                  max_model_len=runner.max_model_len, eos_token_ids=frozenset({eos}),
                                  async_scheduling=async_scheduling))
    for rid, prompt, params in requests:
        assert s.add_request(GenerateRequest(rid, prompt, params, RequestTrace(rid))) is None
    outputs: dict[str, list[int]] = {rid: [] for rid, _, _ in requests}
    in_flight: deque = deque()
    num_pending = 0
    while s.has_work() or in_flight:
        while s.has_work() and len(in_flight) < 2 and (not in_flight or s.can_schedule_ahead()):
            batch = s.schedule()
            if batch is None:
                break
            num_pending += sum(c.token_ids == [PENDING_TOKEN] for c in batch.chunks)
            in_flight.append((batch, runner.launch(batch)))
        batch, launched = in_flight.popleft()
        for event in s.update(batch, runner.complete(launched)):
            assert event.error is None
            outputs[event.request_id] += event.token_ids
        s.check()
    return outputs, num_pending
