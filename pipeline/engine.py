"""Engine: builds the stages, joins them with bounded channels, and runs them.

    async with Engine(EngineConfig(model="dummy:tiny")) as engine:
        async for out in engine.generate("Hello", SamplingParams(max_tokens=8)):
            print(out.text, end="")

The HTTP app uses the same object: `engine.ingress` prepares a request, `engine.submit` admits it
(or raises a 503 ApiError at once), and the caller reads the returned OutputStream.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections import deque
from typing import AsyncIterator, Callable

from emitter.output_stream import OutputStream
from emitter.sample_streams import SampleStreams
from emitter.request_emitter import RequestEmitter
from ingress.errors import bad_request, overloaded
from ingress.schemas import check_context_length
from pipeline.build import BuiltModel, build_model
from pipeline.config import EngineConfig
from pipeline.health import EngineHealth
from pipeline.metrics import EngineMetrics
from pipeline.own_thread import run_in_own_thread
from pipeline.profiler import TorchProfiler
from pipeline.samples import Sample, fan_out, split_prompts
from pipeline.wiring import PipelineStages, wire_stages
from stages.messages import Abort, GenerateRequest, RequestOutput
from stages.sampling import SamplingParams
from stages.trace import RequestTrace

log = logging.getLogger("ttft.engine")


class Engine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.health = EngineHealth()
        self.metrics = EngineMetrics()
        self.traces: deque[RequestTrace] = deque(maxlen=config.max_traces)
        # torch.profiler over HTTP (POST /start_profile, /stop_profile) when --profile-dir is set
        self.profiler = TorchProfiler(config.profile_dir) if config.profile_dir else None
        self.built: BuiltModel | None = None
        self.pipeline: PipelineStages | None = None  # the actors, once started
        self.on_fatal: Callable[[str], None] | None = None  # set by the server: exit non-zero
        self._active: dict[str, OutputStream] = {}
        self._deadlines: dict[str, int] = {}  # request_id -> perf_counter_ns deadline
        self._housekeeping: asyncio.Task[None] | None = None
        self.start_error: BaseException | None = None

    # ---- life cycle -------------------------------------------------------------------------
    async def start(self) -> None:
        t0 = time.perf_counter()
        # On CPU the model is built on a thread that ends, so that the launch thread's OpenMP team
        # is the only one (pipeline/own_thread.py). A GPU server builds as it always has: there an
        # executor thread's idle team keeps libgomp from spinning on the host's cores (measured
        # once with the CPU way: host overhead P99 at 64 clients 5.7 against 3.5 ms, s16-final).
        build = run_in_own_thread if self.config.resolved_device() == "cpu" else asyncio.to_thread
        self.built = built = await build(build_model, self.config)
        if built.parallel is not None:  # a lost worker rank breaks the engine like a failed step
            loop = asyncio.get_running_loop()
            built.parallel.watch(lambda reason: loop.call_soon_threadsafe(self._on_engine_error, reason))
        cfg = self.config
        self.pipeline = wire_stages(built, cfg, self._on_engine_error, self._on_finished)
        self.ingress, self.scheduler_stage = self.pipeline.ingress, self.pipeline.scheduler
        self.gpu_stage, self.emitter_stage = self.pipeline.gpu, self.pipeline.emitter
        for stage in self.stages:
            stage.start()
        await self.gpu_stage.wait_warm()  # ready means a first request pays for no warm-up
        self._housekeeping = asyncio.create_task(self._housekeep(), name="engine:housekeeping")
        self.metrics.bind(self)
        self.health.set_ready()
        log.info("engine ready in %.2f s: model %s, %d KV blocks of %d tokens, max_model_len %d",
                 time.perf_counter() - t0, built.model_name, built.num_blocks, cfg.block_size,
                 built.max_model_len)

    @property
    def stages(self) -> list:
        """The running actors, in stop order (see pipeline/wiring.py)."""
        return self.pipeline.all if self.pipeline is not None else []

    async def stop(self) -> None:
        self.health.set_stopping()
        self.abort_all("abort")
        deadline = time.monotonic() + 1.0
        while self._active and time.monotonic() < deadline and self.scheduler_stage.running:
            await asyncio.sleep(0.01)
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        for stage in self.stages:
            await stage.stop()
        self.ingress.close()
        if self.built is not None and self.built.parallel is not None:
            await asyncio.to_thread(self.built.parallel.close)  # the stop header, then the workers' exit

    async def __aenter__(self) -> "Engine":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ---- requests ---------------------------------------------------------------------------
    @property
    def model_name(self) -> str:
        assert self.built is not None
        return self.config.served_model_name or self.built.model_name

    @property
    def tokenizer(self):
        assert self.built is not None
        return self.built.tokenizer

    def new_request_id(self, prefix: str = "cmpl") -> str:
        return f"{prefix}-{uuid.uuid4().hex}"

    def submit(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        trace: RequestTrace,
        priority: int = 0,
        cache_salt: str | None = None,
    ) -> OutputStream:
        """Admit a prepared request, or raise ApiError (503 overloaded / not ready) at once."""
        return self.submit_samples(request_id, prompt_token_ids, params, trace, 1, priority, cache_salt)[0]

    def submit_samples(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        trace: RequestTrace,
        n: int = 1,
        priority: int = 0,
        cache_salt: str | None = None,
    ) -> list[OutputStream]:
        """Admit the n samples (choices) of a prepared request, all or none: stream i holds
        choice i. Raises ApiError (503 overloaded / not ready, 400 a duplicate id) at once."""
        return self.submit_batch(request_id, [prompt_token_ids], params, trace, n, priority, cache_salt)

    def submit_batch(
        self,
        request_id: str,
        prompts: list[list[int]],
        params: SamplingParams,
        trace: RequestTrace,
        n: int = 1,
        priority: int = 0,
        cache_salt: str | None = None,
    ) -> list[OutputStream]:
        """Admit every prompt of a batch, each with its n samples, all or none: stream k holds
        choice k (sample j of prompt i is choice i * n + j). Raises ApiError at once as
        submit_samples does, and 400 for a batch that could never fit the server's capacity."""
        if not self.health.ready:
            raise overloaded(1, f"the server is {self.health.state}: not accepting requests")
        groups = [(ids, fan_out(rid, params, prompt_trace, n))
                  for ids, (rid, prompt_trace) in zip(prompts, split_prompts(request_id, trace, prompts))]
        for _, samples in groups:
            for sample in samples:
                if sample.request_id in self._active:
                    raise bad_request(f"request id {sample.request_id!r} is already in use", "X-Request-Id")
        cfg = self.config
        capacity = cfg.max_num_seqs + cfg.max_queued
        num_seqs = len(prompts) * n
        if num_seqs > capacity:
            if len(prompts) == 1:
                raise bad_request(f"'n' is {n}; this server runs and queues at most {capacity} sequences", "n")
            raise bad_request(f"'prompt' holds {len(prompts)} prompts of {n} choices each: {num_seqs} sequences; "
                              f"this server runs and queues at most {capacity}", "prompt")
        if len(self._active) + num_seqs > capacity:
            self.metrics.count_outcome("rejected_overload")
            raise overloaded(1, "the server is at capacity (running and queued requests)")
        streams: list[OutputStream] = []
        for ids, samples in groups:
            for sample in samples:
                streams.append(self._submit_one(sample, len(streams), ids, priority, cache_salt))
        return streams

    def _submit_one(self, sample: Sample, index: int, prompt_token_ids: list[int], priority: int,
                    cache_salt: str | None) -> OutputStream:
        request_id, trace, params = sample.request_id, sample.trace, sample.params
        deadline_ns = None
        if self.config.request_timeout_s is not None:
            deadline_ns = time.perf_counter_ns() + int(self.config.request_timeout_s * 1e9)
            self._deadlines[request_id] = deadline_ns
        stream = OutputStream(request_id, trace, self.config.stream_buffer_items)
        first = prompt_token_ids[0] if params.prompt_logprobs is not None else None
        emitter = RequestEmitter(request_id, self.tokenizer, params, num_prompt_tokens=len(prompt_token_ids),
                                 index=index, first_prompt_token=first)
        self._active[request_id] = stream
        self.emitter_stage.register(stream, emitter)
        trace.mark("queued")
        self.scheduler_stage.inbox.force_put(  # bounded by the admission check above
            GenerateRequest(request_id, prompt_token_ids, params, trace, deadline_ns, priority, cache_salt,
                            leader_id=sample.leader_id)
        )
        return stream

    @property
    def num_active(self) -> int:
        """Requests admitted and not yet finished (running, queued, or finishing)."""
        return len(self._active)

    def abort_all(self, reason: str = "abort") -> None:
        for rid in list(self._active):
            self.abort(rid, reason)

    def abort(self, request_id: str, reason: str = "abort") -> None:
        """Cancellation is a message: the scheduler frees the request's blocks within a step."""
        if request_id in self._active and not self.scheduler_stage.inbox.closed:
            self.scheduler_stage.inbox.force_put(Abort(request_id, reason))

    def abort_streams(self, streams: list[OutputStream], reason: str = "abort") -> None:
        """Abort the samples of one request whose reply has not ended (all n on a disconnect)."""
        for stream in streams:
            if not stream.finished:
                self.abort(stream.request_id, reason)

    def record_write(self, stream: OutputStream, out: RequestOutput, whole_reply: bool = False) -> None:
        """Called by a reader right after it handed an output's bytes to its transport
        (`whole_reply`: the one write of a non-streamed reply)."""
        now = time.perf_counter_ns()
        if whole_reply or out.token_ids or out.text:
            self.metrics.observe_write(stream.trace, now, whole_reply)
            stream.trace.mark("first_token_written", now)

    async def generate(
        self, prompt: str | list[int], params: SamplingParams, request_id: str | None = None, n: int = 1,
    ) -> AsyncIterator[RequestOutput]:
        """The embedding API: yields one RequestOutput per step and choice until the reply ends.
        With n > 1 the n choices' outputs interleave, each with its `index`; the iteration ends
        when every choice has finished."""
        rid = request_id or self.new_request_id()
        trace = RequestTrace(rid)
        trace.mark("received")
        trace.mark("parsed")
        if n < 1:
            raise bad_request(f"'n' must be at least 1, got {n}", "n")
        ids = await self.ingress.encode_prompt(prompt, trace)
        if not ids:
            raise bad_request("the prompt is empty", "prompt")
        max_tokens = check_context_length(len(ids), params.max_tokens, self.built.max_model_len)
        params = dataclasses.replace(params, max_tokens=max_tokens)
        streams = self.submit_samples(rid, ids, params, trace, n)
        reader = streams[0] if n == 1 else SampleStreams(streams)
        num_left = n
        try:
            while num_left:
                out = await reader.get()
                self.record_write(streams[out.index], out)
                yield out
                if out.finish_reason is not None:
                    num_left -= 1
        finally:
            self.abort_streams(streams)

    # ---- internals --------------------------------------------------------------------------
    def _on_finished(self, stream: OutputStream, out: RequestOutput) -> None:
        self._active.pop(stream.request_id, None)
        self._deadlines.pop(stream.request_id, None)
        stream.trace.mark("finished")
        stream.trace.info["finish_reason"] = out.finish_reason
        stream.trace.info["num_output_tokens"] = out.num_output_tokens
        self.traces.append(stream.trace)
        self.metrics.observe_finished(stream.trace, out)

    def _on_engine_error(self, message: str) -> None:
        log.error("engine failure: %s", message)
        self.health.set_broken(message)
        self.emitter_stage.fail_all(f"engine failure: {message}")
        if self.on_fatal is not None:
            self.on_fatal(message)

    async def _housekeep(self) -> None:
        """Deadlines and stalled readers, checked a few times a second (cheap: one pass)."""
        stall_ns = int(self.config.stream_stall_timeout_s * 1e9)
        while True:
            await asyncio.sleep(0.1)
            now = time.perf_counter_ns()
            for rid, stream in list(self._active.items()):
                if stream.stalled_since_ns is not None and now - stream.stalled_since_ns > stall_ns:
                    self.abort(rid, "abort")
                elif rid in self._deadlines and now > self._deadlines[rid]:
                    self.abort(rid, "timeout")
