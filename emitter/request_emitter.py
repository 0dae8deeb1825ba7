"""RequestEmitter: one request's TokenEvents in, the RequestOutput deltas to flush out.

Combines the incremental detokenizer, the stop-string matcher and logprob text conversion; the
EmitterStage owns one per live request and calls `on_event` once per step. Tokens are processed one
at a time so that, when a stop string completes, the output's token ids, logprobs and token count
end exactly at the token that completed it (a step may carry several tokens).

Stop-string end: `stopped_by_string` becomes True, the output carries finish_reason "stop", and the
stage sends Abort(reason="stop") upstream; events still in flight for the request are then ignored.
Stop-token end (EOS or `stop_token_ids`, reported as finish_reason "stop" with that token last): the
token counts but its text is not emitted unless `include_stop_str_in_output` (as vLLM does).
Stop strings are only looked for from the `min_tokens`-th generated token on (as in vLLM).
"""
from __future__ import annotations

from emitter.detokenizer import IncrementalDetokenizer
from emitter.stop_matcher import StopMatcher
from ingress.tokenizer import Tokenizer
from stages.messages import PromptLogprob, PromptScores, RequestOutput, SampledToken, TokenEvent, TokenLogprob
from stages.sampling import SamplingParams


class RequestEmitter:
    """One per live request, owned by the EmitterStage."""

    __slots__ = ("request_id", "index", "params", "_tokenizer", "_detok", "_stop", "_stop_token_ids",
                 "num_prompt_tokens", "num_cached_tokens", "num_output_tokens", "stopped_by_string", "finished",
                 "finish_reason", "_held_ids", "_plain", "_first_prompt_token")  # as OutputStream's

    def __init__(
        self, request_id: str, tokenizer: Tokenizer, params: SamplingParams, num_prompt_tokens: int = 0,
        index: int = 0, first_prompt_token: int | None = None,
    ) -> None:
        """`first_prompt_token`: prompt token 0, for a request that asked for prompt logprobs."""
        self.request_id = request_id
        self.index = index  # its choice among the n samples of one request
        self.params = params
        self._tokenizer = tokenizer
        self._detok = IncrementalDetokenizer(tokenizer, params.skip_special_tokens)
        self._stop = (
            StopMatcher(params.stop, params.include_stop_str_in_output) if params.stop else None
        )
        self._stop_token_ids = frozenset(params.stop_token_ids) | (
            frozenset() if params.ignore_eos else tokenizer.eos_token_ids
        )
        self.num_prompt_tokens = num_prompt_tokens
        self.num_cached_tokens = 0
        self.num_output_tokens = 0
        self.stopped_by_string = False
        self.finished = False
        self.finish_reason: str | None = None
        self._held_ids: list[int] = []  # ids of steps that produced no flush yet
        # No stop strings, no logprobs: a step's single token needs no matcher and no logprob
        # text, which is the common case on_event handles first.
        self._plain = self._stop is None and params.logprobs is None and params.prompt_logprobs is None
        self._first_prompt_token = first_prompt_token

    @property
    def stop_string(self) -> str | None:
        """The stop string that ended the reply, if one did."""
        return None if self._stop is None else self._stop.matched

    def on_event(self, ev: TokenEvent) -> RequestOutput | None:
        """The delta to flush for this step, or None when there is nothing to send."""
        assert ev.request_id == self.request_id, (ev.request_id, self.request_id)
        if self.finished:
            return None  # tokens of steps in flight after a stop string, or a late duplicate end
        if ev.num_prompt_tokens:
            self.num_prompt_tokens = ev.num_prompt_tokens
        if ev.num_cached_tokens:
            self.num_cached_tokens = ev.num_cached_tokens

        token_ids = ev.token_ids
        if self._plain and ev.finish_reason is None and ev.error is None and len(token_ids) == 1:
            return self._plain_token(token_ids[0], ev.error_status)
        num_text_tokens = len(token_ids)
        if (
            ev.finish_reason == "stop"
            and token_ids
            and token_ids[-1] in self._stop_token_ids
            and not self.params.include_stop_str_in_output
        ):
            num_text_tokens -= 1  # a stop token's text is not part of the reply

        parts: list[str] = []
        num_taken = 0
        for i, token_id in enumerate(token_ids):
            num_taken += 1
            self.num_output_tokens += 1
            if i >= num_text_tokens:
                continue
            text = self._detok.push_one(token_id)
            if self._stop is None or self.num_output_tokens < self.params.min_tokens:
                if text:
                    parts.append(text)
                continue
            safe, hit = self._stop.push(text)
            if safe:
                parts.append(safe)
            if hit:
                self.stopped_by_string = True
                break

        finish_reason = "stop" if self.stopped_by_string else ev.finish_reason
        if finish_reason is not None:
            self.finished = True
            self.finish_reason = finish_reason
            if not self.stopped_by_string:
                parts.append(self._detok.finish())  # drops an incomplete trailing character
                if self._stop is not None:
                    parts.append(self._stop.flush())

        logprobs = self._logprobs(ev.logprobs, num_taken)
        prompt = None if ev.prompt_logprobs is None else self._prompt_scores(ev.prompt_logprobs)
        text = "".join(parts)
        taken = self._held_ids + list(token_ids[:num_taken])
        if not text and finish_reason is None and not logprobs and ev.error is None and prompt is None:
            # Nothing to show yet (a special token, half a character, held-back text): the ids ride
            # with the next flush, so the stream's token ids are always complete.
            self._held_ids = taken
            return None
        self._held_ids = []
        return RequestOutput(
            request_id=self.request_id,
            text=text,
            token_ids=taken,
            finish_reason=finish_reason,
            logprobs=logprobs,
            num_prompt_tokens=self.num_prompt_tokens,
            num_output_tokens=self.num_output_tokens,
            num_cached_tokens=self.num_cached_tokens,
            error=ev.error,
            error_status=ev.error_status,
            index=self.index,
            prompt_logprobs=prompt,
        )

    def _plain_token(self, token_id: int, error_status: int) -> RequestOutput | None:
        """on_event for one token of an unfinished plain request (same result, fewer steps)."""
        self.num_output_tokens += 1
        text = self._detok.push_one(token_id)
        held = self._held_ids  # never handed out: outputs get a copy
        if not text:
            held.append(token_id)
            return None
        if held:
            self._held_ids = []
            taken = held + [token_id]
        else:
            taken = [token_id]
        # Positional: (request_id, text, token_ids, finish_reason, logprobs, num_prompt_tokens,
        # num_output_tokens, num_cached_tokens, error, error_status, index).
        return RequestOutput(self.request_id, text, taken, None, None, self.num_prompt_tokens,
                             self.num_output_tokens, self.num_cached_tokens, None, error_status, self.index)

    def _logprobs(self, sampled: list[SampledToken] | None, num_taken: int) -> list[TokenLogprob] | None:
        if self.params.logprobs is None or sampled is None:
            return None
        return [self._token_logprob(s) for s in sampled[:num_taken]]

    def _token_logprob(self, s: SampledToken) -> TokenLogprob:
        assert s.logprob is not None, "logprobs were asked for but the sampler gave none"
        top = s.top_logprobs or ()
        return TokenLogprob(
            token=self.token_text(s.token_id),
            token_id=s.token_id,
            logprob=s.logprob,
            top=[(self.token_text(tid), tid, lp) for tid, lp in top],
        )

    def _prompt_scores(self, scores: list[PromptLogprob]) -> PromptScores:
        first = self._first_prompt_token if self._first_prompt_token is not None else 0
        text = self.token_text
        positions = [TokenLogprob(text(s.token_id), s.token_id, s.logprob,
                                  [(text(tid), tid, lp) for tid, lp in s.top], s.rank) for s in scores]
        return PromptScores(text(first), first, positions)

    def token_text(self, token_id: int) -> str:
        """One token's own text, for logprobs: a partial character shows as U+FFFD."""
        return self._tokenizer.token_bytes(token_id).decode("utf-8", errors="replace")
