"""StepResults: a step's result applied to the scheduler's requests, and the one way out of them.

Each chunk's request advances its computed tokens and appends its sampled token; a token that may
end the request (a stop id, a length limit) decides its finish reason; a request that ends leaves
by `retire`, the one exit (an abort too), which frees its blocks and claim once. A result for a
request aborted while its step was in flight is dropped (its step id no longer heads its
in-flight list).

A row that carried a step hook's guesses (scheduler/step_hooks.py) appends the run its hooks
leave, one token at a time, and gives back the blocks of the guesses that were wrong.

The Scheduler owns one and gives it, once, the collaborators it works with (shared with the
scheduler and never replaced): the block tables (KVManager), the shadow, the tiers, the output
length predictor and the step hooks. The requests are not among them: `apply` and `retire` are
handed the scheduler's RequestTable. It keeps the ids of the requests that ended since the last
batch, which the GPU stage must forget.
"""
from __future__ import annotations

from scheduler.config import SchedulerConfig
from scheduler.finish import finish_reason
from scheduler.kv_manager import KVManager
from scheduler.kv_tiers.manager import KvTierManager
from scheduler.kv_tiers.no_tiers import NoTiers
from scheduler.predictor import OutputLengthPredictor
from scheduler.request_state import RequestState, RequestStatus
from scheduler.request_table import RequestTable
from scheduler.shadow import ShadowAdmission
from scheduler.step_hooks import StepHooks
from stages.messages import SampledToken, ScheduledChunk, StepBatch, StepResult, TokenEvent
from stages.trace import RequestTrace


def _mark_prefill_done(trace: RequestTrace, result: StepResult) -> None:
    """The step that completed the prompt, on the GPU stage's clock where it ran there (taken up
    by its launch thread, its work queued on the device, its sampled ids on the host), then now:
    the scheduler has its result."""
    if result.started_ns:
        trace.mark("prefill_step_started", result.started_ns)
        trace.mark("prefill_step_launched", result.launched_ns)
        trace.mark("prefill_step_synced", result.synced_ns)
    trace.mark("prefill_done")


