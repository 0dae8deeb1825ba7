"""StepCostModel: how long a step will take on the device, from what it holds, learned from the
steps that ran.

A step's time is modelled as

    fixed + per_token x tokens + per_kpair x (attention pairs / 1000)

where `tokens` counts every new token of the step (a decode row is one token, a prefill chunk its
tokens) and the attention pairs count (query, key) products: a chunk of n tokens starting after c
cached ones attends to n x c cached keys and n (n + 1) / 2 of its own. The pair term is what makes
a long prompt's chunk dearer as its context grows, so that a budget cuts it by the attention cost at
its context (scheduler/context_chunks.py cuts by a fixed model weight instead; this learns it).

The coefficients are least squares of the relative error (each step weighs 1 / its time squared,
so a 5 ms decode step counts as much as a 500 ms chunk) over the measured steps, recent ones
weighing most (each older step's weight decays by DECAY per step: a device that heats up or a host
that gets busy is followed within ~100 steps), with a seed: the device's typical coefficients, worth SEED_WEIGHT
steps of a few typical shapes that never decay, so that the first steps are sized sensibly and
shapes the device has not run lately fall back towards the seed rather than to nonsense. As the
output-length predictor (predictor.py) learns from finished requests, this learns from finished
steps: O(1) per step (3x3 sums, a few us); the 3x3 solve runs only when a prediction is asked after
new steps (steps that size a long prompt's chunk).
"""
from __future__ import annotations

from typing import Iterable, Sequence

DECAY = 0.99
SEED_WEIGHT = 2.0
ALIGN = 16  # cut chunks are multiples of this many tokens (mixed-step graph buckets, matrix tiles)

# Seeds per device kind: (fixed_s, per_token_s, per_kpair_s). CUDA: an 8B model in bf16 on an H100
# (a 32K prompt alone ~1.24 s: ~25 us per token for its linear layers and ~1 us per thousand
# attention pairs; a decode step ~6.5 ms). CPU: SmolLM2-135M in float32 on two busy cores. A model
# far from these is learned within a few steps.
SEEDS: dict[str, tuple[float, float, float]] = {
    "cuda": (6e-3, 25e-6, 1e-6),
    "cpu": (0.1, 5e-3, 1e-2),
}
# The seed's imaginary steps: (tokens, kilo-pairs): a decode of 8 rows at 1K of context, a
# 512-token prefill at no context, one at 4K.
SEED_SHAPES = ((8, 8.2), (512, 131.3), (512, 2228.5))


def chunk_kpairs(num_tokens: int, context: int) -> float:
    """Attention pairs (in thousands) of `num_tokens` new tokens after `context` cached ones."""
    return (num_tokens * context + num_tokens * (num_tokens + 1) / 2) / 1000.0


def step_features(chunks: Iterable[tuple[int, int]]) -> tuple[int, float]:
    """(tokens, kilo-pairs) of a step's chunks, each given as (num_tokens, start position)."""
    tokens, kpairs = 0, 0.0
    for num, start in chunks:
        tokens += num
        kpairs += chunk_kpairs(num, start)
    return tokens, kpairs


