"""SchedulerConfig: the limits the scheduler works under, validated once at start-up."""
from __future__ import annotations

from dataclasses import dataclass, field


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
    # beyond the budget. A cap leaves room in every step for other requests' prefills.
    long_prefill_threshold: int = 0
    enable_prefix_caching: bool = False
    eos_token_ids: frozenset[int] = field(default_factory=frozenset)

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

    @property
    def num_usable_blocks(self) -> int:
        return self.num_blocks - 1

    @property
    def max_chunk_tokens(self) -> int:
        """The most tokens one request's prefill chunk may take in a step."""
        if self.long_prefill_threshold == 0:
            return self.max_num_batched_tokens
        return min(self.long_prefill_threshold, self.max_num_batched_tokens)

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks that hold the KV of `num_tokens` positions."""
        return -(-num_tokens // self.block_size)
