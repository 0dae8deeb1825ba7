"""Reference paged attention in plain torch: the CPU path, and the oracle for GPU kernels.

Interface (a Triton backend provides the same functions):
    store_kv(kv_layer, k, v, meta)   write the step's new K/V into the paged cache
    rope_store_kv(kv_layer, q, k, v, cos, sin, meta, ops)
                                     RoPE on q and k (ops.rope), then store_kv; -> (q, k) rotated
    forward(q, kv_layer, meta)       causal attention of the new queries over each sequence's context

`kv_layer` is one layer's view of the pool, [num_blocks, 2, block_size, num_kv_heads, head_dim], or
an 8-bit pool's QuantKvLayer (gpu_stage/kv/layout.py): its K/V are quantized as they are stored
and dequantized (kv_quant.py) as they are gathered. On the CPU every read goes through the cache, a
fresh prefill's own keys included, through attention/invariant.py, so a query's output does not
depend on how its step was batched or chunked; on a GPU a sequence with no cached context attends
to the step's own K/V, written back dequantized, as the Triton path does (fresh_kv.py). A plain
pool of another float dtype than the model's is cast the same way. The V-transposed 8-bit layout
is addressed with the same row indices (_VtRows maps them to block, half and token).
Every query attends to its own sequence's keys at positions <= its own (the earlier context is
already in the cache: chunked prefill, prefix hits, decode). Grouped-query attention: q head h reads
kv head h // (num_heads // num_kv_heads), as in HF's repeat_kv.

Speed on CPU: the gather indices and masks are computed once per step (`_plan`, cached on the
metadata) and reused by every layer; all single-token (decode) sequences run as one padded
scaled_dot_product_attention call, with the query heads of a kv group folded into the query-length
dimension so no K/V is repeated; each multi-token (prefill) sequence is one SDPA call, with
`is_causal` when it starts at position 0 (the fast fused path) and an explicit mask otherwise.
A sliding-window layer (`window`) uses the same gathers with window masks (window_masks.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F

from gpu_stage.attention.cpu_decode_kernel import kernel as decode_kernel, paged_decode, usable as kernel_usable
from gpu_stage.attention.invariant import forward as invariant_forward, plan_groups
from gpu_stage.attention.fresh_kv import dequantize_fresh, fresh_from_step
from gpu_stage.attention.metadata import AttentionMetadata
from gpu_stage.attention.window_masks import decode_window_mask, prefill_window_mask
from gpu_stage.kv.invariance import kv8_invariant
from gpu_stage.kv.layout import QuantKvLayer
from gpu_stage.kv.quant import dequantize, dequantize_rows, quantize, quantize_rows


@dataclass
class _PrefillSeq:
    q_start: int
    q_end: int
    k_rows: torch.Tensor  # [L] int64: pool row of each context position's key
    mask: torch.Tensor | None  # [Tq, L] bool (True = attend); None: causal from position 0


@dataclass
class _Plan:
    v_delta: int  # a value's row = its key's row + v_delta
    store_k_rows: torch.Tensor  # [T] int64: rows the new keys go to
    all_decode: bool  # every sequence has exactly one new token, rows 0..B-1 in order
    decode_rows: torch.Tensor | None  # [Bd] int64 rows of q; None when there are no decodes
    decode_k_rows: torch.Tensor | None  # [Bd * Ld] int64, padded with rows that the mask hides
    decode_mask: torch.Tensor | None  # [Bd, 1, 1, Ld] bool; None when all lengths are equal
    decode_max_len: int
    prefills: list[_PrefillSeq]
    decode_lens: list[int] = field(default_factory=list)  # context of each decode sequence
    decode_lens_t: torch.Tensor | None = None  # the same as int64, made on first use (cpu_decode_kernel.py)
    windowed: dict = field(default_factory=dict)  # sliding window -> this plan with its masks
    invariant_groups: list | None = None  # invariant.py's groups, made on first use


def _row_width(kv_layer: torch.Tensor) -> int:
    """Elements of one token's K (or V) row: kv_heads * head_dim, or an 8-bit pool's row bytes.
    Read from the shape and strides alone (no indexing: every layer of every step asks)."""
    width = 1
    for size, stride in zip(reversed(kv_layer.shape[3:]), reversed(kv_layer.stride()[3:])):
        assert size == 1 or stride == width, "token rows must be contiguous"
        width *= size
    assert kv_layer.stride(2) == width, "token rows must be contiguous"
    return width


def pool_rows(kv_layer: torch.Tensor) -> torch.Tensor:
    """A 2-D [num_rows, kv_heads * head_dim] view of the pool's storage starting at this layer, so
    that one token's K (or V) is one row and gathers are a single index_select of whole rows.

    Rows of other layers lie between this layer's blocks, but row indices relative to the layer's
    start are the same for every layer: the plan's indices are computed once and reused."""
    num_blocks, block_size = kv_layer.shape[0], kv_layer.shape[2]
    width = _row_width(kv_layer)
    num_rows = (num_blocks - 1) * (kv_layer.stride(0) // width) + kv_layer.stride(1) // width + block_size
    return kv_layer.as_strided((num_rows, width), (width, 1), kv_layer.storage_offset())


class _DequantRows:
    """An 8-bit layer's rows, gathered as the plain pool's are (index_select of whole rows), each
    dequantized to `dtype`: [N, kv_heads * head_dim]."""

    def __init__(self, layer: QuantKvLayer, dtype: torch.dtype) -> None:
        self.rows, self.layer, self.dtype = pool_rows(layer.rows), layer, dtype

    def index_select(self, dim: int, index: torch.Tensor) -> torch.Tensor:
        raw = self.rows.index_select(dim, index)
        return dequantize_rows(raw, self.layer.num_kv_heads, self.layer.fmt, self.dtype)


class _VtRows:
    """An 8-bit layer in the V-transposed layout (kv/layout.py), addressed by the row layout's row
    indices (pool_rows of its `rows` view: the plan is the same): a row's block, half (K or V) and
    token pick the values from the layer's K or V view and the scales beside them. Gathers and
    stores go through `gather_rows` / `scatter`: the caller says which half (no device read)."""

    def __init__(self, layer: QuantKvLayer, dtype: torch.dtype) -> None:
        self.layer, self.dtype = layer, dtype
        self.block_rows, self.v_delta = row_layout(layer.rows)
        self.block_size = layer.data.shape[2]

    def _at(self, index: torch.Tensor, kv: int) -> tuple[torch.Tensor, torch.Tensor]:
        return index // self.block_rows, index % self.block_rows - kv * self.block_size

    def gather(self, index: torch.Tensor, kv: int) -> torch.Tensor:
        """Rows `index` of half `kv` -> [N, kv_heads * head_dim] dequantized to `dtype`."""
        block, offset = self._at(index, kv)
        values = self.layer.values(kv).view(torch.uint8)[block, offset].view(self.layer.fmt.torch_dtype)
        scales = self.layer.scales[:, kv][block, offset]
        return dequantize(values, scales, self.dtype).reshape(index.shape[0], -1)

    def scatter(self, index: torch.Tensor, kv: int, x: torch.Tensor) -> None:
        """x [T, kv_heads, head_dim] quantized into rows `index` of half `kv`."""
        values, scales = quantize(x, self.layer.fmt)
        block, offset = self._at(index, kv)
        self.layer.values(kv).view(torch.uint8)[block, offset] = values.view(torch.uint8)
        self.layer.scales[:, kv][block, offset] = scales


def gather_rows(rows, index: torch.Tensor, kv: int) -> torch.Tensor:
    """What read_rows returned, at row indices `index` of the K (kv 0) or V (kv 1) half."""
    if isinstance(rows, _VtRows):
        return rows.gather(index, kv)
    return rows.index_select(0, index)


class _CastRows:
    """A plain pool of another float dtype than the model's: rows gathered, then cast."""

    def __init__(self, rows: torch.Tensor, dtype: torch.dtype) -> None:
        self.rows, self.dtype = rows, dtype

    def index_select(self, dim: int, index: torch.Tensor) -> torch.Tensor:
        return self.rows.index_select(dim, index).to(self.dtype)


def read_rows(kv_layer: torch.Tensor | QuantKvLayer, dtype: torch.dtype):
    """What forward gathers from: the plain pool's rows themselves, or rows that convert."""
    if isinstance(kv_layer, QuantKvLayer):
        return _VtRows(kv_layer, dtype) if kv_layer.v_transposed else _DequantRows(kv_layer, dtype)
    rows = pool_rows(kv_layer)
    return rows if rows.dtype == dtype else _CastRows(rows, dtype)


def _get_plan(meta: AttentionMetadata, kv_layer: torch.Tensor | QuantKvLayer) -> _Plan:
    plan = meta.backend_plan
    if not isinstance(plan, _Plan):
        plan = meta.backend_plan = _plan(meta, kv_layer.rows if isinstance(kv_layer, QuantKvLayer) else kv_layer)
    return plan


def store_kv(kv_layer: torch.Tensor | QuantKvLayer, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata) -> None:
    """k, v [T, num_kv_heads, head_dim] -> the cache slots of meta.slot_mapping."""
    plan = _get_plan(meta, kv_layer)
    meta.fresh_kv = (k, v)  # fresh_kv.py
    num_tokens = k.shape[0]
    if isinstance(kv_layer, QuantKvLayer) and kv_layer.v_transposed:
        target = _VtRows(kv_layer, k.dtype)
        target.scatter(plan.store_k_rows, 0, k)
        target.scatter(plan.store_k_rows + plan.v_delta, 1, v)
    elif isinstance(kv_layer, QuantKvLayer):
        rows = pool_rows(kv_layer.rows)
        rows.index_copy_(0, plan.store_k_rows, quantize_rows(k, kv_layer.fmt))
        rows.index_copy_(0, plan.store_k_rows + plan.v_delta, quantize_rows(v, kv_layer.fmt))
    if isinstance(kv_layer, QuantKvLayer):
        if fresh_from_step(k, kv_layer) and dequantize_fresh(kv_layer):  # the kernels' WRITE_BACK
            for x in (k, v):
                x.copy_(dequantize(*quantize(x, kv_layer.fmt), x.dtype))
        return
    rows = pool_rows(kv_layer)
    rows.index_copy_(0, plan.store_k_rows, k.reshape(num_tokens, -1).to(rows.dtype))
    rows.index_copy_(0, plan.store_k_rows + plan.v_delta, v.reshape(num_tokens, -1).to(rows.dtype))


def rope_store_kv(kv_layer: torch.Tensor | QuantKvLayer, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor,
                  sin: torch.Tensor, meta: AttentionMetadata, ops) -> tuple[torch.Tensor, torch.Tensor]:
    """q [T, H, D], k/v [T, Hkv, D]: rotate q and k with ops.rope, store k and v; -> (q, k). A plain
    pool of the model's dtype may take both in one pass of the ops' (ops.rope_store_rows)."""
    if ops.fuses_rope_store and not isinstance(kv_layer, QuantKvLayer):
        rows = pool_rows(kv_layer)
        plan = _get_plan(meta, kv_layer)
        if rows.dtype == q.dtype and ops.rope_store_rows(q, k, v, cos, sin, rows, plan.store_k_rows, plan.v_delta):
            meta.fresh_kv = (k, v)  # fresh_kv.py
            return q, k
    q, k = ops.rope(q, k, cos, sin)
    store_kv(kv_layer, k, v, meta)
    return q, k


def forward(q: torch.Tensor, kv_layer: torch.Tensor | QuantKvLayer, meta: AttentionMetadata,
            window: int | None = None) -> torch.Tensor:
    """q [T, num_heads, head_dim] -> out [T, num_heads, head_dim]. Call after store_kv. `window`:
    a sliding-window layer's (window_masks.py), None: the whole context."""
    plan = _get_plan(meta, kv_layer)
    rows = read_rows(kv_layer, q.dtype)  # [num_rows, kv_heads * head_dim]
    num_kv_heads = kv_layer.num_kv_heads if isinstance(kv_layer, QuantKvLayer) else kv_layer.shape[3]
    if isinstance(kv_layer, QuantKvLayer) and kv8_invariant() and not fresh_from_step(q, kv_layer):  # the CPU
        return invariant_forward(q, rows, gather_rows, _invariant_groups(plan, meta, kv_layer, q.shape[1]),
                                 plan.v_delta, num_kv_heads, window)
    if window is not None:
        plan = _windowed(plan, window, meta.block_tables.device)
    if plan.all_decode:
        return _decode(q, rows, num_kv_heads, plan, window is None)
    out = torch.empty_like(q)
    if plan.decode_rows is not None:
        out[plan.decode_rows] = _decode(q[plan.decode_rows], rows, num_kv_heads, plan, window is None)
    fresh = meta.fresh_kv if fresh_from_step(q, kv_layer) else None
    for seq in plan.prefills:
        own = None  # fresh_kv.py: a sequence with no cached context may attend to the step's own K/V
        if fresh is not None and seq.k_rows.shape[0] == seq.q_end - seq.q_start:
            own = (fresh[0][seq.q_start : seq.q_end], fresh[1][seq.q_start : seq.q_end])
        out[seq.q_start : seq.q_end] = _prefill(q[seq.q_start : seq.q_end], rows, num_kv_heads, seq, plan.v_delta, own)
    return out


def _invariant_groups(plan: _Plan, meta: AttentionMetadata, kv_layer: QuantKvLayer, num_heads: int) -> list:
    """The step's groups for invariant.py, made once per step."""
    if plan.invariant_groups is None:
        block_rows, _ = row_layout(kv_layer.rows)
        plan.invariant_groups = plan_groups(
            meta.query_lens_host, meta.seq_lens_host, meta.block_tables.to(torch.int64), block_rows, meta.block_size,
            kv_layer.num_kv_heads, num_heads // kv_layer.num_kv_heads)
    return plan.invariant_groups


def _decode(q: torch.Tensor, rows: torch.Tensor, num_kv_heads: int, plan: _Plan,
            whole_context: bool = False) -> torch.Tensor:
    """q [Bd, num_heads, head_dim] with one query per sequence -> [Bd, num_heads, head_dim].
    `whole_context` (no sliding window): cpu_decode_kernel.py may read the pool in place."""
    if whole_context and decode_kernel() is not None and kernel_usable(q, rows):
        if plan.decode_lens_t is None:
            plan.decode_lens_t = torch.tensor(plan.decode_lens, dtype=torch.int64)
        return paged_decode(q, rows, plan.decode_k_rows, plan.decode_lens_t, plan.decode_max_len, plan.v_delta)
    num_seqs, num_heads, head_dim = q.shape
    shape = (num_seqs, plan.decode_max_len, num_kv_heads, head_dim)
    k = gather_rows(rows, plan.decode_k_rows, 0).view(shape).transpose(1, 2)  # [Bd, kv_heads, Ld, D]
    v = gather_rows(rows, plan.decode_k_rows + plan.v_delta, 1).view(shape).transpose(1, 2)
    # The group's query heads act as query rows: [Bd, kv_heads, group, D]; no causal mask is
    # needed because a decode token sees its whole context.
    q_grouped = q.view(num_seqs, num_kv_heads, num_heads // num_kv_heads, head_dim)
    out = F.scaled_dot_product_attention(q_grouped, k, v, attn_mask=plan.decode_mask)
    return out.reshape(num_seqs, num_heads, head_dim)


def _prefill(q: torch.Tensor, rows: torch.Tensor, num_kv_heads: int, seq: _PrefillSeq, v_delta: int,
             own: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """q [Tq, num_heads, head_dim] of one sequence -> [Tq, num_heads, head_dim]. own: its keys' K/V
    [L, kv_heads, head_dim] as the step computed them, read instead of the pool."""
    if own is not None:
        k, v = (x.to(q.dtype).transpose(0, 1)[None] for x in own)
    else:
        shape = (seq.k_rows.shape[0], num_kv_heads, q.shape[2])
        k = gather_rows(rows, seq.k_rows, 0).view(shape).transpose(0, 1)[None]  # [1, kv_heads, L, D]
        v = gather_rows(rows, seq.k_rows + v_delta, 1).view(shape).transpose(0, 1)[None]
    q4 = q.transpose(0, 1)[None]  # [1, num_heads, Tq, D]
    out = F.scaled_dot_product_attention(
        q4, k, v, attn_mask=seq.mask, is_causal=seq.mask is None, enable_gqa=True
    )  # [1, num_heads, Tq, D]
    return out[0].transpose(0, 1)


def _windowed(plan: _Plan, window: int, device: torch.device) -> _Plan:
    """The plan with sliding-window masks (every prefill gets one, also from position 0), made
    once per step and window and shared by the layers that use it."""
    if window not in plan.windowed:
        decode_mask = None if plan.decode_rows is None else decode_window_mask(
            plan.decode_lens, plan.decode_max_len, window, device)
        prefills = [replace(seq, mask=prefill_window_mask(seq.q_end - seq.q_start, seq.k_rows.shape[0], window, device))
                    for seq in plan.prefills]
        plan.windowed[window] = replace(plan, decode_mask=decode_mask, prefills=prefills, windowed={})
    return plan.windowed[window]


def row_layout(kv_layer: torch.Tensor) -> tuple[int, int]:
    """(rows from one block's first K row to the next block's, rows from a key's row to its value's)
    in pool_rows(kv_layer): the same for every layer of the pool."""
    width = _row_width(kv_layer)
    return kv_layer.stride(0) // width, kv_layer.stride(1) // width


def _plan(meta: AttentionMetadata, kv_layer: torch.Tensor) -> _Plan:
    device = meta.block_tables.device
    block_size = meta.block_size
    block_rows, v_delta = row_layout(kv_layer)
    query_lens, seq_lens = meta.query_lens_host, meta.seq_lens_host
    tables = meta.block_tables.to(torch.int64) * block_rows  # [B, max_num_blocks]: first row of each block
    slots = meta.slot_mapping.to(torch.int64)  # [T] (int32 when staged by StepInputs)
    store_k_rows = slots // block_size * block_rows + slots % block_size  # [T]
    decode_idx = [i for i, n in enumerate(query_lens) if n == 1]
    cu = [0]
    for n in query_lens:
        cu.append(cu[-1] + n)

    decode_rows = decode_k_rows = decode_mask = None
    max_len = 0
    lens = []
    if decode_idx:
        lens = [seq_lens[i] for i in decode_idx]
        max_len = max(lens)
        pos = torch.arange(max_len, device=device)  # [Ld]
        cols = (pos // block_size).clamp_(max=tables.shape[1] - 1)  # [Ld]
        idx = torch.tensor(decode_idx, device=device)
        decode_k_rows = (tables[idx][:, cols] + (pos % block_size)[None, :]).reshape(-1)  # [Bd * Ld]
        if min(lens) != max_len:
            lens_t = torch.tensor(lens, device=device)
            decode_mask = (pos[None, :] < lens_t[:, None])[:, None, None, :]  # [Bd, 1, 1, Ld]
        decode_rows = torch.tensor([cu[i] for i in decode_idx], device=device)

    prefills = []
    for i, q_len in enumerate(query_lens):
        if q_len == 1:
            continue
        seq_len = seq_lens[i]
        start = seq_len - q_len
        pos = torch.arange(seq_len, device=device)  # [L]
        mask = None
        if start > 0:
            q_pos = torch.arange(start, seq_len, device=device)  # [Tq]
            mask = pos[None, :] <= q_pos[:, None]  # [Tq, L]
        k_rows = tables[i][pos // block_size] + pos % block_size  # [L]
        prefills.append(_PrefillSeq(cu[i], cu[i + 1], k_rows, mask))
    all_decode = len(decode_idx) == len(query_lens)
    return _Plan(v_delta, store_k_rows, all_decode, decode_rows, decode_k_rows, decode_mask, max_len, prefills, lens)
