"""The packed buffer of a step (StepInputs): its segments (Layout), the fixed shapes of captured
steps (GraphShape), and a step's plan (its sizes and the padded shape it is laid out in).

Packed, int32, 16-byte aligned segments (floats stored as their bits):
    input_ids [T] | positions [T] | slot_mapping [T] | cu_seqlens_q [B+1] | seq_lens [B] |
    logits_indices [S] | block_tables [B, W] | sampled_seq, sampled_seq_lens [S] | sampled_cu [S+1] |
    sampling: greedy, temperature, top_k, top_p, min_p, uniform, penalty_slot, repetition,
    frequency, presence [R each] | feed_dst, feed_src [F each] | prompt_targets [P]
The offsets are a function of (T, B, W, S, R) alone (the feed and prompt segments come last).
An eager step with prompt logprobs (P rows) lists their token rows after the sampled rows in
logits_indices (S counts both) and each row's next prompt token in prompt_targets. A CUDA graph
captured for a bucket therefore reads the same device addresses at every replay of that bucket:
staging a step with the bucket's `GraphShape` (rows padded up to it, block tables W_max wide) lands
it exactly where the graph looks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np
import torch

ALIGN = 4  # int32 elements: 16 bytes
SAMPLING_SEGMENTS = ("greedy", "temperature", "top_k", "top_p", "min_p", "uniform", "penalty_slot", "repetition",
                     "frequency", "presence")


class Chunk(Protocol):  # stages.messages.ScheduledChunk satisfies it
    request_id: str
    token_ids: list[int]
    start_pos: int
    block_table: list[int]
    sample: bool

    @property
    def num_sampled_positions(self) -> int: ...  # logits at its last this many positions when it samples


@dataclass(frozen=True)
class GraphShape:
    """The fixed shape of a captured step. Decode: num_seqs sequences of one token each, logits for
    every row. Prefill: one sequence of up to num_tokens tokens, logits for its last token. Mixed:
    up to num_seqs sequences (prefill chunks and decodes) of up to num_tokens tokens in all; the
    missing sequences are one-token pads on the null block (as decode's), the tokens left over
    belong to no sequence (as prefill's); logits for every sequence's last token. A family's (a mixed
    shape whose `family` names the GraphFamily it belongs to, gpu_stage/graph_families.py): padded
    as a mixed shape, sampled as one too, or with `all_logits` at every token (each sampled
    position of every row) in the eager step's order, then the pads'."""

    num_tokens: int
    num_seqs: int
    width: int  # block-table columns
    decode: bool
    mixed: bool = False
    family: str = ""  # with mixed: the GraphFamily's name ("": the runner's own shape)
    all_logits: bool = False  # with mixed: every token is a logits row

    @property
    def pad_slot(self) -> int:
        return 0 if self.decode else -1  # decode pads are sequences (null block); prefill pads: no store

    @property
    def logits_per_seq(self) -> bool:
        """Logits row i is sequence i's (decode, mixed); else one row per sampled position of each
        sampled chunk, in order (eager, prefill and all_logits shapes)."""
        return (self.decode or self.mixed) and not self.all_logits


@dataclass(frozen=True)
class Layout:
    offsets: dict[str, tuple[int, int]]  # name -> (start, length)
    size: int

    def view(self, buf: torch.Tensor | np.ndarray, name: str) -> torch.Tensor | np.ndarray:
        """The segment `name` of a buffer laid out so: the host array being packed or the device buffer."""
        start, length = self.offsets[name]
        return buf[start : start + length]


def make_layout(num_tokens: int, num_seqs: int, width: int, num_logits: int, num_rows: int,
                num_feeds: int = 0, num_prompt_rows: int = 0) -> Layout:
    sizes = [("input_ids", num_tokens), ("positions", num_tokens), ("slot_mapping", num_tokens),
             ("cu_seqlens_q", num_seqs + 1), ("seq_lens", num_seqs), ("logits_indices", num_logits),
             ("block_tables", num_seqs * width), ("sampled_seq", num_logits), ("sampled_seq_lens", num_logits),
             ("sampled_cu", num_logits + 1)] + [(name, num_rows) for name in SAMPLING_SEGMENTS] + [
             ("feed_dst", num_feeds), ("feed_src", num_feeds), ("prompt_targets", num_prompt_rows)]
    offsets, pos = {}, 0
    for name, n in sizes:
        offsets[name] = (pos, n)
        pos += -(-n // ALIGN) * ALIGN
    return Layout(offsets, pos)


WIDTH_MULTIPLE = 16


def round_width(width: int) -> int:
    """Block-table columns, rounded up to a multiple of 16: the row stride is an integer argument
    of the attention kernels, which Triton specialises on being 1 or divisible by 16; one class
    for every step (graphs' and eager) means one compiled variant, none first met while serving."""
    return -(-width // WIDTH_MULTIPLE) * WIDTH_MULTIPLE


@dataclass
class StepPlan:
    """A step's sizes on the host: its sequences' lengths and the (padded) shape it is laid out in."""

    q_lens: np.ndarray  # [B] tokens of each sequence in this step
    starts: np.ndarray  # [B] its first position
    seq_lens: np.ndarray  # [B] its context after the step
    widths: np.ndarray  # [B] block-table columns it needs
    cu: np.ndarray  # [B+1] cumulative q_lens
    num_tokens: int
    num_tokens_laid: int  # T of the layout (padded)
    num_seqs_laid: int  # B of the layout (padded)
    width: int  # W of the layout
    logits_rows: np.ndarray  # [S] the token rows whose logits the model computes
    layout: Layout
    num_prompt_rows: int = 0  # the last of logits_rows: prompt positions (prompt logprobs)

    @property
    def num_seqs(self) -> int:
        return len(self.q_lens)

    @property
    def num_pad_seqs(self) -> int:
        return self.num_seqs_laid - self.num_seqs


def plan_step(chunks: Sequence[Chunk], block_size: int, shape: GraphShape | None, num_rows: int,
              num_feeds: int, prompt_rows: Sequence[int] = ()) -> StepPlan:
    """The step's lengths, its layout's shape (the step's own, or `shape` padded), and its logits
    rows: the sampled ones, then `prompt_rows` (token rows of an eager step, for prompt logprobs)."""
    assert shape is None or not prompt_rows, "prompt logprobs run eagerly"
    num_seqs = len(chunks)
    q_lens = np.fromiter((len(c.token_ids) for c in chunks), np.int64, num_seqs)
    starts = np.fromiter((c.start_pos for c in chunks), np.int64, num_seqs)
    seq_lens = starts + q_lens
    num_tokens = int(q_lens.sum())
    widths = -(-seq_lens // block_size)  # block-table columns each sequence needs
    for chunk, width in zip(chunks, widths.tolist()):
        assert len(chunk.block_table) >= width, (chunk.request_id, len(chunk.block_table), width)
    if shape is None:
        lay_t, lay_b, lay_w = num_tokens, num_seqs, round_width(int(widths.max()))
    else:
        lay_t, lay_b, lay_w = shape.num_tokens, shape.num_seqs, shape.width
    assert num_tokens <= lay_t and num_seqs <= lay_b and int(widths.max()) <= lay_w, "step exceeds its shape"
    num_pad_seqs = lay_b - num_seqs
    mixed = shape is not None and shape.mixed
    num_spare = lay_t - num_tokens  # pad sequences take one token each; mixed shapes have more
    assert num_spare >= num_pad_seqs and (mixed or num_pad_seqs == 0 or num_spare == num_pad_seqs), \
        "padded sequences take one token each"
    cu = np.zeros(num_seqs + 1, np.int64)
    np.cumsum(q_lens, out=cu[1:])
    if shape is not None and shape.decode:
        logits_rows = np.arange(lay_b)
    elif shape is not None and shape.all_logits:  # the eager step's rows, then the rest: every token a row
        rows = eager_logits_rows(chunks, cu)
        logits_rows = np.concatenate([rows, np.arange(len(rows), lay_t)])
    elif mixed:  # each sequence's last token, then each pad sequence's token
        logits_rows = np.concatenate([cu[1:] - 1, num_tokens + np.arange(num_pad_seqs)])
    else:
        logits_rows = eager_logits_rows(chunks, cu)
        if len(prompt_rows):
            logits_rows = np.concatenate([logits_rows, np.asarray(prompt_rows, np.int64)])
    layout = make_layout(lay_t, lay_b, lay_w, len(logits_rows), num_rows, num_feeds, len(prompt_rows))
    return StepPlan(q_lens, starts, seq_lens, widths, cu, num_tokens, lay_t, lay_b, lay_w, logits_rows, layout,
                    len(prompt_rows))


def eager_logits_rows(chunks: Sequence[Chunk], cu: np.ndarray) -> np.ndarray:
    """The last num_sampled_positions tokens of each sampled chunk (the last one, unless it carries
    guesses; row 0 when nothing is sampled: a placeholder)."""
    return np.array([r for i, c in enumerate(chunks) if c.sample
                     for r in range(cu[i + 1] - c.num_sampled_positions, cu[i + 1])] or [0], np.int64)


def logits_rows(chunks: Sequence[Chunk], chunk_index: Sequence[int]) -> list[int]:
    """Each sampled row's row in an eager step's logits (num_sampled_positions per sampled chunk, in
    order), from the chunk index of each row (repeated for a chunk of several)."""
    first, n = [], 0
    for chunk in chunks:
        first.append(n)
        n += chunk.num_sampled_positions if chunk.sample else 0
    out, prev, offset = [], -1, 0
    for i in chunk_index:
        offset = offset + 1 if i == prev else 0
        prev = i
        out.append(first[i] + offset)
    return out
