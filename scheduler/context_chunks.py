"""Context-aware chunks for long prompts, an option of the lanes policy.

A prefill chunk's step costs its new tokens' linear layers plus their attention over the context
before them: per new token, 1 + weight x context linear-token equivalents, where `weight` is the
attention FLOPs per (query, cached key) pair over the linear FLOPs per token
(ModelConfig.attention_weight; for Llama-3-8B,
4 x 32 heads x 128 x 32 layers / 13.96 GFLOP = 3.76e-5: at 128K of context a new token costs 5.9
times what it costs at the start). So a fixed chunk's step grows with the context: 8,192 tokens
take ~0.2 s at the start of a 128K prompt and ~1.1 s at its end on the H200, and a short request
that arrives meanwhile waits for that step. With a weight set, a long prompt's chunk is cut to
`limit / (1 + weight x context)` (never below FLOOR tokens: smaller products run below the
matrix ceiling; a multiple of ALIGN: the long-context attention's query buckets), so its every step
costs about what a chunk of `limit` costs at no context. With cuts a prefill's age (lanes' aging)
counts only the steps it waits, not those it progresses in: cut chunks take more steps (~100 for
128K), and promoted after 64 a long prompt would head every step with shorts joining behind its
chunk. Off (weight 0) by default: which is better for a 128K prompt's TTFT against a short
request's wait on the GPU is what bench/long_chunks.py measures.
"""
from __future__ import annotations

FLOOR = 2048
ALIGN = 1024


def context_chunk(limit: int, context: int, weight: float) -> int:
    """The chunk limit for a prefill whose first new token sits after `context` tokens."""
    if weight <= 0 or context <= 0:
        return limit
    cut = int(limit / (1.0 + weight * context)) // ALIGN * ALIGN
    return max(min(limit, FLOOR), cut)

