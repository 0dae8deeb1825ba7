"""StepCostModel: the seed before any step, least squares over measured steps after (recent ones
weighing most), the largest chunk that fits a budget at a context, and the features of a step."""
from __future__ import annotations

import random

import pytest

from scheduler.step_cost import SEEDS, StepCostModel, chunk_kpairs, step_features

TRUE = (0.004, 30e-6, 1.5e-6)  # (fixed_s, per_token_s, per_kpair_s) of an imaginary device


def cost(coefficients: tuple[float, float, float], tokens: int, kpairs: float) -> float:
    return coefficients[0] + coefficients[1] * tokens + coefficients[2] * kpairs


def shapes(rng: random.Random, n: int) -> list[tuple[int, float]]:
    """Steps as a server runs them: decodes of 1-64 rows, and prefill chunks at various contexts."""
    out = []
    for _ in range(n):
        rows = rng.randint(1, 64)
        chunks = [(1, rng.randint(10, 4000)) for _ in range(rows)]
        if rng.random() < 0.3:
            chunks.append((rng.choice((64, 256, 1024, 2048)), rng.randint(0, 30000)))
        out.append(step_features(chunks))
    return out


def test_features_count_tokens_and_causal_pairs() -> None:
    assert chunk_kpairs(4, 0) == (1 + 2 + 3 + 4) / 1000  # a fresh prompt attends to itself, causally
    assert chunk_kpairs(1, 99) == 100 / 1000  # a decode at position 99 reads 99 cached keys and its own
    assert step_features([(4, 0), (1, 99)]) == (5, pytest.approx(0.11))


def test_the_seed_is_the_prediction_before_any_step() -> None:
    model = StepCostModel(SEEDS["cuda"])
    assert model.coefficients == SEEDS["cuda"]
    assert model.predict_s(100, 5.0) == pytest.approx(cost(SEEDS["cuda"], 100, 5.0))


def test_it_learns_a_device_from_its_steps() -> None:
    rng = random.Random(0)
    model = StepCostModel(SEEDS["cuda"])  # a seed 5-25x off on every coefficient
    for tokens, kpairs in shapes(rng, 300):
        model.observe(tokens, kpairs, cost(TRUE, tokens, kpairs) * rng.uniform(0.95, 1.05))
    for tokens, kpairs in ((1, 1.0), (32, 64.0), (2048, 40000.0), (512, 16000.0)):
        assert model.predict_s(tokens, kpairs) == pytest.approx(cost(TRUE, tokens, kpairs), rel=0.1)


def test_recent_steps_weigh_most() -> None:
    rng = random.Random(1)
    model = StepCostModel(TRUE)
    slower = tuple(2 * v for v in TRUE)  # the host got busy: every step takes twice as long
    for tokens, kpairs in shapes(rng, 400):
        model.observe(tokens, kpairs, cost(slower, tokens, kpairs))
    for tokens, kpairs in shapes(rng, 20):  # steps like those it ran: twice the seed's, within 15%
        assert model.predict_s(tokens, kpairs) == pytest.approx(cost(slower, tokens, kpairs), rel=0.15)


def test_a_slope_never_comes_out_negative() -> None:
    model = StepCostModel(TRUE)
    for _ in range(50):  # big steps measured faster than small ones (noise): a slope would go below 0
        model.observe(4096, 100.0, 0.001)
        model.observe(8, 100.0, 0.050)
    fixed, per_token, per_kpair = model.coefficients
    assert fixed >= 0 and per_token > 0 and per_kpair >= 0


def test_max_tokens_is_the_largest_chunk_within_the_budget() -> None:
    model = StepCostModel(TRUE)
    base = step_features([(1, 500)] * 8)  # eight decodes
    for context in (0, 4096, 32768, 131072):
        n = model.max_tokens(0.015, *base, context)
        grown = lambda k: model.predict_s(base[0] + k, base[1] + chunk_kpairs(k, context))  # noqa: E731
        assert grown(n) <= 0.015 < grown(n + 1), context
    fits = [model.max_tokens(0.015, *base, c) for c in (0, 4096, 32768, 131072)]
    assert fits == sorted(fits, reverse=True) and fits[0] > 2 * fits[-1]  # dearer as the context grows
    assert model.max_tokens(0.003, *base, 0) == 0  # the step's fixed cost alone is past the budget
    flat = StepCostModel((0.001, 1e-6, 0.0))  # no attention term: a linear fit
    assert flat.max_tokens(0.011, 0, 0.0, 1000) == 9999  # (0.011 - 0.001) / 1e-6, less rounding


def test_a_long_run_keeps_its_sums_finite() -> None:
    """Each new step weighs 1/DECAY more than the last (no decay pass per step); the sums are
    rescaled before they overflow, and the fit is the same."""
    model = StepCostModel(SEEDS["cuda"])
    for i in range(30000):  # 1.0101 ** 30000 would overflow a float
        tokens, kpairs = (8, 20.0) if i % 2 else (1024, 9000.0)
        model.observe(tokens, kpairs, cost(TRUE, tokens, kpairs))
    assert model.predict_s(8, 20.0) == pytest.approx(cost(TRUE, 8, 20.0), rel=0.01)
    assert model.predict_s(1024, 9000.0) == pytest.approx(cost(TRUE, 1024, 9000.0), rel=0.01)
