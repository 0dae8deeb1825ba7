"""LongContextBackend: a backend (store_kv, rope_store_kv, forward) that sends each prefill chunk over a
long cached context to LongContextAttention and everything else to the backend it wraps.

The choice is the step's metadata's, made once per step (on the first layer's call) from its host
lengths: a sequence whose chunk LongContextAttention.applies to is on the long path; the others run
in the wrapped backend, in runs of consecutive sequences, each with its own metadata made of views
of the step's (no copy, no host sync), so their attention is what it would have been (a run of
decodes alone even takes the split-K decode kernel instead of the general one). Nothing changes for
a step with no long chunk: the wrapped backend gets the step's own metadata.

Never on the long path: a CUDA graph's steps (`static_shape`, or a capture under way: a graph's
plan must serve every step of its shape, and long chunks are larger than any mixed graph anyway),
and a sliding-window layer whose window is shorter than the step's longest sequence (the kernels
skip the tiles before the window; the long path has no window), which gets the whole step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType

import torch

from gpu_stage.attention.long_context import MIN_CONTEXT, MIN_QUERY, LongContextAttention, LongSeq
from gpu_stage.attention.metadata import AttentionMetadata
from gpu_stage.attention.torch_backend import row_layout
from gpu_stage.kv.layout import QuantKvLayer


LONG_CONTEXT_MODES = ("auto", "flash", "off")  # --long-context-attention


def build_long_context(mode: str, num_heads: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype,
                       device: torch.device, attention_backend: str, max_model_len: int,
                       max_query_len: int) -> LongContextAttention | None:
    """The path's scratch and kernels for --long-context-attention `mode` (auto: cuDNN, checked at
    start-up), or None: off, not CUDA with triton, a dtype the fused kernels lack (float32), or no
    chunk could start past MIN_CONTEXT."""
    if mode not in LONG_CONTEXT_MODES:
        raise ValueError(f"unknown --long-context-attention {mode!r} (choices: {', '.join(LONG_CONTEXT_MODES)})")
    from gpu_stage.kernels import interpreting

    if (mode == "off" or device.type != "cuda" or attention_backend != "triton" or interpreting()
            or dtype not in (torch.bfloat16, torch.float16) or max_model_len < MIN_CONTEXT + MIN_QUERY):
        return None
    return LongContextAttention(num_heads, num_kv_heads, head_dim, dtype, device, max_model_len, max_query_len,
                                "cudnn" if mode == "auto" else "flash")


@dataclass
class LongPlan:
    seqs: list[LongSeq]
    runs: list[tuple[slice, AttentionMetadata]] = field(default_factory=list)  # the others: rows, metadata


def run_metadata(meta: AttentionMetadata, a: int, b: int, cu: list[int]) -> AttentionMetadata:
    """Sequences a .. b - 1 of the step as a step of their own (views of its device tensors)."""
    rows = slice(cu[a], cu[b])
    query_lens, seq_lens = meta.query_lens_host[a:b], meta.seq_lens_host[a:b]
    return AttentionMetadata(
        cu_seqlens_q=meta.cu_seqlens_q[a : b + 1] - cu[a], seq_lens=meta.seq_lens[a:b],
        block_tables=meta.block_tables[a:b], slot_mapping=meta.slot_mapping[rows], positions=meta.positions[rows],
        max_query_len=max(query_lens), max_seq_len=max(seq_lens), block_size=meta.block_size,
        query_lens_host=list(query_lens), seq_lens_host=list(seq_lens),
    )


def make_plan(meta: AttentionMetadata, kv_layer: torch.Tensor | QuantKvLayer,
              long: LongContextAttention) -> LongPlan | None:
    """The step's long sequences and the runs of the others; None when it has no long chunk."""
    if meta.static_shape or (meta.block_tables.is_cuda and torch.cuda.is_current_stream_capturing()):
        return None
    query_lens, seq_lens = meta.query_lens_host, meta.seq_lens_host
    is_long = [long.applies(n, s) for n, s in zip(query_lens, seq_lens)]
    if not any(is_long):
        return None
    cu = [0]
    for n in query_lens:
        cu.append(cu[-1] + n)
    plan = LongPlan([])
    start = None  # first sequence of the current run of others
    for i, on_path in enumerate(is_long + [True]):
        if not on_path:
            start = i if start is None else start
            continue
        if start is not None:
            plan.runs.append((slice(cu[start], cu[i]), run_metadata(meta, start, i, cu)))
            start = None
        if i < len(is_long):
            plan.seqs.append(long_seq(meta, i, cu, kv_layer))
    return plan


def long_seq(meta: AttentionMetadata, i: int, cu: list[int], kv_layer: torch.Tensor | QuantKvLayer) -> LongSeq:
    """Sequence i of the step (`cu`: the query offsets, on the host) with the pool rows of its K/V."""
    block_rows, v_delta = row_layout(kv_layer.rows if isinstance(kv_layer, QuantKvLayer) else kv_layer)
    length, bs = meta.seq_lens_host[i], meta.block_size
    pos = torch.arange(length, device=meta.block_tables.device)
    k_rows = meta.block_tables[i].long()[pos // bs] * block_rows + pos % bs  # [L]
    return LongSeq(cu[i], cu[i + 1], length, k_rows, k_rows + v_delta)


class LongContextBackend:
    """`base` (a backend module: triton_backend on CUDA) with chunks over long contexts on `long`."""

    def __init__(self, base: ModuleType, long: LongContextAttention) -> None:
        self.base, self.long = base, long

    def _plan(self, meta: AttentionMetadata, kv_layer) -> LongPlan | None:
        if meta.long_plan is None:
            meta.long_plan = make_plan(meta, kv_layer, self.long) or False
        return meta.long_plan or None

    def store_kv(self, kv_layer, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata) -> None:
        self.base.store_kv(kv_layer, k, v, meta)
        self._share_fresh(meta, kv_layer, k, v)

    def rope_store_kv(self, kv_layer, q, k, v, cos, sin, meta: AttentionMetadata, ops=None):
        q, k = self.base.rope_store_kv(kv_layer, q, k, v, cos, sin, meta, ops)
        self._share_fresh(meta, kv_layer, k, v)
        return q, k

    def _share_fresh(self, meta: AttentionMetadata, kv_layer, k: torch.Tensor, v: torch.Tensor) -> None:
        """Each run's share of what the layer just stored (a run of fresh prompts attends to it)."""
        plan = self._plan(meta, kv_layer)
        if plan is not None:
            for rows, run in plan.runs:
                run.fresh_kv = (k[rows], v[rows])

    def forward(self, q: torch.Tensor, kv_layer, meta: AttentionMetadata, window: int | None = None) -> torch.Tensor:
        plan = self._plan(meta, kv_layer)
        if plan is None or (window is not None and window < meta.max_seq_len):
            return self.base.forward(q, kv_layer, meta, window)
        out = torch.empty_like(q)
        for rows, run in plan.runs:
            out[rows] = self.base.forward(q[rows], kv_layer, run)
        for seq in plan.seqs:
            out[seq.q_start : seq.q_end] = self.long.attend(q[seq.q_start : seq.q_end], kv_layer, seq)
        return out
