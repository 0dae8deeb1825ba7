"""EmitterStage: turns each step's token events into text deltas on the requests' own streams.

One message per step; per request one RequestOutput (one flush) per step. A stop string found here
ends the reply at once and sends Abort(reason="stop") upstream so the scheduler frees the blocks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from emitter.output_stream import OutputStream
from emitter.request_emitter import RequestEmitter
from stages.channel import Channel
from stages.messages import Abort, RequestOutput, StepEvents
from stages.stage import Stage
from stages.trace import host_clock_ns


@dataclass(slots=True)
class _Entry:
    stream: OutputStream
    emitter: RequestEmitter


class EmitterStage(Stage[StepEvents]):
    def __init__(
        self,
        scheduler_inbox: Channel,
        inbox_size: int,
        on_finished: Callable[[OutputStream, RequestOutput], None],
    ) -> None:
        super().__init__("emitter", inbox_size)
        self.scheduler_inbox = scheduler_inbox
        self.on_finished = on_finished
        self._entries: dict[str, _Entry] = {}

    def register(self, stream: OutputStream, emitter: RequestEmitter) -> None:
        self._entries[stream.request_id] = _Entry(stream, emitter)

    def unregister(self, request_id: str) -> None:
        self._entries.pop(request_id, None)

    def streams(self) -> list[OutputStream]:
        return [e.stream for e in self._entries.values()]

    def fail_all(self, message: str) -> None:
        """The engine broke: every open stream ends with an error."""
        for rid, entry in list(self._entries.items()):
            out = RequestOutput(rid, "", [], finish_reason="error", error=message, index=entry.emitter.index)
            entry.stream.push(out)
            self._finish(rid, entry, out)

    async def handle(self, msg: StepEvents) -> None:
        entries = self._entries
        clock_ns = host_clock_ns
        for event in msg.events:
            entry = entries.get(event.request_id)
            if entry is None:
                continue  # its reader is gone (disconnect): nothing to deliver
            emitter, stream = entry.emitter, entry.stream
            t0 = clock_ns()
            out = emitter.on_event(event)
            stream.trace.add_host("emit", clock_ns() - t0)
            if out is None:
                continue
            stream.push(out)
            if emitter.stopped_by_string and event.finish_reason is None:
                # The reply ended here; the scheduler still runs it: free its blocks now.
                self.scheduler_inbox.force_put(Abort(event.request_id, reason="stop"))
            if out.finish_reason is not None:
                self._finish(event.request_id, entry, out)

    def _finish(self, request_id: str, entry: _Entry, out: RequestOutput) -> None:
        self._entries.pop(request_id, None)
        self.on_finished(entry.stream, out)
