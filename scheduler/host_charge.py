"""StepCostShares: one scheduler call's host cost (schedule() or update() of a step) split among
the step's requests, for their traces' "schedule" work.

A step of decodes costs about the same for each of its requests. A prefill chunk costs more than
a decode: its blocks are allocated and hashed, and a prompt still prefilling sends schedule() down
the general walk instead of the decode fast path. Sharing a step's cost by tokens charged a long
prompt's chunk for its neighbours' decodes as well (a 256-token chunk beside 7 decodes, about
twice what it added). So each decode pays what a decode costs in a decode-only step (a running
estimate from those steps, one per call site: schedule() and update() differ), and the prefill
chunks share the rest by their tokens: each prompt pays what it adds.
"""
from __future__ import annotations

from typing import Sequence

Share = tuple[int, int]  # (work ns on the CPU clock, wall ns)


class StepCostShares:
    def __init__(self, smoothing: float = 0.125) -> None:
        assert 0.0 < smoothing <= 1.0
        self.smoothing = smoothing
        # A decode's cost in decode-only steps (CPU ns, wall ns); None until the first such step.
        self.per_decode: tuple[float, float] | None = None

    def split(self, token_counts: Sequence[int], cpu_ns: int, wall_ns: int) -> list[Share]:
        """Each chunk's share of a call that cost (cpu_ns, wall_ns), in the order of
        `token_counts` (the step's chunks' tokens). The shares never add up to more than the cost."""
        num = len(token_counts)
        if num == 0:
            return []
        num_decodes = sum(1 for n in token_counts if n == 1)
        if num_decodes == num:  # decodes only: equal shares, and the estimate learns
            self._observe(cpu_ns / num, wall_ns / num)
            return [(cpu_ns // num, wall_ns // num)] * num
        if num_decodes == 0 or self.per_decode is None:
            return _by_tokens(token_counts, cpu_ns, wall_ns)
        per_cpu, per_wall = self.per_decode
        # The decodes pay their usual cost (never more than the call's), the prefills the rest.
        decode_cpu = min(cpu_ns, int(per_cpu * num_decodes)) // num_decodes
        decode_wall = min(wall_ns, int(per_wall * num_decodes)) // num_decodes
        prefill_counts = [n if n > 1 else 0 for n in token_counts]
        rest = _by_tokens(prefill_counts, cpu_ns - decode_cpu * num_decodes, wall_ns - decode_wall * num_decodes)
        return [(decode_cpu, decode_wall) if n == 1 else share for n, share in zip(token_counts, rest)]

    def _observe(self, cpu_ns: float, wall_ns: float) -> None:
        if self.per_decode is None:
            self.per_decode = (cpu_ns, wall_ns)
            return
        a = self.smoothing
        cpu, wall = self.per_decode
        self.per_decode = (cpu + a * (cpu_ns - cpu), wall + a * (wall_ns - wall))


def _by_tokens(token_counts: Sequence[int], cpu_ns: int, wall_ns: int) -> list[Share]:
    total = sum(token_counts)
    if total == 0:
        return [(0, 0)] * len(token_counts)
    return [(cpu_ns * n // total, wall_ns * n // total) for n in token_counts]
