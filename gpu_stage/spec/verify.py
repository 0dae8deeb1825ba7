"""Verification of a row's draft tokens: the target samples at each of its k + 1 positions, and
the guesses are accepted while they equal what it sampled; the first sample that differs (or, all
accepted, the sample after the last guess: the bonus token) ends the run.

For a deterministic draft (prompt lookup, and the draft model, which guesses greedily) this is
rejection sampling: a guess d with draft probability 1 is accepted with probability p(d), and on
rejection the token comes from p with d excluded, renormalised, which is what "sample x ~ p,
emit x, stop if x != d" gives. So every emitted token has exactly the target's distribution.

Each row draws with the uniform of its output position from the request's own generator (drawn
ahead into SamplingState.lookahead, given back unused when guesses are rejected), so position n of
a seeded reply uses the same uniform with and without speculation: a seeded request is
reproducible, and the same as without speculation wherever the logits are.
"""
from __future__ import annotations

from collections import deque
from typing import Sequence

import torch

from gpu_stage.sampling.rows import SamplingRow, draw_uniform
from gpu_stage.step_layout import Chunk


def verify_rows(chunk: Chunk, params, prompt_token_ids: list[int], output_token_ids: list[int],
                generator: torch.Generator, lookahead: deque[float], num_sampled: int) -> list[SamplingRow]:
    """The chunk's num_draft + 1 rows: row i samples output position num_sampled + i (min_tokens
    reads it) with that position's uniform (drawn ahead into `lookahead`, not yet consumed)."""
    num_rows = chunk.num_draft + 1
    if not params.greedy:
        while len(lookahead) < num_rows:
            lookahead.append(draw_uniform(generator))
    return [SamplingRow(params, prompt_token_ids, output_token_ids, generator, 0, num_sampled + i,
                        None if params.greedy else lookahead[i]) for i in range(num_rows)]


def num_accepted(sampled: Sequence[int], drafts: Sequence[int]) -> int:
    """Leading guesses equal to the target's sample at the position before them."""
    n = 0
    for token, guess in zip(sampled, drafts):
        if token != guess:
            break
        n += 1
    return n


def consume(lookahead: deque[float], num_emitted: int) -> None:
    """The uniforms of the emitted positions are used; the rest stay for the next step."""
    for _ in range(min(num_emitted, len(lookahead))):
        lookahead.popleft()
