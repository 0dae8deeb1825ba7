"""GrammarHook: structured outputs' RunnerHook (gpu_stage/runner_hooks.py): it masks the logits of
every constrained row before the sampler draws, so that only tokens its grammar allows can come.

Timing. A step is launched before the previous one's tokens reach the host (async scheduling), and
a row's mask depends on them. The mask is needed only by the sampling, which the runner queues
after the step's forward: so `process_logits` (the launch thread, the forward already queued)
waits for the previous grammar step to be complete (its tokens recorded: `done`), reads each
constrained request's new output ids into its matcher, fills the host bitmask rows and queues one
non-blocking copy and the masking (bitmask.py) before the sampling. The host work overlaps the
device's forward; CUDA graphs replay as before (the mask is applied to their logits).

Hand-over. When the next step already waits for a step's tokens, that step's `done` (the completer
thread) holds its result until the next step's sampling is queued (`sampling_queued`), so that the
event loop, which takes the result next, runs the step's scheduler update and streams after the
masks, not against them: the GIL, held by a busy loop for up to the interpreter's switch interval
(5 ms) at each of the launch thread's releases (every torch call and mask fill releases it), made
the masks of a 64-stream step wait for the whole of the loop's work on the previous one, and the
device idle meanwhile. The result is held for the masks' host time only (the fill and the queued
calls, under a millisecond at 64 rows); a step whose successor is not waiting yet (a prefill step:
nothing is built ahead of it) is not held. On a GPU only (GrammarHook's `hand_over`).

Logprobs are those of the masked distribution, as vLLM reports them (it applies the grammar's
bitmask to the logits before its sampler takes the "raw" logprobs): the sampler runs the logits
processor before its log-softmax.

Tensor parallel: only the driver (rank 0) samples, from the logits gathered over the vocabulary
shards, so the hook is the driver runner's alone; the workers drop their logits and take the
sampled ids with the next step's inputs, so they hold no grammar and need none.

Composition: speculative decoding's Verifier is `inner`: its share of the step is kept (feed,
extra ids, claimed rows, several rows per verifying chunk); constrained rows carry no drafts (the
scheduler's SpecDrafts skips them), so each is one plain row here.
"""
from __future__ import annotations

import threading

import torch

from gpu_stage.runner_hooks import HookStep, RunnerHook
from gpu_stage.sampling.rows import SamplingRow, device_ids
from gpu_stage.sampling.states import SamplingState, SamplingStates
from stages.messages import SampledToken, ScheduledChunk, StepBatch, StepResult
from stages.structured import StructuredOutput
from structured.bitmask import GrammarBitmask
from structured.compiler import GrammarCompiler
from structured.request_grammar import RequestGrammar

# How long a step's masks wait for the previous step's tokens: only a broken engine gets near it.
PREVIOUS_STEP_WAIT_S = 60.0
# How long a step's result is held for its waiting successor's sampling to be queued: the same.
HAND_OVER_WAIT_S = 10.0


