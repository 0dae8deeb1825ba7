"""ModelRunner: executes one StepBatch (build inputs, forward, sample) and keeps per-request state.

It owns the model, the KV pool and what the sampler needs per request (prompt + output ids for
penalties, a private random generator for seeded sampling). Synchronous: the GpuStage calls
`execute` from its worker thread. An exception in the forward propagates (the step failed: the
engine is broken); a failure while sampling one request only fails that request.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable

import torch

from gpu_stage.attention.metadata import build_metadata
from gpu_stage.cpu_malloc import keep_freed_memory
from gpu_stage.kv_cache import KvCache
from gpu_stage.model.llama import LlamaForCausalLM
from gpu_stage.model_source import ModelSource
from gpu_stage.sampler import Sampler, SamplingRow
from stages.messages import NewRequestData, SampledToken, StepBatch, StepResult
from stages.sampling import SamplingParams


@dataclass
class RequestState:
    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    generator: torch.Generator


class ModelRunner:
    def __init__(
        self,
        source: ModelSource,
        device: torch.device | str,
        dtype: torch.dtype,
        num_blocks: int,
        block_size: int,
        max_num_batched_tokens: int,
        max_num_seqs: int,
        seed: int | None = None,  # seeds the generators of requests that carry no seed
    ) -> None:
        self.config = source.config
        self.device = torch.device(device)
        self.dtype = dtype
        self.block_size = block_size
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        if self.device.type == "cpu":
            keep_freed_memory()  # no page faults per layer on the CPU path (see cpu_malloc)
        self.model = LlamaForCausalLM(self.config, self.device, dtype)
        self.model.load_weights(source.weights(self.device, dtype))
        self.kv_cache = KvCache(self.config, num_blocks, block_size, self.device, dtype)
        self.sampler = Sampler(source.tokenizer.eos_token_ids)
        self.requests: dict[str, RequestState] = {}
        self._seed_source = random.Random(seed)
        # Test hooks: raise from the first to fail the whole step, from the second (called with
        # each sampled request's id) to fail that request only.
        self.fault_injector: Callable[[StepBatch], None] | None = None
        self.request_fault_injector: Callable[[str], None] | None = None

    @torch.inference_mode()
    def execute(self, batch: StepBatch) -> StepResult:
        t0 = time.perf_counter_ns()
        if self.fault_injector is not None:
            self.fault_injector(batch)
        self._check_limits(batch)
        for request_id in batch.finished_ids:
            self.requests.pop(request_id, None)
        for new in batch.new_requests:
            self.requests[new.request_id] = self._new_state(new)
        result = StepResult(batch.step_id, [])
        if batch.chunks:
            logits = self._forward(batch)  # [num_sampled_chunks, vocab]
            self._sample(batch, logits, result)
        result.duration_ns = time.perf_counter_ns() - t0
        return result

    def warmup(self, num_tokens: int = 16) -> None:
        """One prefill and one decode step over the first blocks, before any request owns them."""
        num_blocks = -(-(num_tokens + 1) // self.block_size)
        if num_blocks > self.kv_cache.num_blocks:
            return
        table = list(range(num_blocks))
        ids = [0] * num_tokens
        with torch.inference_mode():
            for start, chunk_ids in ((0, ids), (num_tokens, [0])):
                meta = build_metadata([len(chunk_ids)], [start + len(chunk_ids)], [table], self.block_size, self.device)
                input_ids = torch.tensor(chunk_ids, device=self.device)
                last = torch.tensor([len(chunk_ids) - 1], device=self.device)
                self.model(input_ids, meta.positions, self.kv_cache, meta, last)

    def _new_state(self, new: NewRequestData) -> RequestState:
        seed = new.params.seed if new.params.seed is not None else self._seed_source.getrandbits(63)
        generator = torch.Generator(device="cpu")
        generator.manual_seed(seed)
        return RequestState(new.params, list(new.prompt_token_ids), [], generator)

    def _check_limits(self, batch: StepBatch) -> None:
        """The scheduler's promises; checked before any state changes (buffers will rely on them)."""
        num_seqs, num_tokens = len(batch.chunks), batch.num_tokens
        if num_seqs > self.max_num_seqs or num_tokens > self.max_num_batched_tokens:
            raise RuntimeError(
                f"step {batch.step_id} has {num_seqs} sequences / {num_tokens} tokens, over the "
                f"limits {self.max_num_seqs} / {self.max_num_batched_tokens}"
            )

    def _forward(self, batch: StepBatch) -> torch.Tensor:
        chunks = batch.chunks
        query_lens = [len(c.token_ids) for c in chunks]
        seq_lens = [c.start_pos + len(c.token_ids) for c in chunks]
        meta = build_metadata(query_lens, seq_lens, [c.block_table for c in chunks], self.block_size, self.device)
        flat_ids = [t for c in chunks for t in c.token_ids]
        input_ids = torch.tensor(flat_ids, dtype=torch.int64, device=self.device)  # [T]
        ends, last_rows = 0, []
        for chunk, n in zip(chunks, query_lens):
            ends += n
            if chunk.sample:
                last_rows.append(ends - 1)
        if not last_rows:
            # Nothing to sample (all chunks are partial prefills): still fill the cache.
            last_rows = [0]
        logits_indices = torch.tensor(last_rows, dtype=torch.int64, device=self.device)  # [S]
        logits = self.model(input_ids, meta.positions, self.kv_cache, meta, logits_indices)
        return logits if any(c.sample for c in chunks) else logits[:0]

    def _sample(self, batch: StepBatch, logits: torch.Tensor, result: StepResult) -> None:
        rows, row_logits, request_ids = [], [], []
        for i, chunk in enumerate(c for c in batch.chunks if c.sample):
            try:
                state = self.requests.get(chunk.request_id)
                if state is None:
                    raise KeyError(f"request {chunk.request_id!r} was never announced to the runner")
                if self.request_fault_injector is not None:
                    self.request_fault_injector(chunk.request_id)
            except Exception as exc:
                result.failed[chunk.request_id] = f"{type(exc).__name__}: {exc}"
                continue
            rows.append(SamplingRow(state.params, state.prompt_token_ids, state.output_token_ids, state.generator))
            row_logits.append(i)
            request_ids.append(chunk.request_id)
        if not rows:
            return
        logits = logits[torch.tensor(row_logits, device=logits.device)]
        try:
            outputs = [self.sampler(logits, rows)]
            groups = [list(range(len(rows)))]
        except Exception:
            # Find the culprit: sample each row alone; only the rows that still fail are failed.
            outputs, groups = [], []
            for j in range(len(rows)):
                try:
                    outputs.append(self.sampler(logits[j : j + 1], rows[j : j + 1]))
                    groups.append([j])
                except Exception as exc:
                    result.failed[request_ids[j]] = f"sampling failed: {type(exc).__name__}: {exc}"
        for out, group in zip(outputs, groups):
            for k, j in enumerate(group):
                request_id = request_ids[j]
                if k in out.errors:
                    result.failed[request_id] = out.errors[k]
                    continue
                token_id = out.token_ids[k]
                rows[j].output_token_ids.append(token_id)
                result.sampled.append(SampledToken(request_id, token_id, out.logprobs[k], out.top_logprobs[k]))
