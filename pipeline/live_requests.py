"""LiveRequests: the engine's admitted requests, from admission to their last output.

Admission is one message. A PreparedRequest fans out into engine requests (a batch's prompts, each
with its n samples), admitted all or none against the capacity (running plus queued sequences), and
enters the pipeline as one Admission on the scheduler's inbox: its GenerateRequests for the
scheduler, and its streams and RequestEmitters, which the scheduler hands to the emitter ahead of
their first events. A full inbox is answered like a full server: 503 at once, nothing admitted.

Cancellation is a message too: an Abort per engine request, sent once (a disconnect, a stalled
reader, a deadline or a shutdown may all ask). It never passes the inbox's bound: when the inbox is
full it waits here and goes with the next housekeeping pass, a tenth of a second later.

A request's trace ends ("finished", then its metrics and sinks) when the engine is done with it,
unless its first token's bytes are still on their way: a whole reply is written after its last
token, and a streamed one whose first output is also its last is written after the engine's end.
Then the trace ends when the reader writes it, so that its edges stay in order, or when the reader
closes the reply without writing (the engine's end time), or, as a safety net, once the reader has
been silent for the stall timeout.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from emitter.output_stream import OutputStream
from emitter.reply import Reply
from emitter.request_emitter import RequestEmitter
from ingress.prepared import PreparedRequest
from ingress.tokenizer import Tokenizer
from pipeline.config import EngineConfig
from pipeline.metrics import EngineMetrics
from pipeline.samples import Sample, fan_out, split_prompts
from protocol.errors import bad_request, overloaded
from stages.channel import Channel
from stages.messages import Abort, Admission, GenerateRequest, RequestOutput
from stages.trace import RequestTrace

HOUSEKEEPING_S = 0.1


@dataclass(slots=True)
class _Live:
    stream: OutputStream
    index: int  # its choice in its reply
    deadline_ns: int | None  # perf_counter_ns after which it is aborted ("timeout")


class LiveRequests:
    def __init__(self, config: EngineConfig, tokenizer: Tokenizer, scheduler_inbox: Channel,
                 metrics: EngineMetrics, traces: deque[RequestTrace],
                 trace_sinks: tuple[Callable[[RequestTrace], None], ...] = ()) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.scheduler_inbox = scheduler_inbox
        self.metrics = metrics
        self.traces = traces  # finished requests' traces, the most recent kept
        self.trace_sinks = trace_sinks  # each gets every finished trace (the OpenTelemetry export)
        self._live: dict[str, _Live] = {}
        self._aborted: set[str] = set()  # an Abort was sent (or waits to be)
        self._unsent: dict[str, str] = {}  # request_id -> reason: Aborts that found the inbox full
        # Finished by the engine, the first token not yet written: request_id -> (stream, its last
        # output, the engine's end in perf_counter_ns). The readers done early (closed) are noted
        # while their request is live, so that its end is not held for them.
        self._unwritten: dict[str, tuple[OutputStream, RequestOutput, int]] = {}
        self._closed_readers: set[str] = set()

    @property
    def num_active(self) -> int:
        """Requests admitted and not yet finished (running, queued, or finishing)."""
        return len(self._live)

    def submit(self, prepared: PreparedRequest) -> Reply:
        """Admit every sequence of the request or none; raises ApiError (400 a duplicate id or a
        request that could never fit, 503 at capacity) at once."""
        prompts, n = prepared.prompts_token_ids, prepared.n
        groups = [(ids, fan_out(rid, prepared.params, trace, n))
                  for ids, (rid, trace) in zip(prompts, split_prompts(prepared.request_id, prepared.trace, prompts))]
        for _, samples in groups:
            for sample in samples:
                if sample.request_id in self._live:
                    raise bad_request(f"request id {sample.request_id!r} is already in use", "X-Request-Id")
        capacity = self.config.max_num_seqs + self.config.max_queued
        num_seqs = len(prompts) * n
        if num_seqs > capacity:
            if len(prompts) == 1:
                raise bad_request(f"'n' is {n}; this server runs and queues at most {capacity} sequences", "n")
            raise bad_request(f"'prompt' holds {len(prompts)} prompts of {n} choices each: {num_seqs} sequences; "
                              f"this server runs and queues at most {capacity}", "prompt")
        if len(self._live) + num_seqs > capacity:
            self.metrics.count_outcome("rejected_overload")
            raise overloaded(1, "the server is at capacity (running and queued requests)")
        admission = Admission([], [])
        for ids, samples in groups:
            for sample in samples:
                self._open(admission, sample, ids, prepared)
        if not self.scheduler_inbox.put_nowait(admission):
            for request in admission.requests:
                del self._live[request.request_id]
            self.metrics.count_outcome("rejected_overload")
            raise overloaded(1, "the server is at capacity (its scheduler's inbox is full)")
        return Reply([stream for stream, _ in admission.outputs], self.abort, self.written, self.closed)

    def _open(self, admission: Admission, sample: Sample, prompt: list[int], prepared: PreparedRequest) -> None:
        """One engine request into the admission: its stream, its emitter, its GenerateRequest."""
        request_id, trace, params = sample.request_id, sample.trace, sample.params
        index = len(admission.requests)
        deadline_ns = None
        if self.config.request_timeout_s is not None:
            deadline_ns = time.perf_counter_ns() + int(self.config.request_timeout_s * 1e9)
        stream = OutputStream(request_id, trace, self.config.stream_buffer_items)
        first = prompt[0] if params.prompt_logprobs is not None else None
        emitter = RequestEmitter(request_id, self.tokenizer, params, num_prompt_tokens=len(prompt), index=index,
                                 first_prompt_token=first)
        self._live[request_id] = _Live(stream, index, deadline_ns)
        trace.mark("queued")
        admission.requests.append(GenerateRequest(request_id, prompt, params, trace, deadline_ns, prepared.priority,
                                                  prepared.cache_salt, leader_id=sample.leader_id,
                                                  sampling_gate=prepared.grammar_pending))
        admission.outputs.append((stream, emitter))

    def abort(self, request_id: str, reason: str = "abort") -> None:
        """Cancellation is a message: the scheduler frees the request's blocks within a step."""
        if request_id not in self._live or request_id in self._aborted or self.scheduler_inbox.closed:
            return
        self._aborted.add(request_id)
        if not self.scheduler_inbox.put_nowait(Abort(request_id, reason)):
            self._unsent[request_id] = reason

    def abort_all(self, reason: str = "abort") -> None:
        for request_id in list(self._live):
            self.abort(request_id, reason)

    def written(self, stream: OutputStream, out: RequestOutput, whole_reply: bool = False) -> None:
        """Called by a reader right after it handed an output's bytes to its transport
        (`whole_reply`: the one write of a non-streamed reply)."""
        now = time.perf_counter_ns()
        if whole_reply or out.token_ids or out.text:
            self.metrics.observe_write(stream.trace, now, whole_reply)
            stream.trace.mark("first_token_written", now)
            if (ending := self._unwritten.pop(stream.request_id, None)) is not None:
                self._end_trace(ending[0], ending[1], now)

    def closed(self, stream: OutputStream) -> None:
        """The reader is done with the stream (whatever it wrote): a trace still waiting for its
        first token's write ends at the engine's end."""
        request_id = stream.request_id
        if (ending := self._unwritten.pop(request_id, None)) is not None:
            self._end_trace(*ending)
        elif request_id in self._live:
            self._closed_readers.add(request_id)

    def finished(self, stream: OutputStream, out: RequestOutput) -> None:
        """The request's last output is out (the emitter's word, or fail_all's)."""
        request_id = stream.request_id
        if self._live.pop(request_id, None) is None:
            return  # already ended (an engine failure ended it first)
        self._aborted.discard(request_id)
        self._unsent.pop(request_id, None)
        now = time.perf_counter_ns()
        reader_left = request_id in self._closed_readers
        self._closed_readers.discard(request_id)
        if out.num_output_tokens and "first_token_written" not in stream.trace.marks_ns and not reader_left:
            self._unwritten[request_id] = (stream, out, now)  # its first token's write ends it
            return
        self._end_trace(stream, out, now)

    def _end_trace(self, stream: OutputStream, out: RequestOutput, at_ns: int) -> None:
        """Mark the request's trace finished at `at_ns`, and hand it to the metrics and sinks."""
        stream.trace.mark("finished", at_ns)
        stream.trace.info["finish_reason"] = out.finish_reason
        stream.trace.info["num_output_tokens"] = out.num_output_tokens
        stream.trace.info["num_cached_tokens"] = out.num_cached_tokens
        if out.error is not None:
            stream.trace.info["error"] = out.error
        self.traces.append(stream.trace)
        self.metrics.observe_finished(stream.trace, out)
        for sink in self.trace_sinks:
            sink(stream.trace)

    def fail_all(self, message: str) -> None:
        """The engine broke: every open reply ends with an error, whichever actor its request is in."""
        for request_id, live in list(self._live.items()):
            out = RequestOutput(request_id, "", [], finish_reason="error", error=message, index=live.index)
            live.stream.push(out)
            self.finished(live.stream, out)

    async def housekeep(self) -> None:
        """Aborts that waited for room, deadlines and stalled readers, a few times a second (one pass)."""
        stall_ns = int(self.config.stream_stall_timeout_s * 1e9)
        while True:
            await asyncio.sleep(HOUSEKEEPING_S)
            for request_id, reason in list(self._unsent.items()):
                if self.scheduler_inbox.closed or self.scheduler_inbox.put_nowait(Abort(request_id, reason)):
                    del self._unsent[request_id]
            now = time.perf_counter_ns()
            for request_id, (stream, out, end_ns) in list(self._unwritten.items()):
                if now - end_ns > stall_ns:  # a reader that neither wrote nor closed: end it anyway
                    del self._unwritten[request_id]
                    self._end_trace(stream, out, end_ns)
            for request_id, live in list(self._live.items()):
                stalled = live.stream.stalled_since_ns
                if stalled is not None and now - stalled > stall_ns:
                    self.abort(request_id, "abort")
                elif live.deadline_ns is not None and now > live.deadline_ns:
                    self.abort(request_id, "timeout")
