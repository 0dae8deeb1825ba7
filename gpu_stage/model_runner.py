"""ModelRunner: executes one StepBatch (stage inputs, forward, sample) and keeps per-request state.

It owns the model, the KV pool and what the sampler needs per request (prompt + output ids for
penalties, a private random generator for seeded sampling). Synchronous, in two halves so that
the host never holds the device up between steps: `launch` queues a step's work on the device
and returns at once; `complete` waits for its sampled ids (the step's one host sync) and turns
them into a StepResult. The GpuStage launches step N+1 before it completes step N; a decode of
step N+1 built before step N was sampled (PENDING_TOKEN) reads its input from step N's sampled
ids on the device. `execute` is both halves at once. An exception in the forward propagates (the
step failed: the engine is broken); a failure while sampling one request only fails that request.

A step, on CPU and GPU alike: the sampled rows are looked up and their uniforms drawn first; the
integer inputs and sampling parameters are packed into one pinned buffer and copied once
(StepInputs); the forward runs as a CUDA graph replay when the step fits a captured shape
(CudaGraphRunner), eagerly otherwise; the sampler ends with the step's one device-to-host copy.
On CUDA the constructor also sizes the KV pool from a memory profile when `num_blocks` is None,
compiles the kernels and captures the graphs, so a constructed runner is ready to serve.

With `parallel` (gpu_stage/parallel: tensor parallelism) the runner holds one rank's shard: its
config is the shard's shape, its KV pool holds the rank's KV heads under the same block ids, and
the driver's `launch` broadcasts each staged step before its forward, so every rank runs it
(worker ranks run the forward alone: parallel/worker.py). Sampling stays on the driver.
"""
from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from gpu_stage.attention import get_attention_backend
from gpu_stage.compile_watch import WATCH
from gpu_stage.cpu_malloc import keep_freed_memory
from gpu_stage.cuda_graphs import (MIXED_SEQ_BUCKETS, MIXED_TOKEN_BUCKETS, PREFILL_BUCKETS, CudaGraphRunner,
                                   decode_buckets)
from gpu_stage.kernels import triton_available
from gpu_stage.kv_cache import KvCache, blocks_for_memory
from gpu_stage.kv_tiers.transfer import KvTransfer
from gpu_stage.layer_ops import get_layer_ops
from gpu_stage.memory_profile import profile_step
from gpu_stage.model.llama import LlamaForCausalLM
from gpu_stage.model_source import ModelSource
from gpu_stage.penalty_cache import PenaltyCache
from gpu_stage.sampler import (PendingSample, Sampler, SamplerOutput, SamplingRow, SamplingTensors, device_ids,
                               draw_uniforms)
from gpu_stage.step_inputs import StagedStep, StepInputs
from stages.messages import (
    PENDING_TOKEN, KvTransferOps, NewRequestData, SampledToken, ScheduledChunk, StepBatch, StepResult,
)
from stages.sampling import SamplingParams

log = logging.getLogger("ttft.gpu")

GRAPH_RESERVE_BYTES = 1 << 30  # kept out of the KV pool for the CUDA graph pool (measured: logged)


@dataclass
class RequestState:
    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    generator: torch.Generator
    # Rows sampled for it in launched steps: output_token_ids plus the steps still in flight.
    num_sampled: int = 0


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


