"""FetchCostModel: wait for a running fetch, or recompute its blocks?

Waiting delays only the waiting request; recomputing delays it too (by the prefill's time) and
every other request that shares those steps. So the wait is taken when its expected remaining
time is below the recompute time scaled by how many requests the recompute would hold up:
    wait  iff  remaining_fetch_s < recompute_s * (1 + num_busy)
Both rates start from configuration (PERFORMANCE.md's measured disk rate; a prefill cost from
the model's FLOPs) and are then learned from what this process measures: each disk read's own
time in its worker (not its queueing), prefill cost from step times.
"""
from __future__ import annotations

from scheduler.kv_tiers.config import TierConfig

_EWMA = 0.2  # weight of the newest measurement
_MIN_STEP_TOKENS = 256  # steps this large are dominated by prefill: a fair per-token cost


class FetchCostModel:
    def __init__(self, config: TierConfig) -> None:
        self.disk_bytes_per_s = config.disk_bytes_per_s  # one job's rate, learned per read
        self.disk_parallelism = config.disk_parallelism  # reads of one prefix run side by side
        self.recompute_s_per_token = config.recompute_s_per_token
        self.max_wait_s = config.max_fetch_wait_s

    def observe_step(self, num_tokens: int, duration_s: float) -> None:
        if num_tokens >= _MIN_STEP_TOKENS and duration_s > 0:
            rate = duration_s / num_tokens
            self.recompute_s_per_token += _EWMA * (rate - self.recompute_s_per_token)

    def observe_disk_read(self, num_bytes: int, duration_s: float) -> None:
        if num_bytes > 0 and duration_s > 0:
            self.disk_bytes_per_s += _EWMA * (num_bytes / duration_s - self.disk_bytes_per_s)

    def remaining_fetch_s(self, num_bytes: int, elapsed_s: float) -> float:
        """Expected time left; a fetch already past its expected time is assumed to need a
        quarter of that again (overdue is not the same as about to land)."""
        expected = num_bytes / (self.disk_bytes_per_s * self.disk_parallelism)
        return max(expected - elapsed_s, 0.25 * expected)

    def recompute_s(self, num_tokens: int) -> float:
        return num_tokens * self.recompute_s_per_token

    def should_wait(self, num_bytes: int, elapsed_s: float, num_tokens: int, num_busy: int) -> bool:
        if elapsed_s >= self.max_wait_s:
            return False  # never wait forever on a fetch that does not come back
        remaining = self.remaining_fetch_s(num_bytes, elapsed_s)
        return remaining < self.recompute_s(num_tokens) * (1 + num_busy)
