"""Deterministic request generators: the same (workload, parameters, seed) always gives the same requests.

Prompts come in two forms:
- token ids (`prompt_format="tokens"`): exact lengths, no tokenizer needed on the client; ids are drawn
  from a middle range of the vocabulary so they avoid the special tokens every family keeps at the
  bottom (SmolLM2, Llama-2) or the top (Llama-3, Qwen) of its vocabulary.
- text (`prompt_format="text"`): words from `WORDS`, each a single token with or without a leading space
  in GPT-2-style byte-level BPE (checked against SmolLM2's vocabulary), so N words tokenize to about N
  tokens (plus BOS where the server adds one). Chat needs this form.

Every prompt starts with random content of its own, so no two requests share a prefix by accident
(which would let a prefix cache flatter the numbers); `shared_prefix` shares one on purpose.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

PromptFormat = Literal["tokens", "text"]

WORDS: tuple[str, ...] = tuple(
    """the of and to in is was for on that with as by at from his it an were are which this be or her had
    first not but also after new he one their its has two they have who been all other she time most more
    into during over only year years city three would world some made when later there can where known
    states between used many state while people under national through part school both such war then may
    him since team including second being until film well season american up before family high series
    number called about name early four out them what so game life work music group government back area
    left house form end came these public each long system five small water make best river old same land
    day main field place light power great good point side head body order line country sea book town open
    right home general paper market road story women church human""".split()
)

DEFAULT_VOCAB_SIZE = 32000  # every supported family has at least this many ids
MIN_TOKEN_ID = 100  # below this live the special tokens of SmolLM2/Llama-2 style vocabularies


@dataclass(frozen=True, slots=True)
class BenchRequest:
    request_id: str
    prompt: str | list[int]
    prompt_len: int  # intended prompt tokens (exact for ids, approximate for text)
    max_tokens: int


def token_id_range(vocab_size: int) -> tuple[int, int]:
    """[low, high) of ids safe to use as random prompt tokens for a vocabulary of this size."""
    if vocab_size < 8:
        raise ValueError(f"vocab_size must be at least 8, got {vocab_size}")
    low = min(MIN_TOKEN_ID, vocab_size // 4)
    return low, min(vocab_size, DEFAULT_VOCAB_SIZE)


class PromptMaker:
    """Builds prompts of a given length from one seeded generator, in either format."""

    def __init__(self, rng: np.random.Generator, prompt_format: PromptFormat, vocab_size: int) -> None:
        if prompt_format not in ("tokens", "text"):
            raise ValueError(f"prompt_format must be 'tokens' or 'text', got {prompt_format!r}")
        self.rng = rng
        self.prompt_format = prompt_format
        self.low, self.high = token_id_range(vocab_size)

    def make(self, num_tokens: int) -> str | list[int]:
        if num_tokens < 1:
            raise ValueError(f"prompt length must be at least 1 token, got {num_tokens}")
        if self.prompt_format == "tokens":
            return self.rng.integers(self.low, self.high, size=num_tokens).tolist()
        picks = self.rng.integers(0, len(WORDS), size=num_tokens)
        return " ".join(WORDS[i] for i in picks)

    def join(self, prefix: str | list[int], suffix: str | list[int]) -> str | list[int]:
        if isinstance(prefix, list):
            return prefix + suffix  # type: ignore[operator]
        return prefix + " " + suffix  # type: ignore[operator]


def _check_lengths(num_requests: int, output_len: int) -> None:
    if num_requests < 0:
        raise ValueError(f"num_requests must be >= 0, got {num_requests}")
    if output_len < 1:
        raise ValueError(f"output_len must be >= 1, got {output_len}")


def random_workload(
    num_requests: int,
    input_len: int,
    output_len: int,
    seed: int = 0,
    prompt_format: PromptFormat = "tokens",
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    range_ratio: float = 0.0,
) -> list[BenchRequest]:
    """Fixed output lengths; input lengths fixed, or with `range_ratio` r drawn uniformly from
    [input_len * (1 - r), input_len * (1 + r)] (vllm bench serve's `random` dataset and its
    --random-range-ratio): prompts of lengths the server has not met before."""
    _check_lengths(num_requests, output_len)
    if not 0.0 <= range_ratio < 1.0:
        raise ValueError(f"range_ratio must be in [0, 1), got {range_ratio}")
    rng = np.random.default_rng(seed)
    maker = PromptMaker(rng, prompt_format, vocab_size)
    low, high = max(1, round(input_len * (1 - range_ratio))), round(input_len * (1 + range_ratio))
    lengths = rng.integers(low, high + 1, num_requests) if range_ratio else [input_len] * num_requests
    return [BenchRequest(f"random-{i}", maker.make(int(n)), int(n), output_len) for i, n in enumerate(lengths)]


def mixed_workload(
    num_requests: int,
    short_len: int,
    long_len: int,
    long_fraction: float,
    output_len: int,
    seed: int = 0,
    prompt_format: PromptFormat = "tokens",
    vocab_size: int = DEFAULT_VOCAB_SIZE,
) -> list[BenchRequest]:
    """Short and long prompts interleaved at random; exactly round(long_fraction * N) are long."""
    _check_lengths(num_requests, output_len)
    if not 0.0 <= long_fraction <= 1.0:
        raise ValueError(f"long_fraction must be in [0, 1], got {long_fraction}")
    rng = np.random.default_rng(seed)
    num_long = round(long_fraction * num_requests)
    is_long = np.zeros(num_requests, dtype=bool)
    is_long[rng.permutation(num_requests)[:num_long]] = True
    maker = PromptMaker(rng, prompt_format, vocab_size)
    out = []
    for i in range(num_requests):
        n = long_len if is_long[i] else short_len
        out.append(BenchRequest(f"mixed-{i}", maker.make(n), n, output_len))
    return out


def shared_prefix_workload(
    num_groups: int,
    requests_per_group: int,
    prefix_len: int,
    suffix_len: int,
    output_len: int,
    seed: int = 0,
    prompt_format: PromptFormat = "tokens",
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    shuffle: bool = True,
) -> list[BenchRequest]:
    """Groups of requests sharing a long system prefix, each with its own suffix.

    Request ids are `prefix-<group>-<index>` so a report can tell the groups apart. With shuffle the
    groups are interleaved (many live prefixes at once); without, each group runs back to back.
    """
    _check_lengths(num_groups * requests_per_group, output_len)
    rng = np.random.default_rng(seed)
    maker = PromptMaker(rng, prompt_format, vocab_size)
    out = []
    for g in range(num_groups):
        prefix = maker.make(prefix_len)
        for j in range(requests_per_group):
            prompt = maker.join(prefix, maker.make(suffix_len))
            out.append(BenchRequest(f"prefix-{g}-{j}", prompt, prefix_len + suffix_len, output_len))
    if shuffle:
        out = [out[i] for i in rng.permutation(len(out))]
    return out


REFERENCE_LENGTHS = (512, 1024, 2048, 4096)


def reference_workload(
    num_requests: int,
    output_len: int = 128,
    seed: int = 0,
    prompt_format: PromptFormat = "tokens",
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    lengths: tuple[int, ...] = REFERENCE_LENGTHS,
) -> list[BenchRequest]:
    """The reference workload of PERFORMANCE.md: prompts cycling 512/1024/2048/4096, 128 output tokens."""
    _check_lengths(num_requests, output_len)
    maker = PromptMaker(np.random.default_rng(seed), prompt_format, vocab_size)
    out = []
    for i in range(num_requests):
        n = lengths[i % len(lengths)]
        out.append(BenchRequest(f"reference-{i}", maker.make(n), n, output_len))
    return out