class ModelRunner:
    def __init__(
        self,
        source: ModelSource,
        device: torch.device | str,
        dtype: torch.dtype,
        num_blocks: int | None,  # None (CUDA only): size the pool from a memory profile
        block_size: int,
        max_num_batched_tokens: int,
        max_num_seqs: int,
        seed: int | None = None,  # seeds the generators of requests that carry no seed
        attention_backend: str = "torch",  # "torch" | "triton" (kernels for norms/rope/act too)
        enforce_eager: bool = False,  # no CUDA graphs
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,  # longest sequence (block-table width); default: the model's
        graph_reserve_bytes: int = GRAPH_RESERVE_BYTES,
        prefill_graph_sizes: Sequence[int] = PREFILL_BUCKETS,
        mixed_graph_tokens: Sequence[int] = MIXED_TOKEN_BUCKETS,  # (): no graphs for mixed steps
        mixed_graph_seqs: Sequence[int] = MIXED_SEQ_BUCKETS,
        parallel=None,  # a gpu_stage.parallel.TensorParallel: this rank's shard; None: the whole model
    ) -> None:
        self.parallel = parallel
        self.config = source.config if parallel is None else parallel.local_config
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.dtype = dtype
        self.block_size = block_size
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.max_model_len = max_model_len or self.config.max_position_embeddings
        self.attention_backend = attention_backend
        cuda = self.device.type == "cuda"
        if not cuda:
            keep_freed_memory()  # no page faults per layer on the CPU path (see cpu_malloc)
        attention = get_attention_backend(attention_backend)
        self.model = LlamaForCausalLM(self.config, self.device, dtype, attention, get_layer_ops(attention_backend),
                                      parallel)
        self.model.load_weights(source.weights(self.device, dtype) if parallel is None
                                else source.weights(self.device, dtype, shard=parallel.plan))
        # Penalised requests' histories on the device, advanced by each step's sampled ids; on CUDA
        # a slot for every running request now, so the memory profile below counts them.
        self.penalties = PenaltyCache(self.config.vocab_size, self.device, max_num_seqs + 1 if cuda else 0)
        self.sampler = Sampler(source.tokenizer.eos_token_ids, fused=cuda and triton_available(),
                               penalties=self.penalties)
        self.inputs = StepInputs(max_num_batched_tokens, max_num_seqs, -(-self.max_model_len // block_size),
                                 block_size, self.device)
        self.requests: dict[str, RequestState] = {}
        # Early tier copies (launch_transfer): the last one's event, which every step that admits a
        # request waits for, and those not yet reported with a step.
        self._early_copies: list = []
        self._last_early_copy = None
        # The last launched step's sampled ids on the device and each request's row in them:
        # where the next step's PENDING_TOKEN inputs come from.
        self._last_sampled: tuple[torch.Tensor, dict[str, int]] | None = None
        self._seed_source = random.Random(seed)
        # Test hooks: raise from the first to fail the whole step, from the second (called with
        # each sampled request's id) to fail that request only.
        self.fault_injector: Callable[[StepBatch], None] | None = None
        self.request_fault_injector: Callable[[str], None] | None = None
        # Copies between the device pool and the host KV tier (pipeline/build_tiers.py), if any.
        self.kv_transfer: KvTransfer | None = None
        if cuda:  # start-up compiles by design; what compiles once it is done is reported
            WATCH.install()
            WATCH.disarm()
        use_graphs = cuda and not enforce_eager
        if use_graphs and attention_backend != "triton":
            log.warning("CUDA graphs need --attention-backend triton; running eagerly")
            use_graphs = False
        if num_blocks is None:
            if not cuda:
                raise ValueError("num_blocks is required on CPU (the memory profile is CUDA only)")
            num_blocks = self._profile_num_blocks(gpu_memory_utilization, graph_reserve_bytes if use_graphs else 0)
            if parallel is not None:
                num_blocks = parallel.agree_num_blocks(num_blocks)
        self.kv_cache = KvCache(self.config, num_blocks, block_size, self.device, dtype)
        self.graphs: CudaGraphRunner | None = None
        # One-row products (batch-1 decode): cuBLAS or the gemv kernel, whichever this GPU runs
        # faster per weight shape inside a CUDA graph; measured before the graphs capture the
        # choice. Eager steps keep cuBLAS: there a Triton launch's host cost outweighs the gain.
        if use_graphs:
            from gpu_stage.kernels.gemv_tuning import tune_gemv

            tune_gemv(self.model, self.model.ops)
        if use_graphs:
            self._tune_products()
        if cuda:
            self.warmup()
        if use_graphs:
            self.graphs = CudaGraphRunner(self.model, self.kv_cache, self.inputs, max_num_seqs,
                                          max_num_batched_tokens, self.max_model_len, prefill_graph_sizes,
                                          mixed_graph_tokens, mixed_graph_seqs)
            self.graphs.capture()
        if cuda:
            WATCH.arm()

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
        if batch.kv_ops is not None and self.kv_transfer is not None:
            copies_done.append(self.kv_transfer.run(batch.kv_ops))  # queued before the forward
        for request_id in batch.finished_ids:
            self.requests.pop(request_id, None)
            self.penalties.release(request_id)
        for new in batch.new_requests:
            self.requests[new.request_id] = self._new_state(new)
        launched = LaunchedStep(StepResult(batch.step_id, [], started_ns=t0), [], [], None, [], t0, copies_done)
        if batch.chunks:
            rows, logit_rows, request_ids = self._sampling_rows(batch, launched.result)
            shape = self.graphs.shape_for(batch.chunks) if self.graphs is not None else None
            staged = self.inputs.stage(batch.chunks, rows, draw_uniforms(rows), self.config.vocab_size, shape,
                                       feed=self._feed(batch))
            if self.parallel is not None:
                self.parallel.steps.send(staged, shape)  # every rank runs this step on its shard
            logits = self.graphs.replay(shape) if shape is not None else self._forward(staged, self.kv_cache)
            launched.rows, launched.request_ids = rows, request_ids
            if rows:
                if shape is None or not shape.logits_per_seq:  # logits has one row per sampled chunk
                    rank = _sampled_rank(batch.chunks)
                    logit_rows = [rank[i] for i in logit_rows]
                self._start_sampling(logits, logit_rows, staged.sampling, launched)
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
        assert self.kv_transfer is not None, "tier copies without a host tier"
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
        for out, group in outputs:
            for k, j in enumerate(group):
                request_id = request_ids[j]
                if k in out.errors:
                    result.failed[request_id] = out.errors[k]
                    continue
                token_id = out.token_ids[k]
                rows[j].output_token_ids.append(token_id)
                result.sampled.append(SampledToken(request_id, token_id, out.logprobs[k], out.top_logprobs[k]))
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

    def warmup(self, num_tokens: int = 16) -> None:
        """Prefill and decode steps over the first blocks, before any request owns them: compiles
        the kernels of the eager path (on CUDA with Triton, every decode split count)."""
        num_blocks = -(-(num_tokens + 1) // self.block_size)
        if num_blocks > self.kv_cache.num_blocks:
            return
        table = list(range(num_blocks))
        steps = [[ScheduledChunk("w", [0] * num_tokens, 0, table, True)],
                 [ScheduledChunk("w", [0], num_tokens, table, True)]]
        if self.device.type == "cuda":  # Triton specialises integer arguments equal to 1: several sequences too
            steps.append([ScheduledChunk(f"w{i}", [0] * 3, 0, table, True) for i in range(2)])
        rows = [SamplingRow(SamplingParams(temperature=0.0), [], [], None)]
        with torch.inference_mode():
            for chunks in steps:
                staged = self.inputs.stage(chunks, rows * len(chunks), [0.0] * len(chunks), self.config.vocab_size)
                self.sampler(self._forward(staged, self.kv_cache), rows * len(chunks), staged.sampling)
            self.sampler.warm_up(self.config.vocab_size, self.device)
            if self.device.type == "cuda" and self.attention_backend == "triton":
                from gpu_stage.kernels.decode_attention import MAX_SPLITS

                splits = 1
                while splits <= MAX_SPLITS:
                    staged = self.inputs.stage(steps[1], vocab_size=self.config.vocab_size)
                    staged.meta.decode_num_splits = splits
                    self._forward(staged, self.kv_cache)
                    splits *= 2
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _tune_products(self) -> None:
        """cuBLASLt's algorithm per product at each decode graph's row count, where it beats
        F.linear's (gemm_tuning); before the graphs capture it."""
        from gpu_stage import cublaslt, gemm_tuning

        if not gemm_tuning.enabled() or not cublaslt.supports_dtype(self.dtype):
            return
        rows = gemm_tuning.tuned_row_counts(decode_buckets(self.max_num_seqs), self.max_num_batched_tokens)
        self.model.ops.lt_plan, _ = gemm_tuning.tune_products(self.model, rows, rows)

    def warm_thread(self) -> None:
        """Build, on the calling thread, what a step would otherwise build the first time it meets
        a shape: cuDNN's attention plans for every SDPA length bucket (~64 ms each on the H200
        host; torch keeps them per thread) and cuBLAS's kernels for every row count of the matrix
        products (~3 ms per kernel loaded). The GPU stage's launch thread calls this before it takes
        any step, so no prompt pays for them."""
        if self.device.type != "cuda":
            return
        from gpu_stage.gemm_warmup import warm_gemm_kernels

        t0 = time.perf_counter()
        n = warm_gemm_kernels(self.model, self.max_num_batched_tokens, self.max_num_seqs)
        log.info("ran the matrix products at every row count (%d calls) in %.1f s", n, time.perf_counter() - t0)
        if self.attention_backend != "triton":
            return
        from gpu_stage.attention.triton_backend import warm_sdpa_plans

        t0 = time.perf_counter()
        c = self.config
        with torch.inference_mode():
            n = warm_sdpa_plans(c.num_heads, c.num_kv_heads, c.head_dim, self.dtype, self.device,
                                self.max_num_batched_tokens)
        log.info("built the attention plans of %d prefill lengths in %.1f s", n, time.perf_counter() - t0)

    def _forward(self, staged: StagedStep, kv_cache: KvCache) -> torch.Tensor:
        return self.model(staged.input_ids, staged.positions, kv_cache, staged.meta, staged.logits_indices)

    def _new_state(self, new: NewRequestData) -> RequestState:
        seed = new.params.seed if new.params.seed is not None else self._seed_source.getrandbits(63)
        generator = torch.Generator(device="cpu")
        generator.manual_seed(seed)
        return RequestState(new.params, list(new.prompt_token_ids), [], generator)

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

    def _sampling_rows(self, batch: StepBatch, result: StepResult) -> tuple[list[SamplingRow], list[int], list[str]]:
        """Rows to sample (requests known and not failed by the test hook) and their chunk index."""
        rows, chunk_index, request_ids = [], [], []
        for i, chunk in enumerate(batch.chunks):
            if not chunk.sample:
                continue
            try:
                state = self.requests.get(chunk.request_id)
                if state is None:
                    raise KeyError(f"request {chunk.request_id!r} was never announced to the runner")
                if self.request_fault_injector is not None:
                    self.request_fault_injector(chunk.request_id)
                # Its penalty history (filled the first time: the pools may grow, and a failed
                # allocation fails this request only).
                slot = (self.penalties.slot(chunk.request_id, state.prompt_token_ids, state.output_token_ids)
                        if state.params.needs_penalties else 0)
            except Exception as exc:
                result.failed[chunk.request_id] = f"{type(exc).__name__}: {exc}"
                continue
            rows.append(SamplingRow(state.params, state.prompt_token_ids, state.output_token_ids, state.generator,
                                    slot, state.num_sampled))
            state.num_sampled += 1
            chunk_index.append(i)
            request_ids.append(chunk.request_id)
        return rows, chunk_index, request_ids

    def _start_sampling(self, logits: torch.Tensor, logit_rows: list[int], tensors: SamplingTensors | None,
                        launched: LaunchedStep) -> None:
        rows, request_ids = launched.rows, launched.request_ids
        if logit_rows == list(range(len(rows))):
            logits = logits[: len(rows)]
        else:  # a failed request or an unsampled chunk in between: gather (rare)
            logits = logits[device_ids(logit_rows, logits.device)]
        try:
            launched.pending = self.sampler.start(logits, rows, tensors)
        except Exception:
            # Find the culprit: sample each row alone, waiting for each (rare); only the rows that
            # still fail are failed. No pending ids: the next step feeds none from this one.
            for j in range(len(rows)):
                try:
                    one = tensors.select(j) if tensors is not None else None
                    launched.outputs.append((self.sampler(logits[j : j + 1], rows[j : j + 1], one), [j]))
                except Exception as exc:
                    launched.result.failed[request_ids[j]] = f"sampling failed: {type(exc).__name__}: {exc}"

    def _profile_num_blocks(self, utilization: float, graph_reserve_bytes: int) -> int:
        """Run the largest step against a temporary pool; the KV pool gets what is left."""
        num_tokens = self.max_num_batched_tokens
        num_seqs = min(self.max_num_seqs, num_tokens)
        lens = [num_tokens // num_seqs + (i < num_tokens % num_seqs) for i in range(num_seqs)]
        chunks, next_block = [], 1
        for i, n in enumerate(lens):
            width = -(-n // self.block_size)
            table = list(range(next_block, next_block + width))
            chunks.append(ScheduledChunk(f"profile{i}", [1 + i % 7] * n, 0, table, True))
            next_block += width
        temporary = KvCache(self.config, next_block, self.block_size, self.device, self.dtype)
        gen = torch.Generator().manual_seed(0)
        rows = [SamplingRow(SamplingParams(temperature=1.0, top_p=0.9, top_k=50, logprobs=5), [], [], gen)] * num_seqs

        def run() -> None:
            with torch.inference_mode():
                staged = self.inputs.stage(chunks, rows, draw_uniforms(rows), self.config.vocab_size)
                self.sampler(self._forward(staged, temporary), rows, staged.sampling)

        profile = profile_step(run, temporary.num_bytes, utilization, graph_reserve_bytes, self.device)
        del temporary
        torch.cuda.empty_cache()
        num_blocks = blocks_for_memory(self.config, self.block_size, self.dtype, profile.kv_budget_bytes)
        if num_blocks < 2:
            raise RuntimeError(f"no room for the KV cache: {profile.summary()}")
        return num_blocks


def _sampled_rank(chunks: Sequence[ScheduledChunk]) -> list[int]:
    """Chunk index -> its row among the sampled chunks (the eager path's logits rows)."""
    rank, n = [], 0
    for chunk in chunks:
        rank.append(n)
        n += chunk.sample
    return rank
