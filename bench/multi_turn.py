"""Multi-turn conversations: the workload that makes a prefix cache (and the KV tiers under it) pay.

Each conversation opens with a document of its own (`doc_len` tokens): the *opening* turn, cold,
since no other prompt shares it. Then come `num_turns` *returning* turns, so a conversation makes
1 + num_turns requests. Returning turn k sends

    prompt_k = prompt_{k-1} + reply_{k-1} + user_k        (user_k: `turn_len` new tokens)

so the server sees a growing shared prefix: everything but the new tail was in some earlier request.
With the issue's figures (2,048 + 8 x (256 + 128)) contexts grow to 5,248 tokens.

The reply that goes back into the next prompt:
- text prompts: the reply's text, appended as is. Re-tokenizing `prompt + reply` can merge tokens
  across the boundary differently from how the model produced them; GPT-2-style tokenizers split on
  spaces first, so that changes at most the last word, which costs the prefix hit its last block.
- token-id prompts: the reply's ids when the server streams them (vLLM's `return_token_ids`);
  our server does not, so the client appends a seeded stand-in of `output_len` ids instead. The
  prefix hit then covers the previous prompt but not the previous reply (its cached blocks hold
  the ids the model sampled): each returning turn recomputes ~`output_len` tokens more than a chat
  client that sends the reply back verbatim would, the same for every server configuration.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench.workloads import DEFAULT_VOCAB_SIZE, BenchRequest, PromptFormat, PromptMaker

Prompt = str | list[int]


@dataclass(frozen=True, slots=True)
class MultiTurnSpec:
    num_conversations: int = 64
    num_turns: int = 8  # returning turns, after the opening one
    doc_len: int = 2048
    turn_len: int = 256
    output_len: int = 128
    seed: int = 0
    prompt_format: PromptFormat = "tokens"
    vocab_size: int = DEFAULT_VOCAB_SIZE

    def __post_init__(self) -> None:
        if self.num_conversations < 1 or self.num_turns < 0:
            raise ValueError(f"need at least 1 conversation and 0 returning turns, got "
                             f"{self.num_conversations} and {self.num_turns}")
        if min(self.doc_len, self.turn_len, self.output_len) < 1:
            raise ValueError(f"doc, turn and output lengths must be >= 1, got "
                             f"{self.doc_len}, {self.turn_len}, {self.output_len}")

    @property
    def max_context_tokens(self) -> int:
        """Tokens of a conversation's KV after its last reply: its largest footprint."""
        return self.doc_len + self.num_turns * (self.turn_len + self.output_len) + self.output_len


def working_set_tokens(num_conversations: int, num_turns: int, doc_len: int, turn_len: int,
                       output_len: int) -> int:
    """KV tokens that keep every conversation's whole context cached: conversations x final context.

    Text prompts may add a BOS token per conversation and drift by a few tokens per turn."""
    spec = MultiTurnSpec(num_conversations, num_turns, doc_len, turn_len, output_len)
    return num_conversations * spec.max_context_tokens


def suggested_num_kv_blocks(working_set: int, block_size: int = 16, fraction: float = 0.25) -> int:
    """`ttft serve --num-kv-blocks` that caps the device pool at `fraction` of the working set."""
    if block_size < 1 or not 0 < fraction:
        raise ValueError(f"block_size must be >= 1 and fraction > 0, got {block_size}, {fraction}")
    return math.ceil(working_set * fraction / block_size)


@dataclass(frozen=True, slots=True)
class TurnReply:
    """What a turn's reply contributes to the next prompt."""

    text: str
    token_ids: list[int] | None  # None unless the server streamed them
    num_tokens: int  # usage.completion_tokens (or content chunks)


@dataclass(frozen=True, slots=True)
class Conversation:
    index: int
    document: Prompt
    user_turns: tuple[Prompt, ...]  # one per returning turn
    stand_in_replies: tuple[list[int], ...]  # token-id prompts: one per returning turn; else empty


def make_conversations(spec: MultiTurnSpec) -> list[Conversation]:
    """Every conversation's fixed parts, drawn from one generator: the same spec gives the same parts."""
    maker = PromptMaker(np.random.default_rng(spec.seed), spec.prompt_format, spec.vocab_size)
    out = []
    for c in range(spec.num_conversations):
        document = maker.make(spec.doc_len)
        user_turns = tuple(maker.make(spec.turn_len) for _ in range(spec.num_turns))
        stand_ins: tuple[list[int], ...] = ()
        if spec.prompt_format == "tokens":
            stand_ins = tuple(maker.make(spec.output_len) for _ in range(spec.num_turns))  # type: ignore[misc]
        out.append(Conversation(c, document, user_turns, stand_ins))
    return out


def request_id(conversation: int, turn: int) -> str:
    return f"conv-{conversation}-turn-{turn}"


def opening_request(conv: Conversation, spec: MultiTurnSpec) -> BenchRequest:
    return BenchRequest(request_id(conv.index, 0), conv.document, spec.doc_len, spec.output_len)


def next_request(conv: Conversation, spec: MultiTurnSpec, turn: int, previous: BenchRequest,
                 reply: TurnReply) -> BenchRequest:
    """Returning turn `turn` (1-based): the previous prompt, its reply, then new user tokens."""
    if not 1 <= turn <= spec.num_turns:
        raise ValueError(f"returning turns are 1..{spec.num_turns}, got {turn}")
    user = conv.user_turns[turn - 1]
    if isinstance(previous.prompt, list):
        ids = reply.token_ids if reply.token_ids else conv.stand_in_replies[turn - 1]
        prompt: Prompt = previous.prompt + ids + user  # type: ignore[operator]
        reply_len = len(ids)
    else:
        prompt = previous.prompt + reply.text + " " + user  # type: ignore[operator]
        reply_len = reply.num_tokens
    return BenchRequest(request_id(conv.index, turn), prompt, previous.prompt_len + reply_len + spec.turn_len,
                        spec.output_len)
