"""LongContextAttention: a prefill chunk's attention over a long cached context, through torch's
fused attention on the sequence's K/V gathered into one contiguous buffer.

The general Triton kernel reads the paged cache at ~270-310 TFLOP/s at 8K-128K of context on an
H200; cuDNN's fused attention runs ~590 over contiguous K/V. So for a chunk of n queries at
positions s .. s + n - 1 (s cached keys, the chunk's own n keys already stored by this layer):
  1. gather: the sequence's K and V rows 0 .. s + n - 1 from the pool into two scratch buffers
     [max_model_len, kv_heads * head_dim] made at start-up and shared by every layer (an 8-bit
     pool is dequantized as it is gathered, in slabs: the same values every other read sees);
  2. the chunk over its own keys: one CAUSAL call, q heads first and its own K/V with their KV
     heads repeated for the group (plain multi-head), both padded to a multiple of
     `query_bucket` rows at the end (a real query never sees a padded key);
  3. the cached keys up to the last multiple of `unit` below s, m = floor(s / unit) * unit, in
     pieces whose lengths are `unit` times a power of two (at most 5 at 128K): each one UNMASKED
     call with the chunk's GQA group folded into its query rows ([Hkv, group * n_pad, D], the same
     memory as q heads first: without a mask every row is independent);
  4. the cached keys m .. s - 1 (fewer than `unit`), one unmasked call of any length;
  5. the partial softmaxes merged by their log-sum-exps into a float32 accumulator.
With kernels "cudnn", cuDNN runs 2 and 3, so it meets only (query bucket) and (query bucket, piece
length) shapes, whose plans `warm` builds on the launch thread at start-up (none while serving),
and flash (no plan per shape) runs 4; "flash" runs all on flash; "reference" is float32 torch (the
CPU path and the tests' oracle). Everything is on the device with no host sync; steps that take
this path are eager (never in a CUDA graph: long_backend.py). `warm` checks the chosen CUDA kernels
against the reference once and falls back (cudnn -> flash -> off) if they fail or differ.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from gpu_stage.attention.long_kernels import KERNELS, merge_into
from gpu_stage.attention.torch_backend import gather_rows, read_rows
from gpu_stage.kv.layout import QuantKvLayer

log = logging.getLogger("ttft.gpu")

MIN_CONTEXT = 8192  # cached keys from which a chunk takes this path (flash wins from 8K)
MIN_QUERY = 1024  # and queries: shorter chunks stay on the kernel (a 1,024 bucket would be mostly padding)
UNIT = 4096  # piece lengths are UNIT x 2^k ...
MAX_PIECE = 65536  # ... up to this
QUERY_BUCKET = 1024  # the pieces' query rows are padded to a multiple of this (per GQA head)
GATHER_SLAB = 16384  # rows dequantized at a time from an 8-bit pool (bounds the float32 temporary)
CHECK_TOLERANCE = 2e-2  # relative norm against the reference at start-up (bf16 allows 1e-2 per call)


@dataclass
class LongSeq:
    """One sequence of a step on this path: its query rows and its K/V rows in pool_rows(layer)."""

    q_start: int
    q_end: int
    seq_len: int
    k_rows: torch.Tensor  # [seq_len] int64: the pool row of each position's key
    v_rows: torch.Tensor  # [seq_len] int64


class LongContextAttention:
    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device,
                 max_model_len: int, max_query_len: int, kernels: str = "cudnn", min_context: int = MIN_CONTEXT,
                 min_query: int = MIN_QUERY, unit: int = UNIT, max_piece: int = MAX_PIECE,
                 query_bucket: int = QUERY_BUCKET) -> None:
        assert kernels in KERNELS and num_heads % num_kv_heads == 0 and max_piece % unit == 0
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.dtype, self.device, self.kernels = dtype, device, kernels
        self.max_model_len, self.max_query_len = max_model_len, max_query_len
        self.min_context, self.min_query = min_context, min_query
        self.unit, self.max_piece, self.query_bucket = unit, max_piece, query_bucket
        self.scale = head_dim**-0.5
        # Whether chunks take this path: the CUDA kernels only once `warm` has checked them (and built
        # cuDNN's plans, so none is built while serving); a runner never warmed keeps every chunk
        # on the kernel. The reference kernels need no check.
        self.enabled = kernels == "reference"
        width = num_kv_heads * head_dim
        self.k = torch.empty(max_model_len, width, device=device, dtype=dtype)
        self.v = torch.empty(max_model_len, width, device=device, dtype=dtype)
        padded = -(-max_query_len // query_bucket) * query_bucket
        # Zeros: the padded query and key rows are never read back, but they must be finite numbers.
        self._q_heads, self._own_k, self._own_v = (torch.zeros(num_heads * padded * head_dim, device=device, dtype=dtype)
                                                   for _ in range(3))
        self._acc = torch.empty(num_heads * max_query_len * head_dim, device=device, dtype=torch.float32)
        self._acc_lse = torch.empty(num_heads * max_query_len, device=device, dtype=torch.float32)

    @property
    def num_bytes(self) -> int:
        buffers = (self.k, self.v, self._q_heads, self._own_k, self._own_v, self._acc, self._acc_lse)
        return sum(t.numel() * t.element_size() for t in buffers)

    def applies(self, query_len: int, seq_len: int) -> bool:
        """Whether a chunk of `query_len` new tokens ending at `seq_len` takes this path."""
        return self.enabled and query_len >= self.min_query and seq_len - query_len >= self.min_context

    def piece_sizes(self) -> list[int]:
        sizes, size = [], self.unit
        while size <= min(self.max_piece, self.max_model_len):
            sizes.append(size)
            size *= 2
        return sizes

    def pieces(self, length: int) -> list[tuple[int, int]]:
        """[0, length) (a multiple of unit) as (start, size) pieces, largest first."""
        out, start = [], 0
        for size in reversed(self.piece_sizes()):
            while length - start >= size:
                out.append((start, size))
                start += size
        assert start == length, (length, self.unit)
        return out

    def attend(self, q: torch.Tensor, kv_layer: torch.Tensor | QuantKvLayer, seq: LongSeq,
               kernels: str | None = None) -> torch.Tensor:
        """q [n, H, D] (the chunk's rows; any row stride) -> [n, H, D] float32 (a view of the
        accumulator: copy it out before the next call)."""
        calls = KERNELS[kernels or self.kernels]
        n, num_heads, head_dim = q.shape
        kv_heads, group = self.num_kv_heads, num_heads // self.num_kv_heads
        cached = seq.seq_len - n
        main = cached // self.unit * self.unit  # cached keys covered by the pieces
        padded = -(-n // self.query_bucket) * self.query_bucket
        size = num_heads * padded * head_dim
        self._gather(kv_layer, seq)
        # q heads first, padded: [H, padded, D]; head h = kv * group + g, so the same memory is q
        # with its groups folded into the query rows, [Hkv, group * padded, D] (no mask: the
        # cached keys), and with the KV heads of its own keys repeated, plain multi-head (causal).
        q_heads = self._q_heads[:size].view(num_heads, padded, head_dim)
        q_heads[:, :n].copy_(q.transpose(0, 1))
        own_k, own_v = (buf[:size].view(kv_heads, group, padded, head_dim) for buf in (self._own_k, self._own_v))
        own_k[:, :, :n].copy_(self._keys(self.k, cached, n)[0].unsqueeze(1).expand(kv_heads, group, n, head_dim))
        own_v[:, :, :n].copy_(self._keys(self.v, cached, n)[0].unsqueeze(1).expand(kv_heads, group, n, head_dim))
        out, lse = calls.own(q_heads.unsqueeze(0), own_k.view(1, num_heads, padded, head_dim),
                             own_v.view(1, num_heads, padded, head_dim), self.scale)
        acc = self._acc[: num_heads * n * head_dim].view(kv_heads, group, n, head_dim)
        acc_lse = self._acc_lse[: num_heads * n].view(kv_heads, group, n)
        acc.copy_(out[0].unflatten(0, (kv_heads, group))[:, :, :n])
        acc_lse.copy_(lse[0].unflatten(0, (kv_heads, group))[:, :, :n])
        q_fold = q_heads.view(1, kv_heads, group * padded, head_dim)
        spans = [(calls.pieces, start, length) for start, length in self.pieces(main)]
        if cached > main:
            spans.append((calls.rest, main, cached - main))
        for call, start, length in spans:
            out, lse = call(q_fold, self._keys(self.k, start, length), self._keys(self.v, start, length), self.scale)
            merge_into(acc, acc_lse, out[0].unflatten(1, (group, padded))[:, :, :n],
                       lse[0].unflatten(1, (group, padded))[:, :, :n])
        return acc.flatten(0, 1).transpose(0, 1)

    def _keys(self, buf: torch.Tensor, start: int, size: int) -> torch.Tensor:
        """Rows start .. start + size - 1 of a scratch buffer as [1, Hkv, size, D] (a view)."""
        return buf[start : start + size].view(size, self.num_kv_heads, self.head_dim).transpose(0, 1).unsqueeze(0)

    def _gather(self, kv_layer: torch.Tensor | QuantKvLayer, seq: LongSeq) -> None:
        length = seq.seq_len
        src = read_rows(kv_layer, self.dtype)  # the pool's rows, or rows that dequantize / cast
        for kv, rows, out in ((0, seq.k_rows, self.k), (1, seq.v_rows, self.v)):
            if isinstance(src, torch.Tensor):
                torch.index_select(src, 0, rows, out=out[:length])
                continue
            for a in range(0, length, GATHER_SLAB):
                b = min(length, a + GATHER_SLAB)
                out[a:b] = gather_rows(src, rows[a:b], kv)

    def warm(self) -> str | None:
        """On the launch thread (torch keeps cuDNN's plans per thread), before any step: check the
        kernels against the reference on one small chunk and, for cuDNN, build the plan of every
        (query bucket, piece length) by running it; any failure or mismatch falls back cudnn ->
        flash -> off (logged). -> the kernels kept (None: off)."""
        order = {"cudnn": ["cudnn", "flash"], "flash": ["flash"], "reference": ["reference"]}[self.kernels]
        self.enabled = False
        for name in order:
            try:
                err = self._check(name)
                if err > CHECK_TOLERANCE:
                    log.warning("long-context attention: %s kernels off by %.3g from the reference", name, err)
                    continue
                if name == "cudnn":
                    self._build_plans()
            except RuntimeError as exc:  # no such backend on this GPU / build of torch, or a shape it refuses
                log.warning("long-context attention: %s kernels failed: %s", name, exc)
                continue
            self.kernels, self.enabled = name, True
            return name
        log.warning("long-context attention: off (chunks over long contexts stay on the Triton kernel)")
        return None

    def _check(self, name: str) -> float:
        """||attend - reference|| / ||reference|| on one chunk of (up to) 128 queries after unit + 64
        cached keys (a piece, the rest, the chunk's own keys: every kind of call)."""
        n = min(128, self.max_query_len)
        length = self.unit + 64 + n
        gen = torch.Generator(device=self.device).manual_seed(22)
        pool = torch.randn(length, 2, self.num_kv_heads * self.head_dim, generator=gen, device=self.device,
                           dtype=self.dtype).view(length, 2, 1, self.num_kv_heads, self.head_dim)  # blocks of 1
        # q as the model's: the first columns of its fused q/k/v product (rows longer than q's)
        q = torch.randn(n, self.num_heads + 2 * self.num_kv_heads, self.head_dim, generator=gen, device=self.device,
                        dtype=self.dtype)[:, : self.num_heads]
        rows = torch.arange(length, device=self.device) * 2
        seq = LongSeq(0, n, length, rows, rows + 1)
        got = self.attend(q, pool, seq, name).clone()
        want = self.attend(q, pool, seq, "reference")
        return float((got - want).norm() / want.norm())

    def _build_plans(self) -> None:
        """Run each bucketed cuDNN shape once: the pieces at every (query bucket, piece length),
        the chunk over its own keys at every query bucket."""
        heads, kv_heads, head_dim = self.num_heads, self.num_kv_heads, self.head_dim
        calls = KERNELS["cudnn"]
        for i in range(1, -(-self.max_query_len // self.query_bucket) + 1):
            padded = i * self.query_bucket
            q_heads = self._q_heads[: heads * padded * head_dim].view(1, heads, padded, head_dim)
            q_fold = q_heads.view(1, kv_heads, heads // kv_heads * padded, head_dim)
            for length in self.piece_sizes():
                calls.pieces(q_fold, self._keys(self.k, 0, length), self._keys(self.v, 0, length), self.scale)
            own_k, own_v = (buf[: heads * padded * head_dim].view(1, heads, padded, head_dim)
                            for buf in (self._own_k, self._own_v))
            calls.own(q_heads, own_k, own_v, self.scale)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
