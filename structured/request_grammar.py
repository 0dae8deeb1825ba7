"""RequestGrammar: one constrained sequence's matcher and how far it has read the sequence's output.

It catches up from the output ids the runner records for the request (SamplingState's list), so
that it survives preemption (the runner keeps that state) and never depends on which step brought
a token. With `after_token_ids` (a reasoning parser's `</think>`) the grammar applies only to what
follows their first occurrence; before that the row is free.
"""
from __future__ import annotations

import torch

from structured.backend import CompiledGrammar, GrammarMatcher


class RequestGrammar:
    def __init__(self, compiled: CompiledGrammar, after_token_ids: tuple[int, ...] = ()) -> None:
        self.matcher: GrammarMatcher = compiled.matcher()
        self.after = after_token_ids
        self.active = not after_token_ids  # constraining now (the opening ids were seen)
        self.num_read = 0  # output ids read so far
        self.rejected = False  # a token the grammar did not allow was sampled (it stops constraining)

    def catch_up(self, output_token_ids: list[int]) -> None:
        """Read the output ids not read yet."""
        for i in range(self.num_read, len(output_token_ids)):
            token = output_token_ids[i]
            if self.active:
                if not self.rejected and not self.matcher.accept(token):
                    self.rejected = True
            elif i + 1 >= len(self.after) and tuple(output_token_ids[i + 1 - len(self.after): i + 1]) == self.after:
                self.active = True
        self.num_read = len(output_token_ids)

    @property
    def constrains(self) -> bool:
        """Whether the next token is masked."""
        return self.active and not self.rejected

    def fill(self, bitmask: torch.Tensor, row: int) -> None:
        self.matcher.fill_bitmask(bitmask, row)
