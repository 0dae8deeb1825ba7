"""Engine: builds the stages, joins them with bounded channels, and runs them.

    async with Engine(EngineConfig(model="dummy:tiny")) as engine:
        async for out in engine.generate("Hello", SamplingParams(max_tokens=8)):
            print(out.text, end="")

The HTTP app uses the same object: `engine.ingress` prepares a request, `engine.submit(prepared)`
admits it (or raises a 503 ApiError at once) and returns its Reply, which the caller reads (after
the grammar compile it was queued beside, if any: pipeline/pending_grammar.py). The
admitted requests live in LiveRequests (pipeline/live_requests.py).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import deque
from typing import AsyncIterator, Callable

from emitter.reply import Reply
from ingress.prepared import PreparedRequest
from pipeline.build import BuiltModel, build_model
from pipeline.config import EngineConfig
from pipeline.health import EngineHealth
from pipeline.kv_event_log import KvEventLog, attach_kv_event_log
from pipeline.metrics import EngineMetrics
from pipeline.own_thread import run_in_own_thread
from pipeline.pending_grammar import await_pending_grammar
from pipeline.profiler import TorchProfiler
from pipeline.live_requests import LiveRequests
from observe.otlp_export import OtlpTraceExport, server_span_attributes
from observe.otlp_settings import resolve_traces_endpoint
from observe.traceparent import valid_traceparent
from pipeline.wiring import PipelineStages, wire_stages
from protocol.errors import bad_request, overloaded
from protocol.request_id import new_request_id
from router.request_key import prompt_text
from protocol.requests.context_length import check_context_length
from stages.messages import RequestOutput
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
        self.requests: LiveRequests | None = None  # the admitted requests, once started
        self.on_fatal: Callable[[str], None] | None = None  # set by the server: exit non-zero
        self._housekeeping: asyncio.Task[None] | None = None
        self.start_error: BaseException | None = None
        self.trace_export: OtlpTraceExport | None = None  # OpenTelemetry spans, when a collector is named
        self.kv_events: KvEventLog | None = None  # what the KV cache holds, for routers (once started)

    # ---- life cycle -------------------------------------------------------------------------
    async def start(self) -> None:
        t0 = time.perf_counter()
        otlp_endpoint = resolve_traces_endpoint(self.config.otlp_traces_endpoint)  # refuses before the build
        # On CPU the model is built on a thread that ends, so that the launch thread's OpenMP team
        # is the only one (pipeline/own_thread.py). A GPU server builds as it always has: there an
        # executor thread's idle team keeps libgomp from spinning on the host's cores.
        build = run_in_own_thread if self.config.resolved_device() == "cpu" else asyncio.to_thread
        self.built = built = await build(build_model, self.config)
        if built.parallel is not None:  # a lost worker rank breaks the engine like a failed step
            loop = asyncio.get_running_loop()
            built.parallel.watch(lambda reason: loop.call_soon_threadsafe(self._on_engine_error, reason))
        cfg = self.config
        self.pipeline = wire_stages(built, cfg, self._on_engine_error, lambda s, out: self.requests.finished(s, out))
        self.ingress, self.scheduler_stage = self.pipeline.ingress, self.pipeline.scheduler
        self.gpu_stage, self.emitter_stage = self.pipeline.gpu, self.pipeline.emitter
        if otlp_endpoint is not None:
            self.trace_export = OtlpTraceExport(otlp_endpoint, server_span_attributes(built, self.model_name))
        tiers = built.scheduler.tiers
        self.kv_events = attach_kv_event_log(built.scheduler.kv.pool, cfg.block_size,
                                             tiers.host if tiers.enabled else None)
        sinks = (lambda trace: self.kv_events.finished(trace.request_id),)
        if self.trace_export is not None:
            sinks += (self.trace_export.submit,)
        self.requests = LiveRequests(cfg, built.tokenizer, self.scheduler_stage.inbox, self.metrics, self.traces,
                                     sinks)
        for stage in self.stages:
            stage.start()
        await self.gpu_stage.wait_warm()  # ready means a first request pays for no warm-up
        self._housekeeping = asyncio.create_task(self.requests.housekeep(), name="engine:housekeeping")
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
        while self.num_active and time.monotonic() < deadline and self.scheduler_stage.running:
            await asyncio.sleep(0.01)
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        for stage in self.stages:
            await stage.stop()
        self.ingress.close()
        if self.trace_export is not None:
            await asyncio.to_thread(self.trace_export.close)
        if self.built is not None and self.built.grammars is not None:
            self.built.grammars.close()
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
        return new_request_id(prefix)

    def submit(self, prepared: PreparedRequest) -> Reply:
        """Admit a prepared request, all its sequences or none, and return its reply; raises ApiError
        at once: 503 overloaded or not ready, 400 a duplicate id or more sequences than the server
        ever runs and queues."""
        if not self.health.ready:
            raise overloaded(1, f"the server is {self.health.state}: not accepting requests")
        return self.requests.submit(prepared)

    @property
    def num_active(self) -> int:
        """Requests admitted and not yet finished (running, queued, or finishing)."""
        return self.requests.num_active if self.requests is not None else 0

    def abort_all(self, reason: str = "abort") -> None:
        if self.requests is not None:
            self.requests.abort_all(reason)

    def abort(self, request_id: str, reason: str = "abort") -> None:
        """Cancellation is a message: the scheduler frees the request's blocks within a step."""
        if self.requests is not None:
            self.requests.abort(request_id, reason)

    async def generate(
        self, prompt: str | list[int], params: SamplingParams, request_id: str | None = None, n: int = 1,
        traceparent: str | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """The embedding API: yields one RequestOutput per step and choice until the reply ends.
        With n > 1 the n choices' outputs interleave, each with its `index`; the iteration ends
        when every choice has finished. `traceparent` is the caller's W3C trace context (the
        header's value, e.g. from `opentelemetry.propagate.inject`): the request's exported spans
        join the caller's trace under that span, as an HTTP caller's do. A value that is not a
        valid traceparent is ignored, as the recommendation asks, and the request starts a trace
        of its own."""
        if self.pipeline is None:
            raise RuntimeError("the engine is not started: use `async with Engine(config) as engine:` "
                               "or `await engine.start()` first")
        if traceparent is not None and not isinstance(traceparent, str):
            raise TypeError(f"traceparent is the header's text (str), not {type(traceparent).__name__}")
        rid = request_id or self.new_request_id()
        trace = RequestTrace(rid)
        if (caller := valid_traceparent(traceparent)) is not None:
            trace.info["traceparent"] = caller
        trace.mark("received")
        trace.mark("parsed")
        if n < 1:
            raise bad_request(f"'n' must be at least 1, got {n}", "n")
        grammar = self.ingress.start_grammar(params)  # compiled beside the tokenizing and the prefill
        ids = await self.ingress.encode_prompt(prompt, trace)
        if not ids:
            raise bad_request("the prompt is empty", "prompt")
        max_tokens = check_context_length(len(ids), params.max_tokens, self.built.max_model_len)
        params = dataclasses.replace(params, max_tokens=max_tokens)
        prepared = PreparedRequest(rid, [ids], params, trace, n)
        if grammar is not None:
            prepared.grammar_pending = await self.ingress.settle_grammar(grammar, params)
        reply = self.submit(prepared)
        if self.kv_events is not None and self.kv_events.subscribed:  # a router reads what the cache holds
            self.kv_events.admitted(rid, prompt_text({"prompt": prompt}), ids, None)
        if prepared.grammar_pending is not None:  # queued beside its grammar's compile: a 400 if it fails
            await await_pending_grammar(reply, prepared, self.ingress)
        num_left = n
        try:
            while num_left:
                out = await reply.get()
                reply.written(out)
                yield out
                if out.finish_reason is not None:
                    num_left -= 1
        finally:
            reply.abort()
            reply.close()

    # ---- internals --------------------------------------------------------------------------
    def _on_engine_error(self, message: str) -> None:
        log.error("engine failure: %s", message)
        self.health.set_broken(message)
        if self.requests is not None:
            self.requests.fail_all(f"engine failure: {message}")
        if self.on_fatal is not None:
            self.on_fatal(message)
