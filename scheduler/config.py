"""SchedulerConfig: the limits the scheduler works under, validated once at start-up."""
from __future__ import annotations

from dataclasses import dataclass, field

from stages.speculative import SpeculativeConfig

PREFILL_BACKLOG_STEPS = 4  # lanes: the default of SchedulerConfig.prefill_backlog_steps


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    # Blocks of the device KV pool, block 0 included: block 0 is the reserved null block (see
    # block_pool.py), so `num_blocks - 1` blocks hold real KV.
    num_blocks: int
    block_size: int = 16
    max_num_seqs: int = 256  # running requests at once
    max_num_batched_tokens: int = 2048  # per-step token budget
    max_model_len: int = 8192  # prompt + output tokens of one request
    max_queued: int = 1024  # waiting requests (new and preempted) before arrivals get "overloaded"
    # Cap on the tokens one prefill chunk may take in a step, below the token budget. 0: no cap
    # beyond the budget. A cap leaves room in every step for other requests' prefills. The lanes
    # policy also uses it as the lane boundary: a request whose uncached prompt is shorter is "short".
    long_prefill_threshold: int = 0
    # Lanes: TTFT-sized steps. After a step's first prefill chunk, other prompts join the step only
    # whole and only while the tokens they add stay within this many, so a burst of prompts gets
    # its first tokens shortest first in small steps rather than all after one big step. 0, or at
    # least the budget: no cap (prefills fill the budget, chunked).
    prefill_step_tokens: int = 0
    # Lanes: the cap above holds only while the prompts waiting to start hold fewer uncached tokens
    # than this many full steps (budgets). Past that backlog every first token waits mostly in the
    # queue, where the wait is the backlog over the prefill rate: full steps (several prompts
    # batched, the larger matrix products run faster per token) then serve everyone sooner. 0:
    # the cap always holds.
    prefill_backlog_steps: int = PREFILL_BACKLOG_STEPS
    # Lanes: a prefill's chunk limit shrinks as its context grows, to limit / (1 + weight x context)
    # (context_chunks.py: `weight` is the model's attention cost per cached token over a new token's
    # linear cost, ModelConfig.attention_weight). 0: off, every chunk up to the limit.
    prefill_context_weight: float = 0.0
    # False: no chunked prefill (vLLM's --no-enable-chunked-prefill, for ablations): a prompt is
    # admitted only when all its uncached tokens fit the step's budget left, so the budget must hold
    # the longest prompt; the chunk cap is off (the threshold stays the lanes' boundary).
    chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    eos_token_ids: frozenset[int] = field(default_factory=frozenset)
    # Per-step policy: "fcfs" (vLLM V1's: arrival order) or "lanes" (short prompts first, aging).
    policy: str = "lanes"
    # Arrival-time reservation of each request's predicted KV footprint (shadow.py). False: the
    # plain admission (a request is admitted when its first chunk's blocks fit).
    shadow: bool = True
    # Async scheduling: while a decode-only step runs, the next step is built and sent with each
    # decode's next input as a placeholder (PENDING_TOKEN) that the GPU stage fills from the
    # running step's sampled ids on the device, so the GPU never waits for the host between
    # decode steps. False: one step in flight, built after the previous result.
    async_scheduling: bool = True
    # Lanes: a long prefill waiting or in progress this many steps is promoted ahead of the short
    # lane until its prefill completes (never starved).
    aging_steps: int = 64
    # Anti-thrash: a request preempted this many times is no longer a victim while others are.
    max_preemptions_unprotected: int = 2
    # Shadow: how many later requests may take a reservation ahead of the oldest one still waiting
    # for room before nobody overtakes it any more.
    max_reservation_bypasses: int = 64
    # Output-length prediction before any request finished (capped by max_tokens).
    prior_output_tokens: int = 256
    # Speculative decoding (scheduler/spec/, attached as a step hook): decode rows carry draft
    # tokens. None: off.
    speculative: SpeculativeConfig | None = None

    def __post_init__(self) -> None:
        def need(ok: bool, what: str) -> None:
            if not ok:
                raise ValueError(f"SchedulerConfig: {what}")

        need(self.num_blocks >= 2, f"num_blocks must be >= 2 (block 0 is reserved), got {self.num_blocks}")
        need(self.block_size >= 1, f"block_size must be >= 1, got {self.block_size}")
        need(self.max_num_seqs >= 1, f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        need(self.max_num_batched_tokens >= 1,
             f"max_num_batched_tokens must be >= 1, got {self.max_num_batched_tokens}")
        need(self.max_model_len >= 1, f"max_model_len must be >= 1, got {self.max_model_len}")
        need(self.max_queued >= 0, f"max_queued must be >= 0, got {self.max_queued}")
        need(self.long_prefill_threshold >= 0,
             f"long_prefill_threshold must be >= 0, got {self.long_prefill_threshold}")
        need(self.chunked_prefill or self.max_num_batched_tokens >= self.max_model_len,
             f"without chunked prefill, max_num_batched_tokens ({self.max_num_batched_tokens}) must be "
             f">= max_model_len ({self.max_model_len}): every prompt is prefilled whole in one step")
        need(self.prefill_step_tokens >= 0,
             f"prefill_step_tokens must be >= 0, got {self.prefill_step_tokens}")
        need(self.prefill_backlog_steps >= 0,
             f"prefill_backlog_steps must be >= 0, got {self.prefill_backlog_steps}")
        need(self.prefill_context_weight >= 0,
             f"prefill_context_weight must be >= 0, got {self.prefill_context_weight}")
        need(self.policy in ("fcfs", "lanes"), f"policy must be 'fcfs' or 'lanes', got {self.policy!r}")
        need(self.aging_steps >= 1, f"aging_steps must be >= 1, got {self.aging_steps}")
        need(self.max_preemptions_unprotected >= 1,
             f"max_preemptions_unprotected must be >= 1, got {self.max_preemptions_unprotected}")
        need(self.max_reservation_bypasses >= 0,
             f"max_reservation_bypasses must be >= 0, got {self.max_reservation_bypasses}")
        need(self.prior_output_tokens >= 1,
             f"prior_output_tokens must be >= 1, got {self.prior_output_tokens}")
        # A verifying row's next step needs the tokens it accepted: it is never built ahead.
        need(self.speculative is None or not self.async_scheduling,
             "speculative decoding needs async_scheduling off")

    @property
    def num_usable_blocks(self) -> int:
        return self.num_blocks - 1

    @property
    def max_chunk_tokens(self) -> int:
        """The most tokens one request's prefill chunk may take in a step."""
        if self.long_prefill_threshold == 0 or not self.chunked_prefill:
            return self.max_num_batched_tokens
        return min(self.long_prefill_threshold, self.max_num_batched_tokens)

    @property
    def prefill_step_cap(self) -> int | None:
        """Lanes: the most prefill tokens that join a step after its first prefill chunk; None:
        no cap."""
        if 0 < self.prefill_step_tokens < self.max_num_batched_tokens:
            return self.prefill_step_tokens
        return None

    @property
    def lane_threshold(self) -> int:
        """Uncached prompt tokens from which a request is in the long lane."""
        return self.long_prefill_threshold or self.max_num_batched_tokens

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks that hold the KV of `num_tokens` positions."""
        return -(-num_tokens // self.block_size)
