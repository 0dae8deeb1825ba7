"""Workloads for the fleet simulator (bench/sim/fleet.py): conversations whose turns come back, and
independent requests, as token ids.

multi-turn  conversations of `num_turns` turns, each with its own 2,048-token system prompt; a turn
            adds a 256-token user message to the whole conversation so far (earlier prompts and
            replies), so a returning turn's prefix is cached where its conversation last ran. The
            next turn comes `think_s` (exponential) after the reply ends: a closed loop per
            conversation. Conversations start as a Poisson process. With `num_system_prompts`, all
            conversations share that many system prompts: the case where following the longest
            cached prefix piles requests onto one replica.
uniform     independent 1,024-token prompts, nothing shared: the policies can only balance load.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

SYSTEM_TOKENS, USER_TOKENS, OUTPUT_TOKENS, UNIFORM_TOKENS = 2048, 256, 128, 1024
_SPAN = 1_000_000  # token ids per conversation: none is shared by accident
_SHARED_BASE = 3_000  # shared system prompts' ids start past any conversation's (and stay under 2**32)


@dataclass
class Turn:
    conversation: int
    turn: int
    arrival_s: float
    prompt_token_ids: list[int]
    max_tokens: int = OUTPUT_TOKENS


@dataclass
class Conversation:
    index: int
    start_s: float
    num_turns: int
    system_group: int | None = None  # conversations of one group share their system prompt
    history: list[int] = field(default_factory=list)  # the prompt and replies so far

    def user_tokens(self, turn: int, num: int) -> list[int]:
        base = 1000 + self.index * _SPAN + SYSTEM_TOKENS + turn * (USER_TOKENS + OUTPUT_TOKENS) * 2
        return list(range(base, base + num))

    def first_turn(self) -> Turn:
        owner = self.index if self.system_group is None else _SHARED_BASE + self.system_group
        system = list(range(1000 + owner * _SPAN, 1000 + owner * _SPAN + SYSTEM_TOKENS))
        self.history = system + self.user_tokens(0, USER_TOKENS)
        return Turn(self.index, 0, self.start_s, list(self.history))

    def next_turn(self, turn: int, reply: list[int], arrival_s: float) -> Turn | None:
        if turn >= self.num_turns:
            return None
        self.history += reply + self.user_tokens(turn, USER_TOKENS)
        return Turn(self.index, turn, arrival_s, list(self.history))


def conversations(num: int, rate: float, num_turns: int, seed: int,
                  num_system_prompts: int | None = None) -> list[Conversation]:
    """`num_system_prompts`: that many system prompts shared among all conversations (None: one each)."""
    rng, t, out = random.Random(seed), 0.0, []
    for i in range(num):
        t += rng.expovariate(rate)
        group = None if num_system_prompts is None else i % num_system_prompts
        out.append(Conversation(i, t, num_turns, group))
    return out


def uniform(num: int, rate: float, seed: int) -> list[Turn]:
    rng, t, out = random.Random(seed), 0.0, []
    for i in range(num):
        t += rng.expovariate(rate)
        base = 1000 + i * _SPAN
        out.append(Turn(i, 0, t, list(range(base, base + UNIFORM_TOKENS))))
    return out
