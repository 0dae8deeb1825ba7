"""StepInputs: a step's integer inputs packed into a persistent (pinned) host buffer and sent to the
device with ONE host-to-device copy into a persistent device buffer; the model reads views of it.
The buffer's segments, their offsets and a step's plan (its sizes, padded to a GraphShape for a
CUDA graph, which then reads the same device addresses at every replay): step_layout.py.

Padding: extra sequences get one token each at position 0 with seq_len 1 and an all-zero block
table row (the null block 0, which the scheduler never hands out); extra tokens get `pad_slot`
(0: the null block; -1: not stored). Their outputs are ignored.

Two pinned buffers alternate (or `num_host_buffers`), each guarded by an event recorded after its
copy, so packing step N+1 never overwrites memory that step N's copy may still be reading. (A model
that stages k forwards per step back to back gets k + 1 buffers: the host never waits on the
device for a free one within a step.) On CPU the views are the host
buffer itself and nothing is copied.

Feeds (async scheduling): a decode built before its input token was sampled carries
PENDING_TOKEN. Its input is taken on the device from the previous step's sampled ids:
input_ids[feed_dst[i]] = previous_ids[feed_src[i]], right after the copy, so no host value is
needed. (On CPU the same indexing runs on the host buffer.)
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from itertools import chain
from typing import Callable, Sequence

import numpy as np
import torch

from gpu_stage.attention.metadata import AttentionMetadata, SampledRows, locate_rows
from gpu_stage.model.interface import CausalLM
from gpu_stage.sampling.prompt_logprobs import PROMPT_SLICE_ROWS, PromptRows
from gpu_stage.sampling.rows import SamplingFlags, SamplingRow, SamplingTensors, penalty_parameters, row_parameters
from gpu_stage.step_layout import Chunk, GraphShape, Layout, StepPlan, make_layout, plan_step, round_width

Feed = tuple[list[int], list[int], torch.Tensor]  # (token indices, rows of the ids tensor, the ids on the device)
Segment = Callable[[str], np.ndarray]  # a segment of the host array being packed, by name


@dataclass
class StagedStep:
    input_ids: torch.Tensor  # [T] int32
    positions: torch.Tensor  # [T] int32
    logits_indices: torch.Tensor  # [S] int32
    meta: AttentionMetadata
    sampling: SamplingTensors | None  # None when no rows were given
    layout: Layout
    num_real_tokens: int
    num_real_seqs: int
    host: torch.Tensor | None = None  # the packed host buffer (what tensor parallelism broadcasts)
    num_prompt_rows: int = 0  # the last rows of logits_indices: prompt positions (prompt logprobs)
    prompt_targets: torch.Tensor | None = None  # [P] their next prompt tokens, on the device


def forward_step(model: CausalLM, staged: StagedStep, kv_cache,
                 on_prompt_logits: Callable[[int, torch.Tensor], None] | None = None) -> torch.Tensor:
    """The model on a staged step and a KV pool -> logits [S, vocab] of the
    sampled rows. A step with prompt rows runs the lm_head on those a slice at a time, handing
    each slice's logits to `on_prompt_logits(first prompt row, logits)` (None: a tensor-parallel
    worker, which makes the same lm_head calls for their gather and drops the results)."""
    args = staged.input_ids, staged.positions, kv_cache, staged.meta, staged.logits_indices
    num_prompt_rows = staged.num_prompt_rows
    if not num_prompt_rows:
        return model(*args)
    h = model.hidden_states(*args)  # [S + P, hidden]
    num_sampled = h.shape[0] - num_prompt_rows
    logits = model.compute_logits(h[:num_sampled])
    for start in range(0, num_prompt_rows, PROMPT_SLICE_ROWS):
        part = model.compute_logits(h[num_sampled + start : num_sampled + start + PROMPT_SLICE_ROWS])
        if on_prompt_logits is not None:
            on_prompt_logits(start, part)
    return logits


def pack_tokens(seg: Segment, chunks: Sequence[Chunk], plan: StepPlan, block_size: int,
                shape: GraphShape | None) -> None:
    """input_ids, positions, block_tables, slot_mapping, cu_seqlens_q, seq_lens, logits_indices."""
    bs, num_tokens, num_seqs, num_pad_seqs = block_size, plan.num_tokens, plan.num_seqs, plan.num_pad_seqs
    ids = seg("input_ids")
    ids[:num_tokens] = np.fromiter(chain.from_iterable(c.token_ids for c in chunks), np.int32, num_tokens)
    ids[num_tokens:] = 0
    ids[ids < 0] = 0  # PENDING_TOKEN: filled in from the feed later (or left 0: dropped anyway)
    seq_of_token = np.repeat(np.arange(num_seqs), plan.q_lens)  # [T]
    positions = np.arange(num_tokens) - plan.cu[seq_of_token] + plan.starts[seq_of_token]
    seg("positions")[:num_tokens] = positions
    seg("positions")[num_tokens:] = 0
    tables = seg("block_tables").reshape(plan.num_seqs_laid, plan.width)
    tables[:] = 0
    flat = np.fromiter(chain.from_iterable(c.block_table[:w] for c, w in zip(chunks, plan.widths.tolist())),
                       np.int32, int(plan.widths.sum()))
    tables[:num_seqs][np.arange(plan.width)[None, :] < plan.widths[:, None]] = flat
    slots = seg("slot_mapping")
    slots[:num_tokens] = tables[seq_of_token, positions // bs].astype(np.int64) * bs + positions % bs
    slots[num_tokens:] = 0 if shape is None else shape.pad_slot
    if shape is not None and shape.mixed:
        slots[num_tokens : num_tokens + num_pad_seqs] = 0  # pad sequences store on the null block
    cu_seg = seg("cu_seqlens_q")
    cu_seg[: num_seqs + 1] = plan.cu
    cu_seg[num_seqs + 1 :] = num_tokens + np.arange(1, num_pad_seqs + 1)
    seg("seq_lens")[:num_seqs] = plan.seq_lens
    seg("seq_lens")[num_seqs:] = 1
    seg("logits_indices")[:] = plan.logits_rows


def pack_sampled_rows(seg: Segment, plan: StepPlan) -> np.ndarray | None:
    """Each sampled row's sequence and context, for a last layer that computes those rows alone
    (pad sequences: one token each, after the real ones) -> the rows' context lengths. A step that
    samples every row (a decode) has no use for them: nothing is computed or staged (None)."""
    if len(plan.logits_rows) >= plan.num_tokens_laid:
        return None
    num_pad_seqs = plan.num_pad_seqs
    sampled_seq, sampled_lens = locate_rows(
        plan.logits_rows, np.concatenate([plan.cu, plan.num_tokens + np.arange(1, num_pad_seqs + 1)]),
        np.concatenate([plan.seq_lens, np.ones(num_pad_seqs, np.int64)]))
    seg("sampled_seq")[:] = sampled_seq
    seg("sampled_seq_lens")[:] = sampled_lens
    seg("sampled_cu")[:] = np.arange(len(plan.logits_rows) + 1)
    return sampled_lens


def pack_sampling(seg: Segment, rows: Sequence[SamplingRow], uniforms: Sequence[float],
                  vocab_size: int) -> SamplingFlags:
    """The rows' sampling parameters (floats as their bits); the penalty segments only when read."""
    flags = SamplingFlags.of(list(rows), vocab_size)
    temperature, top_k, top_p, min_p = row_parameters(list(rows))
    seg("greedy")[:] = [r.params.greedy for r in rows]
    seg("temperature").view(np.float32)[:] = temperature
    seg("top_k")[:] = top_k
    seg("top_p").view(np.float32)[:] = top_p
    seg("min_p").view(np.float32)[:] = min_p
    seg("uniform").view(np.float32)[:] = uniforms
    if flags.need_penalties:  # else the segments are never read
        slot, repetition, frequency, presence = penalty_parameters(list(rows))
        seg("penalty_slot")[:] = slot
        seg("repetition").view(np.float32)[:] = repetition
        seg("frequency").view(np.float32)[:] = frequency
        seg("presence").view(np.float32)[:] = presence
    return flags


