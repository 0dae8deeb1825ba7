"""What one request measured, and the recorder that turns its SSE events into it.

Timing follows `vllm bench serve` so numbers compare, with one deliberate difference: TTFT is the first
chunk whose text is non-empty (PERFORMANCE.md), not the first chunk with `choices`, so a chat role
delta sent before any token does not count as a first token. Latency ends, as in vLLM, at the last
chunk that carries `choices` (the usage chunk and `[DONE]` do not extend it).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import orjson


@dataclass(slots=True)
class RequestSample:
    request_id: str
    prompt_len: int  # intended prompt tokens (the workload's count)
    max_tokens: int
    t_send_s: float = 0.0  # perf_counter just before sending; the runner rebases it on the run's start
    ttft_s: float | None = None
    latency_s: float | None = None
    chunk_times_s: list[float] = field(default_factory=list)  # content-chunk arrivals, from t_send
    output_tokens: int = 0  # usage.completion_tokens when sent, else the number of content chunks
    prompt_tokens: int | None = None  # usage.prompt_tokens when sent
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens when sent (prefix hits)
    output_chars: int = 0
    finish_reason: str | None = None
    status: int = 0  # HTTP status; 0 when the exchange did not complete (refused, timed out, cut)
    success: bool = False
    error: str = ""

    def itl_s(self) -> list[float]:
        """Gaps between consecutive content chunks."""
        t = self.chunk_times_s
        return [b - a for a, b in zip(t, t[1:])]

    def tpot_s(self) -> float | None:
        """Time per output token after the first; None when there is at most one output token."""
        if self.output_tokens <= 1 or self.latency_s is None or self.ttft_s is None:
            return None
        return (self.latency_s - self.ttft_s) / (self.output_tokens - 1)

    def to_json(self) -> dict:
        return asdict(self)


class StreamRecorder:
    """Feeds one request's SSE `data` payloads, each with the time its bytes arrived, into a sample."""

    def __init__(self, sample: RequestSample, chat: bool, keep_reply: bool = False) -> None:
        self.sample = sample
        self.chat = chat
        # keep_reply: keep the reply's text (and its ids where the server streams vLLM's
        # `token_ids`), for workloads that send it back in the next prompt (multi-turn)
        self.keep_reply = keep_reply
        self.reply_parts: list[str] = []
        self.reply_token_ids: list[int] = []
        self.done = False  # saw `data: [DONE]`
        self._t_last_choice: float | None = None
        self._usage_tokens: int | None = None

    def on_event(self, payload: bytes, t: float) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        s = self.sample
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError:
            s.error = s.error or f"bad JSON in stream: {payload[:200]!r}"
            return
        if not isinstance(data, dict):
            s.error = s.error or f"unexpected event: {payload[:200]!r}"
            return
        if choices := data.get("choices"):
            choice = choices[0]
            text = (choice.get("delta") or {}).get("content") if self.chat else choice.get("text")
            self._t_last_choice = t
            if text:
                s.chunk_times_s.append(t - s.t_send_s)
                s.output_chars += len(text)
                if self.keep_reply:
                    self.reply_parts.append(text)
            if self.keep_reply and isinstance(ids := choice.get("token_ids"), list):
                self.reply_token_ids.extend(ids)
            if choice.get("finish_reason"):
                s.finish_reason = choice["finish_reason"]
        elif err := data.get("error"):
            msg = err.get("message", err) if isinstance(err, dict) else err
            s.error = s.error or f"error in stream: {msg}"
        if usage := data.get("usage"):
            self._usage_tokens = usage.get("completion_tokens")
            s.prompt_tokens = usage.get("prompt_tokens")
            if isinstance(details := usage.get("prompt_tokens_details"), dict):
                s.cached_tokens = details.get("cached_tokens")

    def finish(self, status: int, t_end: float, error: str = "") -> RequestSample:
        """Close the sample: success needs HTTP 200, at least one content chunk and no error."""
        s = self.sample
        s.status = status
        s.error = s.error or error
        if not s.error and status == 200 and not s.chunk_times_s:
            s.error = "no chunk with text received: TTFT undefined"
        s.success = not s.error and status == 200
        if s.chunk_times_s:
            s.ttft_s = s.chunk_times_s[0]
        t_last = self._t_last_choice if self._t_last_choice is not None else t_end
        s.latency_s = t_last - s.t_send_s
        s.output_tokens = self._usage_tokens if self._usage_tokens is not None else len(s.chunk_times_s)
        return s
