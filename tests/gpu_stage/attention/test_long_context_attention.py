"""LongContextAttention and LongContextBackend against the torch reference backend on small shapes
(the CPU path: the float32 reference kernels): chunks over cached contexts that are and are not a
multiple of the piece unit, several pieces, plain float32 / bfloat16 and 8-bit pools, shuffled block
tables, mixed steps where only one sequence is long, sliding-window layers and graph steps left to
the wrapped backend, the start-up check's fallback. On CUDA the same cases run the cuDNN/flash
kernels (test_long_context_attention_gpu.py)."""
from __future__ import annotations

import pytest
import torch

from gpu_stage.attention import torch_backend
from gpu_stage.attention.long_backend import LongContextBackend, make_plan
from gpu_stage.attention.long_context import LongContextAttention
from gpu_stage.attention.long_kernels import merge_into, reference_causal, reference_unmasked
from gpu_stage.attention.metadata import build_metadata
from gpu_stage.kv.cache import KvCache
from gpu_stage.kv.format import KvFormat
from gpu_stage.model.config import ModelConfig

HEADS, KV_HEADS, HEAD_DIM, BLOCK = 4, 2, 16, 4
SMALL = dict(min_context=8, min_query=2, unit=8, max_piece=32, query_bucket=4)


def _long(dtype: torch.dtype = torch.float32, max_model_len: int = 160, max_query_len: int = 64,
          device: str = "cpu", kernels: str = "reference", **small) -> LongContextAttention:
    return LongContextAttention(HEADS, KV_HEADS, HEAD_DIM, dtype, torch.device(device), max_model_len, max_query_len,
                                kernels, **{**SMALL, **small})


def _pool(num_blocks: int, dtype: torch.dtype, fmt: str | None, device: str = "cpu", seed: int = 0,
          head_dim: int = HEAD_DIM, v_transposed: bool = False):
    """A one-layer pool filled with random K/V (an 8-bit pool: random quantized values; in the
    V-transposed layout with `v_transposed`)."""
    config = ModelConfig("llama", 10, HEADS * head_dim, 8, 1, HEADS, KV_HEADS, head_dim)
    cache = KvCache(config, num_blocks, BLOCK, device, dtype, KvFormat(fmt) if fmt else None,
                    v_transposed=v_transposed)
    layer = cache.layer(0)
    gen = torch.Generator(device=device).manual_seed(seed)
    slots = torch.arange(num_blocks * BLOCK, device=device)
    meta = build_metadata([len(slots)], [len(slots)], [list(range(num_blocks))], BLOCK, device)
    k = torch.randn(len(slots), KV_HEADS, head_dim, generator=gen, device=device, dtype=dtype)
    v = torch.randn(len(slots), KV_HEADS, head_dim, generator=gen, device=device, dtype=dtype)
    torch_backend.store_kv(layer, k, v, meta)
    return layer


