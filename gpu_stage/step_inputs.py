"""StepInputs: a step's integer inputs packed into a persistent (pinned) host buffer and sent to the
device with ONE host-to-device copy into a persistent device buffer; the model reads views of it.

Packed, int32, 16-byte aligned segments (floats stored as their bits):
    input_ids [T] | positions [T] | slot_mapping [T] | cu_seqlens_q [B+1] | seq_lens [B] |
    logits_indices [S] | block_tables [B, W] | sampled_seq, sampled_seq_lens [S] | sampled_cu [S+1] |
    sampling: greedy, temperature, top_k, top_p, min_p, uniform, penalty_slot, repetition,
    frequency, presence [R each] | feed_dst, feed_src [F each]
The offsets are a function of (T, B, W, S, R) alone (the feed segments come last). A CUDA graph
captured for a bucket therefore reads the same device addresses at every replay of that bucket:
staging a step with the bucket's `GraphShape` (rows padded up to it, block tables W_max wide) lands
it exactly where the graph looks.

Padding: extra sequences get one token each at position 0 with seq_len 1 and an all-zero block
table row (the null block 0, which the scheduler never hands out); extra tokens get `pad_slot`
(0: the null block; -1: not stored). Their outputs are ignored.

Two pinned buffers alternate, each guarded by an event recorded after its copy, so packing step N+1
never overwrites memory that step N's copy may still be reading. On CPU the views are the host
buffer itself and nothing is copied.

Feeds (async scheduling): a decode built before its input token was sampled carries
PENDING_TOKEN. Its input is taken on the device from the previous step's sampled ids:
input_ids[feed_dst[i]] = previous_ids[feed_src[i]], right after the copy, so no host value is
needed. (On CPU the same indexing runs on the host buffer.)
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Callable, Protocol, Sequence

import numpy as np
import torch

from gpu_stage.attention.metadata import AttentionMetadata, SampledRows, locate_rows
from gpu_stage.sampler import SamplingFlags, SamplingRow, SamplingTensors, penalty_parameters, row_parameters

ALIGN = 4  # int32 elements: 16 bytes
_SAMPLING = ("greedy", "temperature", "top_k", "top_p", "min_p", "uniform", "penalty_slot", "repetition",
             "frequency", "presence")


class Chunk(Protocol):  # stages.messages.ScheduledChunk satisfies it
    request_id: str
    token_ids: list[int]
    start_pos: int
    block_table: list[int]
    sample: bool


@dataclass(frozen=True)
class GraphShape:
    """The fixed shape of a captured step. Decode: num_seqs sequences of one token each, logits for
    every row. Prefill: one sequence of up to num_tokens tokens, logits for its last token. Mixed:
    up to num_seqs sequences (prefill chunks and decodes) of up to num_tokens tokens in all; the
    missing sequences are one-token pads on the null block (as decode's), the tokens left over
    belong to no sequence (as prefill's); logits for every sequence's last token."""

    num_tokens: int
    num_seqs: int
    width: int  # block-table columns
    decode: bool
    mixed: bool = False

    @property
    def pad_slot(self) -> int:
        return 0 if self.decode else -1  # decode pads are sequences (null block); prefill pads: no store

    @property
    def logits_per_seq(self) -> bool:
        """Logits row i is sequence i's (decode, mixed); else one row per sampled chunk."""
        return self.decode or self.mixed


@dataclass(frozen=True)
class Layout:
    offsets: dict[str, tuple[int, int]]  # name -> (start, length)
    size: int

    def view(self, buf: torch.Tensor, name: str) -> torch.Tensor:
        start, length = self.offsets[name]
        return buf[start : start + length]


def make_layout(num_tokens: int, num_seqs: int, width: int, num_logits: int, num_rows: int,
                num_feeds: int = 0) -> Layout:
    sizes = [("input_ids", num_tokens), ("positions", num_tokens), ("slot_mapping", num_tokens),
             ("cu_seqlens_q", num_seqs + 1), ("seq_lens", num_seqs), ("logits_indices", num_logits),
             ("block_tables", num_seqs * width), ("sampled_seq", num_logits), ("sampled_seq_lens", num_logits),
             ("sampled_cu", num_logits + 1)] + [(name, num_rows) for name in _SAMPLING] + [
             ("feed_dst", num_feeds), ("feed_src", num_feeds)]
    offsets, pos = {}, 0
    for name, n in sizes:
        offsets[name] = (pos, n)
        pos += -(-n // ALIGN) * ALIGN
    return Layout(offsets, pos)


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


WIDTH_MULTIPLE = 16


def _round_width(width: int) -> int:
    """Block-table columns, rounded up to a multiple of 16: the row stride is an integer argument
    of the attention kernels, which Triton specialises on being 1 or divisible by 16; one class
    for every step (graphs' and eager) means one compiled variant, none first met while serving."""
    return -(-width // WIDTH_MULTIPLE) * WIDTH_MULTIPLE


class StepInputs:
    def __init__(self, max_num_tokens: int, max_num_seqs: int, max_blocks_per_seq: int, block_size: int,
                 device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.block_size = block_size
        self.max_num_tokens, self.max_num_seqs = max_num_tokens, max_num_seqs
        self.max_blocks_per_seq = _round_width(max_blocks_per_seq)
        # Sized for the largest step; a graph shape pads tokens to at most max(max_num_tokens, B).
        capacity = make_layout(max(max_num_tokens, max_num_seqs), max_num_seqs, self.max_blocks_per_seq,
                               max_num_seqs, max_num_seqs, max_num_seqs).size
        cuda = self.device.type == "cuda"
        self._host = [torch.zeros(capacity, dtype=torch.int32, pin_memory=cuda) for _ in range(2 if cuda else 1)]
        self._events: list = [None] * len(self._host)
        self._device_buf = torch.zeros(capacity, dtype=torch.int32, device=self.device) if cuda else None
        self._turn = 0
        self.capacity = capacity

    def stage(self, chunks: Sequence[Chunk], rows: Sequence[SamplingRow] = (), uniforms: Sequence[float] = (),
              vocab_size: int = 0, shape: GraphShape | None = None, max_seq_len_hint: int | None = None,
              feed: tuple[list[int], list[int], torch.Tensor] | None = None) -> StagedStep:
        """Pack, copy once, return device views. `rows`/`uniforms`: the sampled rows' parameters
        (see sampler.draw_uniforms). `max_seq_len_hint` replaces the metadata's max_seq_len
        (graphs: the longest context the graph must serve, so its plan depends on the bucket only).
        `feed`: (token indices, rows of the ids tensor, the previous step's sampled ids on the
        device) for inputs that are PENDING_TOKEN; a pending input with no feed reads token 0."""
        bs = self.block_size
        num_seqs = len(chunks)
        q_lens = np.fromiter((len(c.token_ids) for c in chunks), np.int64, num_seqs)
        starts = np.fromiter((c.start_pos for c in chunks), np.int64, num_seqs)
        seq_lens = starts + q_lens
        num_tokens = int(q_lens.sum())
        widths = -(-seq_lens // bs)  # block-table columns each sequence needs
        for chunk, width in zip(chunks, widths.tolist()):
            assert len(chunk.block_table) >= width, (chunk.request_id, len(chunk.block_table), width)
        if shape is None:
            lay_t, lay_b, lay_w = num_tokens, num_seqs, _round_width(int(widths.max()))
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
        elif mixed:  # each sequence's last token, then each pad sequence's token
            logits_rows = np.concatenate([cu[1:] - 1, num_tokens + np.arange(num_pad_seqs)])
        else:
            logits_rows = np.array([cu[i + 1] - 1 for i, c in enumerate(chunks) if c.sample] or [0])
        num_feeds = len(feed[0]) if feed else 0
        layout = make_layout(lay_t, lay_b, lay_w, len(logits_rows), len(rows), num_feeds)
        assert layout.size <= self.capacity, "step larger than the limits the buffers were sized for"
        host = self._next_host()
        arr = host.numpy()

        def seg(name: str) -> np.ndarray:
            start, length = layout.offsets[name]
            return arr[start : start + length]

        ids = seg("input_ids")
        ids[:num_tokens] = np.fromiter(chain.from_iterable(c.token_ids for c in chunks), np.int32, num_tokens)
        ids[num_tokens:] = 0
        ids[ids < 0] = 0  # PENDING_TOKEN: filled in from `feed` below (or left 0: dropped anyway)
        seq_of_token = np.repeat(np.arange(num_seqs), q_lens)  # [T]
        positions = np.arange(num_tokens) - cu[seq_of_token] + starts[seq_of_token]
        seg("positions")[:num_tokens] = positions
        seg("positions")[num_tokens:] = 0
        tables = seg("block_tables").reshape(lay_b, lay_w)
        tables[:] = 0
        flat = np.fromiter(chain.from_iterable(c.block_table[:w] for c, w in zip(chunks, widths.tolist())),
                           np.int32, int(widths.sum()))
        tables[:num_seqs][np.arange(lay_w)[None, :] < widths[:, None]] = flat
        slots = seg("slot_mapping")
        slots[:num_tokens] = tables[seq_of_token, positions // bs].astype(np.int64) * bs + positions % bs
        slots[num_tokens:] = 0 if shape is None else shape.pad_slot
        if mixed:
            slots[num_tokens : num_tokens + num_pad_seqs] = 0  # pad sequences store on the null block
        cu_seg = seg("cu_seqlens_q")
        cu_seg[: num_seqs + 1] = cu
        cu_seg[num_seqs + 1 :] = num_tokens + np.arange(1, num_pad_seqs + 1)
        seg("seq_lens")[:num_seqs] = seq_lens
        seg("seq_lens")[num_seqs:] = 1
        seg("logits_indices")[:] = logits_rows
        # Each sampled row's sequence and context, for a last layer that computes those rows alone
        # (pad sequences: one token each, after the real ones). A step that samples every row (a
        # decode) has no use for them: nothing is computed or staged.
        sampled_lens = None
        if len(logits_rows) < lay_t:
            sampled_seq, sampled_lens = locate_rows(
                logits_rows, np.concatenate([cu, num_tokens + np.arange(1, num_pad_seqs + 1)]),
                np.concatenate([seq_lens, np.ones(num_pad_seqs, np.int64)]))
            seg("sampled_seq")[:] = sampled_seq
            seg("sampled_seq_lens")[:] = sampled_lens
            seg("sampled_cu")[:] = np.arange(len(logits_rows) + 1)
        flags = None
        if rows:
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
        if num_feeds:
            seg("feed_dst")[:] = feed[0]
            seg("feed_src")[:] = feed[1]
        buf = self._copy(host, layout.size)

        def view(name: str) -> torch.Tensor:
            return layout.view(buf, name)

        if num_feeds:
            input_ids = view("input_ids")
            input_ids[view("feed_dst").long()] = feed[2][view("feed_src").long()]
        meta = AttentionMetadata(
            cu_seqlens_q=view("cu_seqlens_q"), seq_lens=view("seq_lens"),
            block_tables=view("block_tables").view(lay_b, lay_w), slot_mapping=view("slot_mapping"),
            positions=view("positions"),
            max_query_len=int(q_lens.max()) if shape is None else 1 if shape.decode else lay_t,
            max_seq_len=max_seq_len_hint or int(seq_lens.max()), block_size=bs,
            query_lens_host=q_lens.tolist() + [1] * num_pad_seqs,
            seq_lens_host=seq_lens.tolist() + [1] * num_pad_seqs,
            static_shape=shape is not None,
            sampled=None if sampled_lens is None else SampledRows(
                view("sampled_seq"), view("sampled_seq_lens"), view("sampled_cu"), sampled_lens.tolist()),
        )
        sampling = None
        if rows:
            sampling = SamplingTensors(
                view("greedy") != 0, view("temperature").view(torch.float32), view("top_k"),
                view("top_p").view(torch.float32), view("min_p").view(torch.float32),
                view("uniform").view(torch.float32), view("penalty_slot"), view("repetition").view(torch.float32),
                view("frequency").view(torch.float32), view("presence").view(torch.float32), flags,
            )
        return StagedStep(view("input_ids"), view("positions"), view("logits_indices"), meta, sampling,
                          layout, num_tokens, num_seqs, host)

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
