"""ModelRunner: executes one StepBatch (stage inputs, forward, sample) and keeps per-request state.

It owns the model, the KV pool and what the sampler needs per request (SamplingStates: prompt +
output ids for penalties, a private random generator for seeded sampling). Synchronous, in two halves so that
the host never holds the device up between steps: `launch` queues a step's work on the device
and returns at once; `complete` waits for its sampled ids (the step's one host sync) and turns
them into a StepResult. The GpuStage launches step N+1 before it completes step N; a decode of
step N+1 built before step N was sampled (PENDING_TOKEN) reads its input from step N's sampled
ids on the device. `execute` is both halves at once. A step that scores prompt positions for a
request asking for prompt logprobs runs eagerly, and their results ride its first sampled token
(sampling/prompt_logprobs.py). An exception in the forward propagates (the
step failed: the engine is broken); a failure while sampling one request only fails that request.
A per-step feature attaches as the runner's `hook` (runner_hooks.py): its share of a step may give
chunks several sampled rows, fill pending inputs, edit the logits before sampling and take the
tokens of the rows it claims.

A step, on CPU and GPU alike: the sampled rows are looked up and their uniforms drawn first; the
integer inputs and sampling parameters are packed into one pinned buffer and copied once
(StepInputs); the forward runs as a CUDA graph replay when the step fits a captured shape
(CudaGraphRunner), eagerly otherwise; the sampler ends with the step's one device-to-host copy.
It is constructed from built parts (runner_builder.build_parts: load, size the KV pool, tune,
warm up, capture the graphs); `ModelRunner.build` does both, so a built runner is ready to serve.

With `parallel` (gpu_stage/parallel: tensor parallelism) the runner holds one rank's shard: its
config is the shard's shape, its KV pool holds the rank's KV heads under the same block ids, and
the driver's `launch` broadcasts each staged step before its forward, so every rank runs it
(worker ranks run the forward alone: parallel/worker.py). Sampling stays on the driver.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from gpu_stage.kv.cache import KvCache
from gpu_stage.kv_tiers.transfer import KvTransfer, NoTransfer
from gpu_stage.loaders.model_source import ModelSource
from gpu_stage.runner_builder import RunnerParts, build_parts
from gpu_stage.runner_hooks import HookStep, RunnerHook
from gpu_stage.sampling.prompt_logprobs import PromptLogprobsPass
from gpu_stage.sampling.rows import SamplingRow, SamplingTensors, device_ids, draw_uniforms
from gpu_stage.sampling.sampler import PendingSample, SamplerOutput
from gpu_stage.sampling.states import SamplingStates
from gpu_stage.step_inputs import StagedStep, forward_step
from gpu_stage.step_layout import logits_rows
from gpu_stage.warm_up import warm_launch_thread
from stages.messages import (
    PENDING_TOKEN, KvTransferOps, SampledToken, StepBatch, StepResult,
)


@dataclass
class LaunchedStep:
    """A step queued on the device: what `complete` needs to turn it into a StepResult."""

    result: StepResult  # `failed` already holds the requests that failed before sampling
    rows: list[SamplingRow]
    request_ids: list[str]
    pending: PendingSample | None  # the batch's sampling, in flight
    outputs: list[tuple[SamplerOutput, list[int]]]  # sampled already (a row-by-row retry)
    started_ns: int
    copies_done: list = field(default_factory=list)  # events of tier copies reported with it
    prompt: PromptLogprobsPass | None = None  # its prompt logprobs, on their way to the host
    hook_step: HookStep | None = None  # the runner hook's share of this step


class ModelRunner:
    def __init__(self, parts: RunnerParts, seed: int | None = None) -> None:
        """From built parts (runner_builder.build_parts; `build` does both). `seed` seeds the
        generators of requests that carry no seed."""
        self.model, self.kv_cache, self.inputs = parts.model, parts.kv_cache, parts.inputs
        self.sampler, self.penalties, self.graphs = parts.sampler, parts.penalties, parts.graphs
        self.config = parts.model.config  # the shard's shape under tensor parallelism
        self.parallel = parts.parallel  # None: the whole model on one device
        self.device = parts.inputs.device
        self.dtype = parts.dtype
        self.block_size = parts.inputs.block_size
        self.max_num_batched_tokens = parts.inputs.max_num_tokens
        self.max_num_seqs = parts.inputs.max_num_seqs
        self.max_model_len = parts.max_model_len
        self.attention_backend = parts.attention_backend
        self.long_context = parts.long_context  # None: no chunk over a long context leaves the kernel
        self.states = SamplingStates(parts.penalties, seed)
        # Early tier copies (launch_transfer): the last one's event, which every step that admits a
        # request waits for, and those not yet reported with a step.
        self._early_copies: list = []
        self._last_early_copy = None
        # The last launched step's sampled ids on the device and each request's row in them:
        # where the next step's PENDING_TOKEN inputs come from.
        self._last_sampled: tuple[torch.Tensor, dict[str, int]] | None = None
        # Test hooks: raise from the first to fail the whole step, from the second (called with
        # each sampled request's id) to fail that request only.
        self.fault_injector: Callable[[StepBatch], None] | None = None
        self.request_fault_injector: Callable[[str], None] | None = None
        # Copies between the device pool and the host KV tier (pipeline/build_tiers.py sets one).
        self.kv_transfer: KvTransfer | NoTransfer = NoTransfer()
        # A per-step feature (runner_hooks.py), attached when the engine is built.
        self.hook: RunnerHook | None = None

    @classmethod
    def build(cls, source: ModelSource, device: torch.device | str, dtype: torch.dtype, num_blocks: int | None,
              block_size: int, max_num_batched_tokens: int, max_num_seqs: int, seed: int | None = None,
              **options) -> ModelRunner:
        """A runner ready to serve (loaded, pool sized, tuned, warmed up, graphs captured): the
        arguments and `options` of runner_builder.build_parts."""
        parts = build_parts(source, device, dtype, num_blocks, block_size, max_num_batched_tokens, max_num_seqs,
                            **options)
        return cls(parts, seed)

    def execute(self, batch: StepBatch) -> StepResult:
        return self.complete(self.launch(batch))

    @torch.inference_mode()
    def launch(self, batch: StepBatch) -> LaunchedStep:
        """Queue the step on the device (on CPU: compute it) without waiting for its result."""
        t0 = time.perf_counter_ns()
        if self.fault_injector is not None:
            self.fault_injector(batch)
        self._check_limits(batch)
        copies_done, self._early_copies = self._early_copies, []
        if batch.admits and self._last_early_copy is not None:
            torch.cuda.current_stream(self.device).wait_event(self._last_early_copy)  # its hits may be loading
        if batch.kv_ops is not None:
            copies_done.append(self.kv_transfer.run(batch.kv_ops))  # queued before the forward
        hook = self.hook
        for request_id in batch.finished_ids:
            self.states.release(request_id)
            if hook is not None:
                hook.release(request_id)
        for new in batch.new_requests:
            self.states.admit(new)
        launched = LaunchedStep(StepResult(batch.step_id, [], started_ns=t0), [], [], None, [], t0, copies_done)
        if batch.chunks:
            part = launched.hook_step = hook.begin(batch, self.states) if hook is not None else None
            rows, logit_rows, request_ids = self.states.sampling_rows(
                batch, launched.result, self.request_fault_injector, part.rows if part is not None else None)
            prompt = self.states.prompt_rows(batch)  # None unless a request asked for prompt logprobs
            shape = self.graphs.shape_for(batch.chunks) if self.graphs is not None and prompt is None else None
            feed = self._feed(batch)
            if part is not None and part.feed is not None:
                assert feed is None, "a step built ahead carries no hook's feed"
                feed = part.feed
            staged = self.inputs.stage(batch.chunks, rows, draw_uniforms(rows), self.config.vocab_size, shape,
                                       feed=feed, prompt=prompt)
            if self.parallel is not None:
                self.parallel.steps.send(staged, shape)  # every rank runs this step on its shard
            if shape is not None:
                logits = self.graphs.replay(shape)
            else:
                if prompt is not None:
                    launched.prompt = PromptLogprobsPass(prompt, staged.prompt_targets)
                logits = self._forward(staged, self.kv_cache, launched.prompt)
            launched.rows, launched.request_ids = rows, request_ids
            if rows:
                if shape is None or not shape.logits_per_seq:  # logits has one row per sampled position
                    logit_rows = logits_rows(batch.chunks, logit_rows)
                self._start_sampling(logits, logit_rows, staged.sampling, launched)
            if launched.prompt is not None:
                launched.prompt.start_copy()
        self._last_sampled = None
        if launched.pending is not None or launched.outputs:
            rows_of = {rid: j for j, rid in enumerate(launched.request_ids)}
            sampled_ids = self._sampled_ids(launched)
            self._last_sampled = (sampled_ids, rows_of)
            if staged.sampling is not None and staged.sampling.flags.need_penalties:
                self.penalties.advance(staged.sampling.penalty_slot, sampled_ids)
        launched.result.launched_ns = time.perf_counter_ns()
        return launched

    def _sampled_ids(self, launched: LaunchedStep) -> torch.Tensor:
        """The step's sampled ids on the device, one per row (a row-by-row retry has them on the
        host already; its failed rows read 0: the scheduler drops what follows them)."""
        if launched.pending is not None:
            return launched.pending.token_ids
        ids = [0] * len(launched.rows)
        for out, group in launched.outputs:
            for k, j in enumerate(group):
                ids[j] = out.token_ids[k]
        return torch.tensor(ids, dtype=torch.int32).to(self.device)

    def launch_transfer(self, ops: KvTransferOps) -> None:
        """Start early tier copies now (KvTierManager.take_early_ops); the next step launched
        reports them done, and every step that admits a request waits for them first."""
        event = self.kv_transfer.run(ops)
        self._early_copies.append(event)
        if event is not None:
            self._last_early_copy = event

    def complete(self, launched: LaunchedStep) -> StepResult:
        """Wait for a launched step's sampled ids and record them (per request)."""
        result, rows, request_ids = launched.result, launched.rows, launched.request_ids
        outputs = launched.outputs
        if launched.pending is not None:
            try:
                outputs = [(self.sampler.finish(launched.pending), list(range(len(rows))))]
            except Exception as exc:  # the copy back failed: every sampled row of the step fails
                for request_id in request_ids:
                    result.failed[request_id] = f"sampling failed: {type(exc).__name__}: {exc}"
                outputs = []
        prompt = self.states.prompt  # (empty unless a live request asked for prompt logprobs)
        if launched.prompt is not None:
            self.states.record_prompt_logprobs(launched.prompt, result)
        part = launched.hook_step
        claimed = part.claimed if part is not None else ()
        runs: dict[str, list[SampledToken]] = {}  # a claimed request's samples, row by row
        for out, group in outputs:
            for k, j in enumerate(group):
                request_id = request_ids[j]
                if k in out.errors:
                    result.failed[request_id] = out.errors[k]
                    continue
                token_id = out.token_ids[k]
                token = SampledToken(request_id, token_id, out.logprobs[k], out.top_logprobs[k])
                if claimed and request_id in claimed:
                    runs.setdefault(request_id, []).append(token)
                    continue
                rows[j].output_token_ids.append(token_id)
                if prompt and (progress := prompt.get(request_id)) is not None:
                    token.prompt_logprobs = progress.take()  # with its first token, once
                result.sampled.append(token)
        extra = outputs[0][0].extra if outputs else []  # (a row-by-row retry brings none back)
        for request_id, run in runs.items():
            if request_id not in result.failed:
                part.accept(request_id, run, extra, result)
        if part is not None:
            part.done(result)
        for copies in launched.copies_done:
            if copies is not None:
                copies.synchronize()  # the scheduler reads "step done" as "copies done"
        result.synced_ns = time.perf_counter_ns()
        result.duration_ns = result.synced_ns - launched.started_ns
        return result

    def _feed(self, batch: StepBatch) -> tuple[list[int], list[int], torch.Tensor] | None:
        """Where the PENDING_TOKEN inputs of this step come from: the rows of the previous step's
        sampled ids (a request missing there failed in that step: its input stays 0, and the
        scheduler drops what this step computes for it)."""
        dst, src = [], []
        offset = 0
        last = self._last_sampled
        for chunk in batch.chunks:
            if chunk.token_ids[0] == PENDING_TOKEN:
                row = last[1].get(chunk.request_id) if last is not None else None
                if row is not None:
                    dst.append(offset)
                    src.append(row)
            offset += len(chunk.token_ids)
        return (dst, src, last[0]) if dst else None

    def warm_thread(self) -> None:
        """Build the calling thread's caches (warm_up.warm_launch_thread): the GPU stage's launch
        thread calls this before it takes any step, so no prompt pays for them."""
        warm_launch_thread(self.model, self.attention_backend, self.dtype, self.device, self.max_num_batched_tokens,
                           self.max_num_seqs, self.long_context)

    def _forward(self, staged: StagedStep, kv_cache: KvCache, prompt: PromptLogprobsPass | None = None) -> torch.Tensor:
        return forward_step(self.model, staged, kv_cache, None if prompt is None else prompt.add)

    def _check_limits(self, batch: StepBatch) -> None:
        """The scheduler's promises; checked before any state changes (buffers rely on them)."""
        num_seqs, num_tokens = len(batch.chunks), batch.num_tokens
        if num_seqs > self.max_num_seqs or num_tokens > self.max_num_batched_tokens:
            raise RuntimeError(
                f"step {batch.step_id} has {num_seqs} sequences / {num_tokens} tokens, over the "
                f"limits {self.max_num_seqs} / {self.max_num_batched_tokens}"
            )
        longest = max((c.start_pos + len(c.token_ids) for c in batch.chunks), default=0)
        if longest > self.max_model_len:
            raise RuntimeError(
                f"step {batch.step_id} has a sequence of {longest} tokens, over max_model_len {self.max_model_len}"
            )

    def _start_sampling(self, logits: torch.Tensor, logit_rows: list[int], tensors: SamplingTensors | None,
                        launched: LaunchedStep) -> None:
        rows, request_ids = launched.rows, launched.request_ids
        if logit_rows == list(range(len(rows))):
            logits = logits[: len(rows)]
        else:  # a failed request or an unsampled chunk in between: gather (rare)
            logits = logits[device_ids(logit_rows, logits.device)]
        part = launched.hook_step
        extra, process = (part.extra, part.process_logits) if part is not None else (None, None)
        try:
            launched.pending = self.sampler.start(logits, rows, tensors, extra, process)
        except Exception:
            # Find the culprit: sample each row alone, waiting for each (rare); only the rows that
            # still fail are failed. No pending ids: the next step feeds none from this one.
            for j in range(len(rows)):
                try:
                    one = tensors.select(j) if tensors is not None else None
                    launched.outputs.append((self.sampler(logits[j : j + 1], rows[j : j + 1], one, process), [j]))
                except Exception as exc:
                    launched.result.failed[request_ids[j]] = f"sampling failed: {type(exc).__name__}: {exc}"
        finally:
            if part is not None:
                part.sampling_queued()
