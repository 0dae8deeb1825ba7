"""OutputLengthPredictor: how many tokens a request will generate, learned from finished ones.

Shadow admission reserves a request's KV footprint at arrival, output included; reserving the full
`max_tokens` would hold back room that most replies never use (clients often send max_tokens far
above what they get), reserving nothing would admit requests whose decode then runs out of blocks.
So we learn. Requests are bucketed by max_tokens (powers of two: a client that asks for 16 tokens
and one that asks for 4096 behave differently); each bucket keeps a window of recent output
lengths as a fraction of max_tokens and predicts a high quantile of it (under-prediction costs a
preemption, over-prediction only some admission headroom). Before a bucket has seen anything the
prediction is a fixed prior, capped by max_tokens.

O(1) per prediction (the quantile is recomputed when a request finishes, over a short window).
"""
from __future__ import annotations

import math
from collections import deque


class OutputLengthPredictor:
    def __init__(self, prior_tokens: int = 256, quantile: float = 0.9, window: int = 64) -> None:
        assert prior_tokens >= 1 and 0.0 < quantile <= 1.0 and window >= 1
        self.prior_tokens = prior_tokens
        self.quantile = quantile
        self.window = window
        self._samples: dict[int, deque[float]] = {}  # bucket -> recent output/max_tokens
        self._ratio: dict[int, float] = {}  # bucket -> current quantile of its samples

    @staticmethod
    def bucket(max_tokens: int) -> int:
        return max(1, max_tokens).bit_length()

    def predict(self, max_tokens: int) -> int:
        """Expected output tokens of a request with this max_tokens: in [1, max_tokens]."""
        ratio = self._ratio.get(self.bucket(max_tokens))
        # (the epsilon keeps 0.07 * 100 = 7.000000000000001 from rounding up to 8)
        guess = self.prior_tokens if ratio is None else math.ceil(ratio * max_tokens - 1e-9)
        return max(1, min(max_tokens, guess))

    def observe(self, max_tokens: int, num_output_tokens: int) -> None:
        """A request finished naturally (stop or length) with this many output tokens."""
        if max_tokens < 1:
            return
        key = self.bucket(max_tokens)
        samples = self._samples.setdefault(key, deque(maxlen=self.window))
        samples.append(min(1.0, num_output_tokens / max_tokens))
        ordered = sorted(samples)
        self._ratio[key] = ordered[min(len(ordered) - 1, int(self.quantile * len(ordered)))]