class StepResults:
    def __init__(self, config: SchedulerConfig, kv: KVManager, shadow: ShadowAdmission,
                 tiers: KvTierManager | NoTiers, predictor: OutputLengthPredictor,
                 hooks: StepHooks | None = None) -> None:
        self._block_size = config.block_size
        self._caching = config.enable_prefix_caching
        self._eos_token_ids = config.eos_token_ids
        self._max_model_len = config.max_model_len
        self.kv = kv
        self.shadow = shadow
        self.tiers = tiers
        self.predictor = predictor
        self.hooks = hooks if hooks is not None else StepHooks()
        self.finished_ids: list[str] = []  # ended since the last batch, known to the GPU stage

    def take_finished_ids(self) -> list[str]:
        """The ids that ended since the last call (they ride the next batch)."""
        out, self.finished_ids = self.finished_ids, []
        return out

    def apply(self, batch: StepBatch, result: StepResult, table: RequestTable) -> list[TokenEvent]:
        """Advance computed tokens, append samples, finish requests."""
        sampled = {s.request_id: s for s in result.sampled}
        failed = result.failed
        requests = table.requests
        hooks = self.hooks if self.hooks else None
        step_id = batch.step_id
        caching, block_size = self._caching, self._block_size
        events: list[TokenEvent] = []
        for chunk in batch.chunks:
            req = requests.get(chunk.request_id)
            if req is None:
                continue
            in_flight = req.in_flight
            if not in_flight or in_flight[0][0] != step_id:
                continue  # aborted (or ended) while its step was in flight: drop what it produced
            req.num_in_flight_tokens -= in_flight.pop(0)[1]
            req.in_flight_step = in_flight[-1][0] if in_flight else None
            failure = failed.get(req.request_id) if failed else None
            token = sampled.get(req.request_id) if chunk.sample else None
            if failure is None and chunk.sample and token is None:
                failure = "the step sampled no token for this request"
            if failure is not None:
                self.retire(req, "error", failure, table)
                events.append(self.event(req, [], None))
                continue
            if hooks is not None and token is not None:
                run = hooks.on_results(req, chunk, token, result)
                if req.num_guessed_in_flight:
                    events.append(self._apply_run(req, chunk, run, table))
                    continue
                assert len(run) == 1, "a row without guesses samples one token"
                token = run[0]
            # Advance the computed tokens (inline: once per request per step).
            before = req.num_computed_tokens
            after = req.num_computed_tokens = before + len(chunk.token_ids)
            if before < req.num_prompt_tokens <= after:  # the first crossing is the one traced
                _mark_prefill_done(req.request.trace, result)
            if caching and after // block_size > req.num_hashed_blocks:
                self.kv.cache_computed(req)  # only when a block has just been completed
            if token is not None:
                events.append(self._append_token(req, token, table))
        return events

    def _append_token(self, req: RequestState, token: SampledToken, table: RequestTable) -> TokenEvent:
        token_id = token.token_id
        token_ids = req.all_token_ids
        token_ids.append(token_id)
        num_tokens = len(token_ids)
        num_output = num_tokens - req.num_prompt_tokens
        if num_output == 1:
            req.request.trace.mark("first_token_sampled")
        if self._caching and num_tokens // self._block_size > len(req.block_hashes):
            self.kv.update_hashes(req)  # a block of known tokens just filled: hash it once
        params = req.params
        # finish_reason only for a token that may end the request: a stop id (before min_tokens
        # too, and EOS even when ignored: it decides) or one that reaches a length limit.
        if (num_output >= params.max_tokens or num_tokens >= self._max_model_len
                or token_id in self._eos_token_ids or token_id in params.stop_token_ids):
            reason = finish_reason(req, token_id, self._eos_token_ids, self._max_model_len)
            if reason is not None:
                self.retire(req, reason, None, table)
        # event()'s TokenEvent, inline (one per request per step).
        event = TokenEvent(req.request_id, [token_id], req.finish_reason,
                           None if params.logprobs is None else [token], req.num_prompt_tokens,
                           num_output, req.num_cached_tokens, req.error)
        if token.prompt_logprobs is not None:  # (the first token of a request that asked for them)
            event.prompt_logprobs = token.prompt_logprobs
        return event

    def _apply_run(self, req: RequestState, chunk: ScheduledChunk, run: list[SampledToken],
                   table: RequestTable) -> TokenEvent:
        """A row that carried guesses: its known tokens and the guesses its run accepted (one per
        token after the first) are computed, the blocks past them go back, and the run's tokens
        are appended one by one, so that a stop id or a length limit inside it ends the request
        exactly where it would have ended token by token (the rest is dropped)."""
        num_guessed = req.num_guessed_in_flight
        assert len(run) - 1 <= num_guessed, (req, len(run))
        req.num_guessed_in_flight = 0
        req.num_computed_tokens += len(chunk.token_ids) - num_guessed + len(run) - 1
        self.shadow.refund(req, self.kv.truncate(req, req.num_computed_tokens + req.num_in_flight_tokens))
        event = None
        for n, token in enumerate(run, 1):
            event = self._append_token(req, token, table)
            if req.finish_reason is not None:
                break
        assert event is not None
        if n > 1:  # one event for the run
            event.token_ids = [t.token_id for t in run[:n]]
            if event.logprobs is not None:
                event.logprobs = run[:n]
        if self._caching and req.finish_reason is None:
            self.kv.cache_computed(req)  # blocks the accepted run completed (now known and computed)
        return event

    def retire(self, req: RequestState, reason: str, error: str | None, table: RequestTable) -> None:
        """The one exit: out of its queue, blocks and claim freed once, forgotten. Natural ends
        teach the output-length predictor."""
        table.remove(req)
        if req.in_flight:  # its steps in flight write past the computed
            self.tiers.mark_dirty(req.block_ids[req.num_computed_tokens // self._block_size:], req.in_flight_step)
        self.kv.free(req)
        self.shadow.release(req)
        self.tiers.release(req)
        if reason in ("stop", "length"):
            self.predictor.observe(req.params.max_tokens, req.num_output_tokens)
        req.status = RequestStatus.FINISHED
        req.finish_reason, req.error = reason, error
        info = req.request.trace.info  # what a finished trace's spans are filtered by
        info["lane"], info["num_preemptions"] = ("long" if req.is_long else "short"), req.num_preemptions
        req.in_flight.clear()
        req.in_flight_step, req.num_in_flight_tokens = None, 0
        req.num_guessed_in_flight = 0
        if req.was_scheduled:
            self.finished_ids.append(req.request_id)

    def event(self, req: RequestState, token_ids: list[int], logprob: SampledToken | None) -> TokenEvent:
        # Positional: one is built per request per step (request_id, token_ids, finish_reason,
        # logprobs, num_prompt_tokens, num_output_tokens, num_cached_tokens, error).
        return TokenEvent(
            req.request_id, token_ids, req.finish_reason, None if logprob is None else [logprob],
            req.num_prompt_tokens, len(req.all_token_ids) - req.num_prompt_tokens,
            req.num_cached_tokens, req.error,
        )
