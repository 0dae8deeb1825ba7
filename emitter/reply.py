"""Reply: what the engine hands back for one admitted request, its choices' streams read as one.

Stream k holds choice k (sample j of prompt i of a batch is choice i * n + j). `get` is the reader's
own method (one stream's, or SampleStreams' round robin over n), bound once, so that reading a token
costs what reading the stream costs. The reader reports each output it handed to its transport
(`written`: the engine stamps "first token written" then) and aborts what is left of the reply when
it stops reading (`abort`: a disconnect, an error, or an embedder leaving early), and closes it
when it is done with it, whether or not it wrote every output (`close`: the trace of a request
whose first token was never written ends then).
"""
from __future__ import annotations

from typing import Awaitable, Callable

from emitter.output_stream import OutputStream
from emitter.sample_streams import SampleStreams
from stages.messages import RequestOutput
from stages.trace import RequestTrace


class Reply:
    __slots__ = ("streams", "get", "_abort", "_on_written", "_on_closed")

    def __init__(
        self,
        streams: list[OutputStream],
        abort: Callable[[str, str], None],
        on_written: Callable[[OutputStream, RequestOutput, bool], None],
        on_closed: Callable[[OutputStream], None] | None = None,
    ) -> None:
        """`abort(request_id, reason)` stops one engine request; `on_written(stream, output)`
        records an output that reached the transport; `on_closed(stream)` a reader done with it."""
        assert streams
        self.streams = streams
        reader = streams[0] if len(streams) == 1 else SampleStreams(streams)
        self.get: Callable[[], Awaitable[RequestOutput]] = reader.get
        self._abort = abort
        self._on_written = on_written
        self._on_closed = on_closed

    @property
    def num_choices(self) -> int:
        return len(self.streams)

    def trace(self, index: int) -> RequestTrace:
        """Choice `index`'s trace."""
        return self.streams[index].trace

    def written(self, out: RequestOutput, whole_reply: bool = False) -> None:
        """The writer handed `out`'s bytes to its transport (`whole_reply`: the one write of a
        non-streamed reply, whose TTFT is its first token's sampling)."""
        self._on_written(self.streams[out.index], out, whole_reply)

    def abort(self, reason: str = "abort") -> None:
        """Abort every choice whose reply has not ended (all n on a disconnect)."""
        for stream in self.streams:
            if not stream.finished:
                self._abort(stream.request_id, reason)

    def close(self) -> None:
        """The reader is done with the reply (after its last write, or instead of it)."""
        if self._on_closed is not None:
            for stream in self.streams:
                self._on_closed(stream)