class GrammarStep:
    """A step's grammar share: which sampled rows are constrained, and their masks once filled."""

    def __init__(self, hook: GrammarHook, inner: HookStep | None, previous: GrammarStep | None) -> None:
        self.hook, self.inner, self.previous = hook, inner, previous
        self.feed = inner.feed if inner is not None else None
        self.extra = inner.extra if inner is not None else None
        self.claimed = inner.claimed if inner is not None else ()
        self.completed = threading.Event()
        self.queued = threading.Event()  # its sampling is queued (the runner's `sampling_queued`)
        self._waiter: GrammarStep | None = None  # the next step, when it waits for this one's tokens
        self._row_requests: list[tuple[str, SamplingState] | None] = []  # per sampled row, in order
        self._masked: dict[int, tuple[str, int]] | None = None  # id(row) -> (request, its mask row)
        self._bits: torch.Tensor | None = None  # [n, words] on the device
        self._error: str | None = None  # why none of its constrained rows can be masked

    def rows(self, chunk: ScheduledChunk, state: SamplingState) -> list[SamplingRow] | None:
        several = self.inner.rows(chunk, state) if self.inner is not None else None
        if several is not None:
            self._row_requests += [None] * len(several)
        else:
            known = chunk.request_id in self.hook.grammars
            self._row_requests.append((chunk.request_id, state) if known else None)
        return several

    def process_logits(self, logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
        if self.inner is not None:
            logits = self.inner.process_logits(logits, rows)
        if self._masked is None:
            self._fill(rows)
        index, picks = [], []
        for i, row in enumerate(rows):  # all the step's rows, or one of them (a row-by-row retry)
            hit = self._masked.get(id(row))
            if hit is not None:
                if self._error is not None:
                    raise RuntimeError(self._error)
                self.hook.raise_if_failed(hit[0])
                index.append(i)
                picks.append(hit[1])
        if not index:
            return logits
        bits = self._bits if len(picks) == self._bits.shape[0] else self._bits[device_ids(picks, logits.device)]
        every_row = len(index) == len(rows)  # (then the picks are the mask rows in order)
        return self.hook.bitmask.apply(logits, None if every_row else device_ids(index, logits.device), bits)

    def _fill(self, rows: list[SamplingRow]) -> None:
        """Wait for the previous step's tokens, bring the matchers up to date, fill the masks. A
        previous step that never reached its sampling (its launch failed: the engine is broken)
        is not waited for; one whose tokens never come fails this step's constrained rows only."""
        previous, self.previous = self.previous, None  # (no chain of steps kept alive)
        hook, masked = self.hook, {}
        if previous is not None and previous._masked is not None and not previous._wait_for_tokens(self):
            self._error = "the previous step's tokens never came back"
            self._masked = {id(row): (owner[0], -1) for row, owner in zip(rows, self._row_requests) if owner}
            return
        active: list[tuple[int, str, RequestGrammar]] = []
        for row, owner in zip(rows, self._row_requests):
            if owner is None:
                continue
            request_id, state = owner
            grammar = hook.grammar_of(request_id)
            if grammar is None:
                masked[id(row)] = (request_id, -1)  # its compile failed: raise_if_failed fails it
                continue
            grammar.catch_up(state.output_token_ids)
            if grammar.constrains:
                masked[id(row)] = (request_id, len(active))
                active.append((id(row), request_id, grammar))
        if active:
            host = hook.bitmask.host_rows(len(active))
            for k, (_, _, grammar) in enumerate(active):
                grammar.fill(host, k)
            self._bits = hook.bitmask.to_device(host)
        self._masked = masked

    def _wait_for_tokens(self, waiter: GrammarStep) -> bool:
        """(The next step, on the launch thread.) Wait until this step's tokens are recorded; a
        step that waits is registered first, so that `done` holds this step's result for it."""
        with self.hook.lock:
            if self.hook.hand_over and not self.completed.is_set():
                self._waiter = waiter
        return self.completed.wait(PREVIOUS_STEP_WAIT_S)

    def sampling_queued(self) -> None:
        if self.inner is not None:
            self.inner.sampling_queued()
        self.queued.set()

    def accept(self, request_id: str, run: list[SampledToken], extra: list[int], result: StepResult) -> None:
        assert self.inner is not None, "only the inner hook claims rows"
        self.inner.accept(request_id, run, extra, result)

    def done(self, result: StepResult) -> None:
        """(The completer thread.) The tokens are recorded: the next step's masks may be filled; when
        it waits for them already, return once its sampling is queued (the hand-over above)."""
        if self.inner is not None:
            self.inner.done(result)
        with self.hook.lock:
            self.completed.set()
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            waiter.queued.wait(HAND_OVER_WAIT_S)


class GrammarHook:
    def __init__(self, compiler: GrammarCompiler, bitmask: GrammarBitmask, inner: RunnerHook | None = None,
                 compile_timeout_s: float | None = None, hand_over: bool | None = None) -> None:
        """`hand_over`: hold a step's result for its waiting successor's sampling (see the module's
        docstring); default on a GPU only: on CPU, queueing the sampling is computing it, and the
        loop's work on the result should overlap that, not wait for it."""
        self.compiler, self.bitmask, self.inner = compiler, bitmask, inner
        self.compile_timeout_s = compile_timeout_s
        self.hand_over = bitmask.device.type == "cuda" if hand_over is None else hand_over
        self.grammars: dict[str, RequestGrammar | None] = {}  # constrained live requests (None: failed)
        self.errors: dict[str, str] = {}
        self._specs: dict[str, StructuredOutput] = {}  # grammars not yet looked up
        self._last: GrammarStep | None = None
        self.lock = threading.Lock()  # a step's completion against its successor's registration

    def begin(self, batch: StepBatch, states: SamplingStates) -> GrammarStep | None:
        inner = self.inner.begin(batch, states) if self.inner is not None else None
        if inner is None and not self.grammars and not any(n.params.structured for n in batch.new_requests):
            return None  # the common step: no constrained request is live
        for new in batch.new_requests:
            if new.params.structured is not None:
                self.grammars[new.request_id] = None
                self._specs[new.request_id] = new.params.structured
        grammars = self.grammars
        if inner is None and not any(c.sample and c.request_id in grammars for c in batch.chunks):
            return None
        step = self._last = GrammarStep(self, inner, self._last)
        return step

    def grammar_of(self, request_id: str) -> RequestGrammar | None:
        """The request's grammar, built from its compile (looked up by its text) on first use: its
        first sampled row, which the scheduler holds back until the compile has succeeded
        (scheduler/sampling_gates.py), so this does not wait (but for a compile evicted from the
        cache and started again meanwhile). Not looked up when the request is first scheduled: a
        compile that failed has left the cache, and its request, aborted before it samples, must
        not start it again."""
        grammar = self.grammars.get(request_id)
        if grammar is not None or request_id in self.errors:
            return grammar
        structured = self._specs.pop(request_id)
        try:
            compiled = self.compiler.submit(structured).result(timeout=self.compile_timeout_s)
            grammar = RequestGrammar(compiled, structured.after_token_ids)
        except Exception as exc:
            self.errors[request_id] = f"{type(exc).__name__}: {exc}"
            return None
        self.grammars[request_id] = grammar
        return grammar

    def raise_if_failed(self, request_id: str) -> None:
        error = self.errors.get(request_id)
        if error is not None:
            raise ValueError(f"the request's grammar: {error}")

    def release(self, request_id: str) -> None:
        if self.inner is not None:
            self.inner.release(request_id)
        self.grammars.pop(request_id, None)
        self.errors.pop(request_id, None)
        self._specs.pop(request_id, None)

    @property
    def num_live(self) -> int:
        return len(self.grammars)
