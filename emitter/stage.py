"""EmitterStage: turns each step's token events into text deltas on the requests' own streams.

One call per step; per request one RequestOutput (one flush) per step: one pass over the step's
requests does their detokenizing and stop-string matching; the readers frame and write (the
protocol room turns outputs into bytes). The requests admitted since the last step arrive with the
step's events and are registered first. A stop string found here ends the reply at once and sends
Abort(reason="stop") upstream so the scheduler frees the blocks.

It runs inside the scheduler's task, as the ingress runs inside the handler's: the scheduler calls
`deliver` with a step's events once it has sent the next step to the device. Both live on the event
loop's one thread, so an inbox and a task of its own would overlap nothing and would cost every
token an event-loop turn between the step's result and the socket write. Nothing here waits, so
nothing queues here: a reader's own stream is the bounded buffer (emitter/output_stream.py).

It also counts the tokens the engine produced (/metrics' prompt and generation token counters, read
at scrape time): in the pass it makes anyway, one add per event and step, nothing per token.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from emitter.output_stream import OutputStream
from emitter.request_emitter import RequestEmitter
from stages.channel import Channel
from stages.messages import Abort, RequestOutput, StepEvents
from stages.trace import cpu_clock_ns, host_clock_ns


@dataclass(slots=True)
class _Entry:
    stream: OutputStream
    emitter: RequestEmitter


class EmitterStage:
    def __init__(
        self,
        scheduler_inbox: Channel,
        on_finished: Callable[[OutputStream, RequestOutput], None],
    ) -> None:
        self.scheduler_inbox = scheduler_inbox
        self.on_finished = on_finished
        self._entries: dict[str, _Entry] = {}
        self.num_generation_tokens = 0  # since start: tokens sampled, every event's
        self.num_prompt_tokens = 0  # since start: the prompts of requests that got their first token

    def register(self, stream: OutputStream, emitter: RequestEmitter) -> None:
        self._entries[stream.request_id] = _Entry(stream, emitter)

    def deliver(self, msg: StepEvents) -> None:
        """One step's events onto their streams (the scheduler's call, in its task)."""
        for admission in msg.admitted:
            for stream, emitter in admission.outputs:
                self.register(stream, emitter)
        entries = self._entries
        c0, t0 = cpu_clock_ns(), host_clock_ns()
        traces = []
        finished: list[tuple[_Entry, RequestOutput]] = []
        num_generated = num_prompt = 0
        for event in msg.events:
            # Counted whether or not a reader is left: the engine did the work.
            num_new = len(event.token_ids)
            num_generated += num_new
            if num_new and event.num_output_tokens == num_new:  # the request's first tokens
                num_prompt += event.num_prompt_tokens
            entry = entries.get(event.request_id)
            if entry is None:
                continue  # its reader is gone (disconnect): nothing to deliver
            emitter, stream = entry.emitter, entry.stream
            traces.append(stream.trace)
            out = emitter.on_event(event)
            if out is None:
                continue
            stream.push(out)
            if emitter.stopped_by_string and event.finish_reason is None:
                # The reply ended here; the scheduler still runs it: free its blocks now. Past the
                # inbox's bound, because this runs in the scheduler's own task, which must not wait
                # on its own inbox. Bounded all the same: at most one per admitted request,
                # since a stop string finishes the output, so the entry goes in this pass and the
                # request's later events find none (tests/emitter/test_emitter_stage.py).
                self.scheduler_inbox.force_put(Abort(event.request_id, reason="stop"))
            if out.finish_reason is not None:
                entries.pop(event.request_id, None)
                finished.append((entry, out))
        self.num_generation_tokens += num_generated
        self.num_prompt_tokens += num_prompt
        if traces:
            # The step's emit work (detokenize, hold-back, hand-off), shared evenly by
            # its events: two clock reads per step, not per token (the CPU clock is a system call).
            cpu_ns = (cpu_clock_ns() - c0) // len(traces)
            wall_ns = (host_clock_ns() - t0) // len(traces)
            for trace in traces:
                trace.add_host("emit", cpu_ns, wall_ns)
        for entry, out in finished:  # after the charge: their metrics see this step's share
            self.on_finished(entry.stream, out)
