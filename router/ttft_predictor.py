"""TtftPredictor: a request's time to first token on each replica, from what the router can see.

    predicted TTFT = queue wait + uncached prefill
    queue wait     = (prompt tokens queued there ahead of it) / prefill rate + running decodes' share
    uncached       = (its prompt tokens - those the replica's prefix cache holds) / prefill rate
                     + (those held only in its host-memory tier) x host_restore_cost / prefill rate

Tokens queued ahead are the larger of what this router sent there and has not seen start
(exact for a single router) and what the replica last published (which also counts other routers'
requests): its queued uncached prompt tokens, or, from a replica that publishes only a count of
waiting requests, that count at the mean prompt size. Running decodes share each step
with the prefill, so each adds `decode_s_per_request`. The prefill rate is the replica's published
one, else learned from this router's own observations (an exponential average of uncached tokens
over TTFT for requests that found the replica idle), else what was learned of the other replicas
(replicas behind one router serve one model, mostly on like hardware), else a prior. Never the
prior beside a learned rate: a replica seen once would look faster than every replica not seen yet
by the prior's error (20x on a GPU) and take every request.
"""
from __future__ import annotations

from dataclasses import dataclass

from router.replica import Replica
from router.request_key import BLOCK_CHARS, CHARS_PER_TOKEN

TOKENS_PER_BLOCK = BLOCK_CHARS // CHARS_PER_TOKEN


@dataclass
class PredictorConfig:
    prior_prefill_tokens_per_s: float = 2000.0  # a small model on a few CPU cores; learned per replica
    decode_s_per_request: float = 0.002  # each running request's share of a step
    mean_prompt_tokens: float = 256.0  # what an unknown queued request is taken to cost
    learn_weight: float = 0.2  # of each new rate observation in the running average
    min_learn_tokens: int = 64  # shorter prefills are dominated by fixed costs: not a rate sample
    # A block restored from the host tier, as a fraction of recomputing it: a copy of its KV bytes
    # against its layers' matmuls (host loads beat recompute several times over on GPUs and CPUs).
    host_restore_cost: float = 0.1


class TtftPredictor:
    def __init__(self, config: PredictorConfig | None = None) -> None:
        self.config = config or PredictorConfig()
        self.fleet_tokens_per_s: float | None = None  # learned over all replicas, for those not seen yet

    def rate(self, replica: Replica) -> float:
        return (replica.load.prefill_tokens_per_s or self.fleet_tokens_per_s
                or self.config.prior_prefill_tokens_per_s)

    def queue_wait_s(self, replica: Replica) -> float:
        load, cfg = replica.load, self.config
        published = load.num_queued_prefill_tokens
        if published is None:
            published = load.num_waiting * cfg.mean_prompt_tokens
        queued_tokens = max(load.num_pending_prefill_tokens, published)
        return queued_tokens / self.rate(replica) + load.num_in_flight * cfg.decode_s_per_request

    def uncached_tokens(self, num_prompt_tokens: int, num_cached_blocks: int) -> int:
        return max(1, num_prompt_tokens - num_cached_blocks * TOKENS_PER_BLOCK)

    def prefill_tokens(self, num_prompt_tokens: int, num_cached_blocks: int, num_host_blocks: int = 0) -> int:
        """What the prefill costs, in tokens computed: the uncached ones, plus the host tier's
        restores at their fraction of a recompute."""
        restore = num_host_blocks * TOKENS_PER_BLOCK * self.config.host_restore_cost
        return self.uncached_tokens(num_prompt_tokens, num_cached_blocks) + round(restore)

    def predict_s(self, replica: Replica, num_prompt_tokens: int, num_cached_blocks: int,
                  num_host_blocks: int = 0) -> float:
        """`num_cached_blocks`: the leading blocks held (device or host); `num_host_blocks` of them on host."""
        cost = self.prefill_tokens(num_prompt_tokens, num_cached_blocks, num_host_blocks)
        return self.queue_wait_s(replica) + cost / self.rate(replica)

    def observe(self, replica: Replica, num_uncached_tokens: int, ttft_s: float, was_idle: bool) -> None:
        """A request's first token came `ttft_s` after it was sent; learn the rate from it if the
        replica had nothing else queued (else the queue, not the rate, is what was measured)."""
        cfg = self.config
        if not was_idle or num_uncached_tokens < cfg.min_learn_tokens or ttft_s <= 0:
            return
        sample = num_uncached_tokens / ttft_s
        old = replica.load.prefill_tokens_per_s
        replica.load.prefill_tokens_per_s = sample if old is None else old + cfg.learn_weight * (sample - old)
        fleet = self.fleet_tokens_per_s
        self.fleet_tokens_per_s = sample if fleet is None else fleet + cfg.learn_weight * (sample - fleet)