def sampling_tensors(view: Callable[[str], torch.Tensor], flags: SamplingFlags) -> SamplingTensors:
    """The sampling segments of the copied buffer, as the sampler reads them."""
    return SamplingTensors(
        view("greedy") != 0, view("temperature").view(torch.float32), view("top_k"),
        view("top_p").view(torch.float32), view("min_p").view(torch.float32),
        view("uniform").view(torch.float32), view("penalty_slot"), view("repetition").view(torch.float32),
        view("frequency").view(torch.float32), view("presence").view(torch.float32), flags,
    )


class StepInputs:
    def __init__(self, max_num_tokens: int, max_num_seqs: int, max_blocks_per_seq: int, block_size: int,
                 device: torch.device | str, num_host_buffers: int = 2) -> None:
        self.device = torch.device(device)
        self.block_size = block_size
        self.max_num_tokens, self.max_num_seqs = max_num_tokens, max_num_seqs
        self.max_blocks_per_seq = round_width(max_blocks_per_seq)
        # Sized for the largest step; a graph shape pads tokens to at most max(max_num_tokens, B).
        # Sampled rows: one per sequence, or one per token of a row sampled at several positions,
        # never more than the step's tokens; an eager step's logits rows add a prompt
        # row per token at most (prompt logprobs).
        num_tokens = max(max_num_tokens, max_num_seqs)
        capacity = make_layout(num_tokens, max_num_seqs, self.max_blocks_per_seq, 2 * num_tokens, num_tokens,
                               max_num_seqs, max_num_tokens).size
        cuda = self.device.type == "cuda"
        num_host = max(2, num_host_buffers) if cuda else 1
        self._host = [torch.zeros(capacity, dtype=torch.int32, pin_memory=cuda) for _ in range(num_host)]
        self._events: list = [None] * len(self._host)
        self._device_buf = torch.zeros(capacity, dtype=torch.int32, device=self.device) if cuda else None
        self._turn = 0
        self.capacity = capacity

    def stage(self, chunks: Sequence[Chunk], rows: Sequence[SamplingRow] = (), uniforms: Sequence[float] = (),
              vocab_size: int = 0, shape: GraphShape | None = None, max_seq_len_hint: int | None = None,
              feed: Feed | None = None, prompt: PromptRows | None = None) -> StagedStep:
        """Pack, copy once, return device views. `rows`/`uniforms`: the sampled rows' parameters
        (see sampling.rows.draw_uniforms). `max_seq_len_hint` replaces the metadata's max_seq_len
        (graphs: the longest context the graph must serve, so its plan depends on the bucket only).
        `feed`: (token indices, rows of the ids tensor, the previous step's sampled ids on the
        device) for inputs that are PENDING_TOKEN; a pending input with no feed reads token 0.
        `prompt`: rows scored for prompt logprobs (an eager step's; prompt_logprobs.py)."""
        num_feeds = len(feed[0]) if feed else 0
        plan = plan_step(chunks, self.block_size, shape, len(rows), num_feeds, prompt.token_rows if prompt else ())
        layout = plan.layout
        assert layout.size <= self.capacity, "step larger than the limits the buffers were sized for"
        host = self._next_host()
        seg = partial(layout.view, host.numpy())
        pack_tokens(seg, chunks, plan, self.block_size, shape)
        sampled_lens = pack_sampled_rows(seg, plan)
        flags = pack_sampling(seg, rows, uniforms, vocab_size) if rows else None
        if num_feeds:
            seg("feed_dst")[:] = feed[0]
            seg("feed_src")[:] = feed[1]
        if prompt is not None:
            seg("prompt_targets")[:] = prompt.targets
        view = partial(layout.view, self._copy(host, layout.size))
        if num_feeds:
            input_ids = view("input_ids")
            input_ids[view("feed_dst").long()] = feed[2][view("feed_src").long()]
        meta = self._metadata(view, plan, shape, max_seq_len_hint, sampled_lens)
        sampling = sampling_tensors(view, flags) if rows else None
        return StagedStep(view("input_ids"), view("positions"), view("logits_indices"), meta, sampling,
                          layout, plan.num_tokens, plan.num_seqs, host, plan.num_prompt_rows,
                          view("prompt_targets") if prompt is not None else None)

    def _metadata(self, view: Callable[[str], torch.Tensor], plan: StepPlan, shape: GraphShape | None,
                  max_seq_len_hint: int | None, sampled_lens: np.ndarray | None) -> AttentionMetadata:
        lay_b, lay_w, num_pad_seqs = plan.num_seqs_laid, plan.width, plan.num_pad_seqs
        return AttentionMetadata(
            cu_seqlens_q=view("cu_seqlens_q"), seq_lens=view("seq_lens"),
            block_tables=view("block_tables").view(lay_b, lay_w), slot_mapping=view("slot_mapping"),
            positions=view("positions"),
            max_query_len=int(plan.q_lens.max()) if shape is None else 1 if shape.decode else plan.num_tokens_laid,
            max_seq_len=max_seq_len_hint or int(plan.seq_lens.max()), block_size=self.block_size,
            query_lens_host=plan.q_lens.tolist() + [1] * num_pad_seqs,
            seq_lens_host=plan.seq_lens.tolist() + [1] * num_pad_seqs,
            static_shape=shape is not None,
            sampled=None if sampled_lens is None else SampledRows(
                view("sampled_seq"), view("sampled_seq_lens"), view("sampled_cu"), sampled_lens.tolist()),
        )

    def receive(self, fill: Callable[[torch.Tensor], None], size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A buffer packed elsewhere (tensor parallelism: the driver's step, which `fill` writes
        into the host buffer's first `size` elements), copied to the device as `stage` copies its
        own -> (host buffer, device buffer): a graph captured here reads it where it reads a step."""
        host = self._next_host()
        fill(host[:size])
        return host, self._copy(host, size)

    def _next_host(self) -> torch.Tensor:
        self._turn = (self._turn + 1) % len(self._host)
        event = self._events[self._turn]
        if event is not None:
            event.synchronize()  # the copy that last read this buffer is done
        return self._host[self._turn]

    def _copy(self, host: torch.Tensor, size: int) -> torch.Tensor:
        if self._device_buf is None:
            return host
        self._device_buf[:size].copy_(host[:size], non_blocking=True)
        event = self._events[self._turn] or torch.cuda.Event()
        event.record()
        self._events[self._turn] = event
        return self._device_buf
