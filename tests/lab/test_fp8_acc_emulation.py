"""lab.fp8_acc_emulation: the modelled fp8 MMA accumulation, on one sequence of the exactness test."""
from __future__ import annotations

import torch

from lab.fp8_acc_emulation import error, mma_steps


def test_the_steps_sum_exactly_without_a_bit_limit_and_truncate_with_one() -> None:
    a = torch.tensor([[1.0, 2.0 ** -20, 3.0, 2.0 ** -30] * 16], dtype=torch.float64)
    b = torch.ones_like(a)
    acc = torch.zeros(1, dtype=torch.float64)
    exact = mma_steps(a, b, acc, None)
    assert float(exact) == float(a.sum())
    kept = mma_steps(a, b, acc, 10)
    assert float(kept) < float(exact) and float(kept) == 64.0  # the tiny terms fall below 2^-10 of 3


def test_a_short_accumulator_costs_the_scores_and_not_p_at_v() -> None:
    exact = error(1, None, None)
    assert exact < 0.01
    assert error(1, 11, None) > 2 * exact  # scores on an 11-bit accumulator
    assert abs(error(1, None, 11) - exact) < 0.25 * exact  # p @ v on one: about as exact


def test_promoting_each_step_keeps_a_large_accumulator_from_truncating_the_next() -> None:
    """A running sum far above a step's products: chained, the step's products lose their low bits
    below the accumulator's; promoted, they keep `bits` below their own largest."""
    acc = torch.tensor([2.0 ** 12], dtype=torch.float64)
    a = torch.full((1, 32), 1.0 + 2.0 ** -6, dtype=torch.float64)
    b = torch.ones_like(a)
    chained, promoted = (float(mma_steps(a, b, acc, 13, promote)) for promote in (False, True))
    assert promoted == float(acc) + float(a.sum())
    assert chained < promoted


def test_promoted_scores_cost_less_than_chained_ones() -> None:
    assert error(1, 11, None, promote=True) < error(1, 11, None)