def _tables(lengths: list[int], num_blocks: int, seed: int = 1) -> list[list[int]]:
    """Disjoint, shuffled block tables (block 0 is the null block)."""
    perm = (torch.randperm(num_blocks - 1, generator=torch.Generator().manual_seed(seed)) + 1).tolist()
    out, used = [], 0
    for n in lengths:
        width = -(-n // BLOCK)
        out.append(perm[used : used + width])
        used += width
    assert used < num_blocks
    return out


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


def _step(query_lens: list[int], seq_lens: list[int], dtype=torch.float32, fmt=None, device="cpu", seed=0,
          head_dim: int = HEAD_DIM):
    """(q, a pool's layer of random K/V, the step's metadata with shuffled block tables)."""
    num_blocks = sum(-(-s // BLOCK) for s in seq_lens) + 4
    layer = _pool(num_blocks, dtype, fmt, device, seed, head_dim)
    meta = build_metadata(query_lens, seq_lens, _tables(seq_lens, num_blocks, seed + 1), BLOCK, device)
    gen = torch.Generator(device=device).manual_seed(seed + 2)
    # q as the model's: the first columns of its fused q/k/v product (rows longer than q's)
    q = torch.randn(sum(query_lens), HEADS + 2 * KV_HEADS, head_dim, generator=gen, device=device, dtype=dtype)
    return q[:, :HEADS], layer, meta


def _fresh(meta):
    """A copy of a step's metadata with no plan in it (each backend then plans its own)."""
    block = meta.block_size  # the step's own: the GPU tests use 16, these 4
    return build_metadata(meta.query_lens_host, meta.seq_lens_host,
                          [row[: -(-s // block)] for row, s in zip(meta.block_tables.tolist(), meta.seq_lens_host)],
                          block, meta.block_tables.device)


def _reference(q, layer, meta, window=None) -> torch.Tensor:
    """The torch backend's attention on the step."""
    return torch_backend.forward(q, layer, _fresh(meta), window)


@pytest.mark.parametrize("query_len, seq_len", [(6, 22), (8, 24), (16, 56), (3, 120), (64, 64 + 37)])
def test_one_chunk_matches_the_torch_backend(query_len: int, seq_len: int) -> None:
    """Cached contexts 16 (two units), 16 + 0, 40 (pieces 32 + 8), 117 (32 x 3 + 16 + 4 + tail), 37."""
    q, layer, meta = _step([query_len], [seq_len])
    long = _long()
    plan = make_plan(meta, layer, long)
    assert plan is not None and not plan.runs and len(plan.seqs) == 1
    got = long.attend(q, layer, plan.seqs[0])
    assert _rel(got, _reference(q, layer, meta)) < 1e-5


def test_pieces_cover_the_context_largest_first() -> None:
    long = _long()
    assert long.piece_sizes() == [8, 16, 32]
    assert long.pieces(120) == [(0, 32), (32, 32), (64, 32), (96, 16), (112, 8)]
    assert long.pieces(0) == []
    with pytest.raises(AssertionError):
        long.pieces(12)  # not a multiple of the unit


@pytest.mark.parametrize("dtype, fmt, tol", [(torch.bfloat16, None, 1e-2), (torch.float32, "int8", 1e-5),
                                             (torch.float32, "fp8_e4m3", 1e-5), (torch.bfloat16, "fp8_e5m2", 1e-2)])
def test_bfloat16_and_8_bit_pools(dtype: torch.dtype, fmt: str | None, tol: float) -> None:
    """An 8-bit pool is dequantized in the gather (in slabs: GATHER_SLAB is patched small) exactly as
    the torch backend reads it."""
    import gpu_stage.attention.long_context as lc

    q, layer, meta = _step([12], [12 + 45], dtype, fmt)
    long = _long(dtype)
    old, lc.GATHER_SLAB = lc.GATHER_SLAB, 10
    try:
        got = long.attend(q, layer, make_plan(meta, layer, long).seqs[0])
    finally:
        lc.GATHER_SLAB = old
    assert _rel(got, _reference(q, layer, meta)) < tol


@pytest.mark.parametrize("fmt", ["int8", "fp8_e4m3"])
def test_a_v_transposed_8_bit_pool_reads_as_the_row_layout(fmt: str) -> None:
    """The same K/V stored into both 8-bit layouts: the gather (in slabs) dequantizes the same
    values, so the chunk's attention is the same, and the torch backend's on the V-transposed pool."""
    import gpu_stage.attention.long_context as lc

    seq_lens = [12 + 45]
    num_blocks = -(-seq_lens[0] // BLOCK) + 4
    layers = [_pool(num_blocks, torch.float32, fmt, v_transposed=vt) for vt in (False, True)]
    assert torch.equal(layers[0].v_data.float(), layers[1].v_data.float())
    meta = build_metadata([12], seq_lens, _tables(seq_lens, num_blocks, 1), BLOCK, "cpu")
    q = torch.randn(12, HEADS + 2 * KV_HEADS, HEAD_DIM, generator=torch.Generator().manual_seed(2))[:, :HEADS]
    long = _long()
    old, lc.GATHER_SLAB = lc.GATHER_SLAB, 10
    try:
        got = [long.attend(q, layer, make_plan(_fresh(meta), layer, long).seqs[0]).clone() for layer in layers]
    finally:
        lc.GATHER_SLAB = old
    assert _rel(got[1], got[0]) < 1e-6
    assert _rel(got[1], _reference(q, layers[1], meta)) < 1e-5


def test_mixed_step_only_the_long_chunk_takes_the_path() -> None:
    """decode, fresh prefill, LONG chunk, decode, short chunk over a short context, LONG chunk."""
    query_lens = [1, 5, 10, 1, 3, 7]
    seq_lens = [30, 5, 10 + 50, 9, 3 + 4, 7 + 90]
    q, layer, meta = _step(query_lens, seq_lens)
    backend = LongContextBackend(torch_backend, _long())
    plan = backend._plan(meta, layer)
    assert [s.q_start for s in plan.seqs] == [6, 20] and [r for r, _ in plan.runs] == [slice(0, 6), slice(16, 20)]
    assert [run.seq_lens_host for _, run in plan.runs] == [[30, 5], [9, 7]]
    got = backend.forward(q, layer, meta)
    assert _rel(got, _reference(q, layer, meta)) < 1e-5
    assert backend._plan(meta, layer) is plan  # once per step


def test_steps_without_a_long_chunk_are_the_wrapped_backends() -> None:
    q, layer, meta = _step([1, 4, 1], [40, 4 + 7, 100])  # cached 7 < min_context, single tokens
    backend = LongContextBackend(torch_backend, _long())
    assert backend._plan(meta, layer) is None and meta.long_plan is False
    assert torch.equal(backend.forward(q, layer, meta), _reference(q, layer, meta))


def test_graph_steps_and_windowed_layers_stay_on_the_wrapped_backend() -> None:
    q, layer, meta = _step([1, 10], [30, 60])
    backend = LongContextBackend(torch_backend, _long())
    meta.static_shape = True
    assert make_plan(meta, layer, backend.long) is None
    meta.static_shape = False
    assert backend._plan(meta, layer) is not None
    windowed = backend.forward(q, layer, meta, window=16)  # shorter than the step's longest sequence
    assert torch.equal(windowed, _reference(q, layer, meta, window=16))
    assert _rel(backend.forward(q, layer, meta, window=64), _reference(q, layer, meta)) < 1e-5  # no bite


def test_rope_store_kv_hands_each_run_its_rows_of_the_fresh_kv() -> None:
    q, layer, meta = _step([4, 10, 3], [4, 60, 3])
    backend = LongContextBackend(torch_backend, _long())
    k = torch.randn(17, KV_HEADS, HEAD_DIM)
    backend.store_kv(layer, k, k.clone(), meta)
    (rows_a, run_a), (rows_b, run_b) = backend._plan(meta, layer).runs
    assert torch.equal(run_a.fresh_kv[0], k[0:4]) and torch.equal(run_b.fresh_kv[0], k[14:17])


def test_merge_of_two_key_sets_is_the_softmax_over_both() -> None:
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 4, 5, 8, generator=gen)
    k, v = torch.randn(1, 4, 12, 8, generator=gen), torch.randn(1, 4, 12, 8, generator=gen)
    whole, whole_lse = reference_unmasked(q, k, v, 0.3)
    acc, acc_lse = reference_unmasked(q, k[:, :, :7], v[:, :, :7], 0.3)
    part, part_lse = reference_unmasked(q, k[:, :, 7:], v[:, :, 7:], 0.3)
    merge_into(acc, acc_lse, part, part_lse)
    assert torch.allclose(acc, whole, atol=1e-6) and torch.allclose(acc_lse, whole_lse, atol=1e-6)
    # causal on a square: query i sees keys 0 .. i
    out, lse = reference_causal(q, k[:, :, :5], v[:, :, :5], 0.3)
    first, _ = reference_unmasked(q[:, :, :1], k[:, :, :1], v[:, :, :1], 0.3)
    last, _ = reference_unmasked(q[:, :, -1:], k[:, :, :5], v[:, :, :5], 0.3)
    assert torch.allclose(out[:, :, :1], first, atol=1e-6) and torch.allclose(out[:, :, -1:], last, atol=1e-6)


def test_warm_falls_back_and_switches_off_without_cuda_kernels() -> None:
    """On CPU neither cuDNN's nor flash's CUDA op runs: the check fails both and the path is off
    (every chunk then stays on the wrapped backend); the reference kernels pass their check."""
    long = _long(kernels="cudnn", unit=4096, max_piece=4096, max_model_len=4096 + 256)
    assert long.warm() is None and not long.enabled and not long.applies(1024, 100_000)
    assert _long(kernels="reference", unit=64, max_piece=64, max_model_len=320).warm() == "reference"


def test_a_model_on_the_wrapper_matches_the_plain_backend_chunk_by_chunk() -> None:
    """A tiny Llama prefilling 120 tokens in chunks of 24 (chunks from 48 cached tokens on take the
    path, in every layer: all rows are sampled): every row's logits as the torch backend's."""
    from tiny_hf_models import hf_model, model_config, our_model

    from gpu_stage.model.llama import LlamaForCausalLM

    hf = hf_model("llama", num_attention_heads=4, num_key_value_heads=2)  # head_dim 16
    config = model_config(hf)
    long = LongContextAttention(4, 2, 16, torch.float32, torch.device("cpu"), 128, 24, "reference", min_context=40,
                                min_query=8, unit=8, max_piece=16, query_bucket=8)
    wrapped = LlamaForCausalLM(config, "cpu", torch.float32, LongContextBackend(torch_backend, long))
    wrapped.load_weights(hf.state_dict().items())
    plain = our_model(hf)
    prompt = torch.randint(0, 400, (120,), generator=torch.Generator().manual_seed(4))
    caches = [KvCache(config, 40, BLOCK, "cpu", torch.float32) for _ in range(2)]
    table = list(range(39, 8, -1))  # reversed: not the identity
    calls = []
    attend = long.attend
    long.attend = lambda *a, **k: calls.append(1) or attend(*a, **k)
    for start in range(0, 120, 24):
        got, want = [model(prompt[start : start + 24], meta.positions, cache, meta, torch.arange(24))
                     for model, cache in ((wrapped, caches[0]), (plain, caches[1]))
                     for meta in [build_metadata([24], [start + 24], [table], BLOCK, "cpu")]]
        assert (got - want).abs().max() < 1e-4, start
    assert len(calls) == 3 * config.num_layers  # the chunks at 48, 72 and 96 cached tokens


def test_warm_falls_back_to_flash_when_cudnn_is_off_or_fails_a_shape(monkeypatch) -> None:
    """The start-up check with stand-ins: a cuDNN whose pieces are off by 2x, then one that passes the
    check but refuses a shape while its plans are built; flash (the reference here) is kept both times."""
    from gpu_stage.attention import long_kernels

    ref = long_kernels.KERNELS["reference"]
    monkeypatch.setitem(long_kernels.KERNELS, "flash", ref)

    def doubled(q, k, v, scale):
        out, lse = ref.pieces(q, k, v, scale)
        return 2 * out, lse

    monkeypatch.setitem(long_kernels.KERNELS, "cudnn", ref._replace(pieces=doubled))
    long = _long(kernels="cudnn", unit=64, max_piece=128, max_model_len=320)
    assert long.warm() == "flash" and long.enabled and long.kernels == "flash"

    def refuses_large(q, k, v, scale):
        if k.shape[2] > 64:
            raise RuntimeError("cuDNN: no plan for this shape")
        return ref.pieces(q, k, v, scale)

    monkeypatch.setitem(long_kernels.KERNELS, "cudnn", ref._replace(pieces=refuses_large))
    long = _long(kernels="cudnn", unit=64, max_piece=128, max_model_len=320)
    assert long.warm() == "flash"
    monkeypatch.setitem(long_kernels.KERNELS, "cudnn", ref)
    assert _long(kernels="cudnn", unit=64, max_piece=128, max_model_len=320).warm() == "cudnn"


def test_the_path_is_built_only_on_cuda_with_triton_in_16_bits_for_long_windows(monkeypatch) -> None:
    import gpu_stage.kernels
    from gpu_stage.attention import long_backend
    from gpu_stage.attention.long_backend import build_long_context

    monkeypatch.setattr(gpu_stage.kernels, "interpreting", lambda: False)  # as on a GPU
    monkeypatch.setattr(long_backend, "LongContextAttention", lambda *a: a)  # no CUDA memory here
    cuda, bf16 = torch.device("cuda"), torch.bfloat16
    args = (32, 8, 128)
    assert build_long_context("auto", *args, bf16, cuda, "triton", 131072, 8192) == (
        *args, bf16, cuda, 131072, 8192, "cudnn")
    assert build_long_context("flash", *args, torch.float16, cuda, "triton", 9216, 4096)[-1] == "flash"
    assert build_long_context("auto", *args, bf16, torch.device("cpu"), "triton", 131072, 8192) is None
    assert build_long_context("off", *args, bf16, cuda, "triton", 131072, 8192) is None
    assert build_long_context("auto", *args, bf16, cuda, "torch", 131072, 8192) is None
    assert build_long_context("auto", *args, torch.float32, cuda, "triton", 131072, 8192) is None
    assert build_long_context("auto", *args, bf16, cuda, "triton", 8192, 8192) is None  # no chunk past 8K
    with pytest.raises(ValueError, match="long-context-attention"):
        build_long_context("fast", *args, bf16, cuda, "triton", 131072, 8192)
