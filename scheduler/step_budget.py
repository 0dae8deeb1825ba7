"""StepTimeBudget: while a latency-bound request is there, no step is predicted to take longer than
the budget; a long prompt's chunk is cut to fit.

A short request that arrives while a long prompt's chunk runs waits for the whole step, and so does
every running stream's next token (steps run one at a time on the device). The lanes order the
queue but cannot shorten the step already running; this bounds it. When the scheduler sizes a
chunk of a long-lane prefill, and anyone latency-bound is present (a running decode, a short
prompt waiting or prefilling), the chunk is cut to the most tokens that keep the step's predicted
time (StepCostModel: what the step already holds, plus the chunk's tokens and their attention at
its context) within the budget, in multiples of ALIGN. Never below half the step, though: the
chunk gets at least as much predicted time as the rest of the step (its decode rows and fixed
cost), so that the long prompt prefills at no less than half its speed however busy the decodes
(on CPU a step's fixed cost is a large share of a small chunk's: without this floor a 3,000-token
prompt beside two streams took 4x its solo TTFT); and never below MIN_CHUNK tokens. With nobody latency-bound (a long
prompt alone, or beside other long ones) chunks are the policy's: the budget costs a long prompt
nothing when it has the device to itself.

The budget grows with the long lane's backlog: it is budget x (1 + the long prompts pending besides
this one, waiting or prefilling). Each cut step pays what does not shrink with its chunk (the fixed
cost, on a GPU the prefill path's own set-up outside the decode graphs, the chunk's context read
again); a cost the model misses there makes every cut step slower than predicted, and the learned
coefficients then blame the chunk's attention pairs, cut smaller, pay it more often: on the H100
the long prompts fell behind their arrivals and piled up (lab/gpu_interference_sim.py reproduces
it). Pending long prompts are the sign that the lane fell behind, whatever the model believes: the
larger budget lets it catch up, and with one long prompt at a time the budget is as set.

Cut chunks take more steps; a cut prefill's age (lanes' aging) counts only the steps it waits, as
with context-aware chunks, or it would be promoted for progressing and head every step.

The decode ratio (off unless set: StepBudgetConfig.decode_ratio) bounds the stall itself rather than
a step's time: while decodes run, the prefill chunk that opens a step of them (any prompt's, short
lane included) is cut so that the step is predicted at most `decode_ratio` times what its decodes
alone take. It bounds every stream's inter-token gap at that many decode steps, but on a CPU, where
a decode step holds only a few dozen prefill tokens' time, a prompt's prefill then spreads over
most steps: the gaps' median rises towards their bound, and first tokens come later.

The model learns from every step's measured device time (`observe`). This is the one-stream form
of the latency and long-prefill lanes: the steps it builds say which lane they serve
(StepBuilder.lane), so a device that can run a long-prefill step beside a latency step (a second,
low-priority stream) can take them apart. Off (budget 0): `cut` returns the chunk unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from scheduler.request_state import RequestState, is_decode
from scheduler.request_table import RequestTable
from scheduler.step_builder import StepBuilder
from scheduler.step_cost import ALIGN, SEEDS, StepCostModel, step_features
from stages.messages import StepBatch

MIN_CHUNK = 32  # tokens: below this a step is mostly its fixed cost, and a long prompt would crawl
_start_pos = attrgetter("start_pos")


@dataclass(frozen=True, slots=True)
class StepBudgetConfig:
    """The engine's concurrent lanes (on unless --no-concurrent-lanes): the budget, and the device
    kind whose cost seed the model starts from ("cpu" or "cuda")."""

    budget_ms: float
    device: str = "cpu"
    # While decodes run, a step carrying a prefill chunk is predicted at most this many times what
    # its other work (the decode rows, the fixed cost) takes alone, whatever the budget (0: off).
    decode_ratio: float = 0.0

    def __post_init__(self) -> None:
        if not self.budget_ms > 0:
            raise ValueError(f"StepBudgetConfig: budget_ms must be > 0, got {self.budget_ms}")
        if not (self.decode_ratio == 0 or self.decode_ratio > 1):
            raise ValueError(f"StepBudgetConfig: decode_ratio must be 0 (off) or > 1, got {self.decode_ratio}")
        if self.device not in SEEDS:
            raise ValueError(f"StepBudgetConfig: device must be one of {sorted(SEEDS)}, got {self.device!r}")


class StepTimeBudget:
    def __init__(self, config: StepBudgetConfig | None, chunked_prefill: bool = True) -> None:
        """`config` None, or no chunked prefill (a prompt then runs whole): off."""
        self.enabled = config is not None and chunked_prefill
        self.budget_s = config.budget_ms / 1000.0 if self.enabled else 0.0
        self.decode_ratio = config.decode_ratio if self.enabled else 0.0
        self.cost = StepCostModel(SEEDS[config.device if config is not None else "cpu"])
        self.num_cuts = 0  # since start: chunks cut to the budget

    def cut(self, req: RequestState, num_new: int, context: int, step: StepBuilder,
            table: RequestTable) -> int:
        """The tokens `req` (a prefill of `num_new` tokens after `context` computed ones) may take
        in `step`: `num_new`, or fewer when it would push the step past the budget while someone
        latency-bound waits (a long prompt), or past the decode ratio while decodes run (any
        prompt's chunk that opens a step of decodes)."""
        if not self.enabled or num_new <= MIN_CHUNK:
            return num_new
        limits = []
        tokens, kpairs = -1, 0.0
        # The step holds only decode rows so far: its first prefill chunk. (Prompts that join
        # after it are whole and few: the lanes' cap bounds them.)
        if self.decode_ratio and step.chunks and not step.num_prefill_tokens:
            tokens, kpairs = step_features((len(c.token_ids), c.start_pos) for c in step.chunks)
            limits.append(self.decode_ratio * self.cost.predict_s(tokens, kpairs))
        if req.is_long and _latency_bound(req, table):
            if tokens < 0:
                tokens, kpairs = step_features((len(c.token_ids), c.start_pos) for c in step.chunks)
            # Never below half the step: a chunk that costs less than the rest of its step (the
            # decode rows, the fixed cost) would prefill the prompt at under half speed. And the
            # budget grows with the long prompts queued behind this one (see the module's
            # docstring): the lane keeps up with its arrivals whatever the cost model gets wrong.
            budget_s = self.budget_s * (1 + _long_backlog(req, table))
            limits.append(max(budget_s, 2.0 * self.cost.predict_s(tokens, kpairs)))
        if not limits:
            return num_new
        fit = self.cost.max_tokens(min(limits), tokens, kpairs, context)
        if fit >= num_new:
            return num_new
        self.num_cuts += 1
        req.lane_since_step += 1  # its age counts the steps it waits (see the module's docstring)
        return max(MIN_CHUNK, fit // ALIGN * ALIGN)

    def observe(self, batch: StepBatch, duration_ns: int) -> None:
        """Learn from a finished step (decode-only steps, the bulk, without a loop in Python)."""
        if not self.enabled or duration_ns <= 0:
            return
        chunks = batch.chunks
        num_tokens = batch.num_tokens
        if num_tokens == len(chunks):  # one token per row: pairs are each row's context + 1
            kpairs = (sum(map(_start_pos, chunks)) + num_tokens) / 1000.0
        else:
            num_tokens, kpairs = step_features((len(c.token_ids), c.start_pos) for c in chunks)
        self.cost.observe(num_tokens, kpairs, duration_ns / 1e9)


def _long_backlog(req: RequestState, table: RequestTable) -> int:
    """How many long prompts besides `req` have yet to finish their prefill (waiting, or running
    before their first token)."""
    pending = 0
    for queue in (table.waiting, table.running):
        for other in queue:
            if other is not req and other.is_long and other.num_computed_tokens < other.num_prompt_tokens:
                pending += 1
    return pending


def _latency_bound(req: RequestState, table: RequestTable) -> bool:
    """Whether anyone but `req` waits on a short step: a running decode or short prefill, or a
    short prompt in the queue. (Only asked while sizing a long chunk: those steps are long.)"""
    for other in table.running:
        if other is not req and (not other.is_long or is_decode(other)):
            return True
    return any(not other.is_long for other in table.waiting)
