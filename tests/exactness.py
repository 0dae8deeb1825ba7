"""The exactness rule of ARCHITECTURE.md, for tests that compare greedy runs.

Two greedy runs agree when their tokens are identical, or when, at the first position where they
differ, the reference run's top-2 logit gap is below a tolerance (a near-tie that rounding may flip).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

FP32_GAP = 2e-3
BF16_GAP = 0.25


@dataclass
class ExactnessReport:
    num_identical: int = 0
    num_excused: int = 0
    failures: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return f"{self.num_identical} identical, {self.num_excused} excused near-ties, {len(self.failures)} failed"


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare_runs(
    report: ExactnessReport,
    name: str,
    reference: Sequence[int],
    candidate: Sequence[int],
    top2_gap_at: Callable[[int], float],
    tolerance: float = FP32_GAP,
) -> None:
    """`top2_gap_at(i)`: the reference run's top-2 logit gap when it chose its token i."""
    pos = first_difference(reference, candidate)
    if pos is None:
        report.num_identical += 1
        return
    if pos >= min(len(reference), len(candidate)):
        report.failures.append(f"{name}: lengths differ ({len(reference)} vs {len(candidate)}) with equal prefix")
        return
    gap = top2_gap_at(pos)
    if gap < tolerance:
        report.num_excused += 1
    else:
        report.failures.append(f"{name}: differ at {pos} with top-2 gap {gap:.4g} >= {tolerance}")
