"""StepHook: how a per-step feature attaches to the scheduler, at two points of every step.

    on_schedule(step, table, grow)       after the policy's walk built the step, before it is sent:
                                         the hook may append guessed tokens to decode rows from the
                                         budget left (StepBuilder.add_guesses), growing their blocks
                                         with `grow` (charged to the request's claim, never preempting)
    on_results(req, chunk, run, result)  a sampled row's tokens, before the request appends them: the
                                         run starts as [the sampled token]; a hook may extend it (the
                                         guesses the model accepted, each with its successor) or
                                         shorten it (a grammar vetoing a token), never empty it

The scheduler applies what is left: a row that carried guesses computes its known tokens plus the
accepted ones (the run less its first token), gives back the blocks of the rest, and appends the
run one token at a time, so a stop id or a length limit inside it ends the request where it would
have ended token by token. A hook also says how many KV positions past its end a row may take
(`num_slots_past_end`), which every request's claim on the pool counts.

Speculative decoding is one (scheduler/spec/); `build_step_hooks` is where a feature is switched
on from the configuration, one line each. With no hook the scheduler runs its decode fast path.
"""
from __future__ import annotations

from typing import Callable, Iterable, Protocol, TypeVar

from scheduler.config import SchedulerConfig
from scheduler.request_state import RequestState
from scheduler.request_table import RequestTable
from scheduler.spec.drafts import SpecDrafts
from scheduler.step_builder import StepBuilder
from stages.messages import SampledToken, ScheduledChunk, StepResult

Grow = Callable[[RequestState, int], bool]  # StepPlacement.grow: blocks for n positions, or False
H = TypeVar("H")


class StepHook(Protocol):
    num_slots_past_end: int

    def on_schedule(self, step: StepBuilder, table: RequestTable, grow: Grow) -> None: ...

    def on_results(self, req: RequestState, chunk: ScheduledChunk, run: list[SampledToken],
                   result: StepResult) -> list[SampledToken]: ...


class StepHooks:
    """The scheduler's hooks, called in the order they were attached."""

    def __init__(self, hooks: tuple[StepHook, ...] = ()) -> None:
        self.hooks = hooks
        self.num_slots_past_end = sum(h.num_slots_past_end for h in hooks)

    def __bool__(self) -> bool:
        return bool(self.hooks)

    def get(self, kind: type[H]) -> H | None:
        """The attached hook of this class, or None."""
        return next((h for h in self.hooks if isinstance(h, kind)), None)

    def on_schedule(self, step: StepBuilder, table: RequestTable, grow: Grow) -> None:
        for hook in self.hooks:
            hook.on_schedule(step, table, grow)

    def on_results(self, req: RequestState, chunk: ScheduledChunk, token: SampledToken,
                   result: StepResult) -> list[SampledToken]:
        run = [token]
        for hook in self.hooks:
            run = hook.on_results(req, chunk, run, result)
        assert run, "a hook emptied a sampled row's run"
        return run


def build_step_hooks(config: SchedulerConfig, extra: Iterable[StepHook] = ()) -> StepHooks:
    """The hooks the configuration switches on, then `extra` (an embedder's own)."""
    hooks: list[StepHook] = []
    if config.speculative is not None:
        hooks.append(SpecDrafts(config, config.speculative))
    return StepHooks((*hooks, *extra))