class StepCostModel:
    def __init__(self, seed: Sequence[float], decay: float = DECAY, seed_weight: float = SEED_WEIGHT) -> None:
        assert len(seed) == 3 and all(v >= 0 for v in seed) and sum(seed) > 0 and 0 < decay <= 1 and seed_weight > 0
        self._growth = 1.0 / decay
        self._seed_a, self._seed_b = _zero(), [0.0, 0.0, 0.0]
        for tokens, kpairs in SEED_SHAPES:
            x = (1.0, float(tokens), kpairs)
            y = _dot(seed, x)
            _accumulate(self._seed_a, self._seed_b, x, y, seed_weight / len(SEED_SHAPES) / y ** 2)
        # The measured steps' sums. Rather than decay them all at every step, each new step weighs
        # `_weight`, which grows by 1 / decay per step (rescaled now and then): the same sums.
        self._a, self._b = _zero(), [0.0, 0.0, 0.0]
        self._weight = 1.0
        self._coefficients = tuple(float(v) for v in seed)  # (fixed_s, per_token_s, per_kpair_s)
        self._stale = False  # steps observed since the last solve
        self.num_observed = 0

    @property
    def coefficients(self) -> tuple[float, float, float]:
        if self._stale:
            self._solve()
        return self._coefficients

    def predict_s(self, tokens: int, kpairs: float) -> float:
        fixed, per_token, per_kpair = self.coefficients
        return fixed + per_token * tokens + per_kpair * kpairs

    def observe(self, tokens: int, kpairs: float, duration_s: float) -> None:
        """A step of these features took `duration_s` on the device. (Every step calls this, so it
        only adds to the sums; the solve waits for the next prediction.)"""
        if duration_s <= 0 or tokens <= 0:
            return
        w = self._weight / (duration_s * duration_s)
        a, b, t = self._a, self._b, float(tokens)
        a0, a1, a2 = a
        a0[0] += w
        a0[1] += w * t
        a0[2] += w * kpairs
        a1[1] += w * t * t
        a1[2] += w * t * kpairs
        a2[2] += w * kpairs * kpairs
        wy = w * duration_s
        b[0] += wy
        b[1] += wy * t
        b[2] += wy * kpairs
        self._weight *= self._growth
        if self._weight > 1e100:
            self._rescale(1.0 / self._weight)
        self._stale = True
        self.num_observed += 1

    def max_tokens(self, budget_s: float, base_tokens: int, base_kpairs: float, context: int) -> int:
        """The most new tokens a chunk after `context` cached ones may add to a step that holds
        (base_tokens, base_kpairs) so that the step is predicted to take at most `budget_s` (0
        when the rest of the step alone reaches it)."""
        fixed, per_token, per_kpair = self.coefficients
        room = budget_s - (fixed + per_token * base_tokens + per_kpair * base_kpairs)
        if room <= 0:
            return 0
        # per_kpair/2000 n^2 + (per_token + per_kpair (context + 0.5) / 1000) n <= room
        qa = per_kpair / 2000.0
        qb = per_token + per_kpair * (context + 0.5) / 1000.0
        if qa <= 0:
            return int(room / qb) if qb > 0 else 1 << 30
        return int((-qb + (qb * qb + 4.0 * qa * room) ** 0.5) / (2.0 * qa))

    def _rescale(self, factor: float) -> None:
        for row in self._a:
            for j in range(3):
                row[j] *= factor
        self._b = [v * factor for v in self._b]
        self._weight *= factor

    def _solve(self) -> None:
        self._stale = False
        scale = self._weight  # the seed weighs as much as SEED_WEIGHT steps measured now
        a = [[scale * self._seed_a[i][j] + self._a[min(i, j)][max(i, j)] for j in range(3)] for i in range(3)]
        b = [scale * self._seed_b[i] + self._b[i] for i in range(3)]
        solved = _solve3(a, b)
        if solved is not None:
            # A noisy host can make a slope come out negative; a cost never falls with more work.
            self._coefficients = (max(0.0, solved[0]), max(1e-9, solved[1]), max(0.0, solved[2]))


def _zero() -> list[list[float]]:
    return [[0.0] * 3 for _ in range(3)]


def _dot(u: Sequence[float], v: Sequence[float]) -> float:
    return sum(p * q for p, q in zip(u, v))


def _accumulate(a: list[list[float]], b: list[float], x: Sequence[float], y: float, w: float) -> None:
    for i in range(3):
        b[i] += w * x[i] * y
        for j in range(3):
            a[i][j] += w * x[i] * x[j]


def _solve3(a: list[list[float]], b: list[float]) -> list[float] | None:
    """a x = b by Gaussian elimination with partial pivoting; None when `a` is singular."""
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(3):
        pivot = max(range(col, 3), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-300:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, 3):
            f = m[r][col] / m[col][col]
            for c in range(col, 4):
                m[r][c] -= f * m[col][c]
    x = [0.0, 0.0, 0.0]
    for r in (2, 1, 0):
        x[r] = (m[r][3] - sum(m[r][c] * x[c] for c in range(r + 1, 3))) / m[r][r]
    return x
