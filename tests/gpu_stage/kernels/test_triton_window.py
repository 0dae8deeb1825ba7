"""Sliding-window attention in the Triton kernels (general prefill/mixed kernel, split-K decode)
against the torch reference backend and a dense float64 reference with the window, under the
exactness rule's norm (< 1e-5 fp32, < 1e-2 bf16). Windows smaller than a key tile, equal to one and
spanning several, chunks with long cached context (so whole tiles lie before the window and are
skipped), and decodes whose window starts mid-split. Without CUDA under TRITON_INTERPRET=1."""
from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("triton")

from test_triton_kernels import DEVICE, TOL, _paged_case, _rel  # noqa: E402

from gpu_stage.attention import torch_backend, triton_backend  # noqa: E402
from gpu_stage.kernels import decode_attention as decode_mod, prefill_attention as prefill_mod  # noqa: E402


def _dense_window_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int, window: int) -> torch.Tensor:
    """q [Tq, H, D] at positions start.., k/v [L, Hkv, D]: each query sees keys p - window + 1 .. p."""
    q, k, v = q.double().cpu(), k.double().cpu(), v.double().cpu()
    group = q.shape[1] // k.shape[1]
    keys, queries = torch.arange(k.shape[0])[None, :], (start + torch.arange(q.shape[0]))[:, None]
    hidden = (keys > queries) | (keys <= queries - window)
    out = torch.empty(q.shape, dtype=torch.float64)
    for h in range(q.shape[1]):
        scores = q[:, h] @ k[:, h // group].T / math.sqrt(q.shape[2])
        out[:, h] = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1) @ v[:, h // group]
    return out


def _check(specs, window, num_heads=4, num_kv_heads=2, head_dim=16, block_size=4, dtype=torch.float32,
           seed=0, splits=None):
    pool, kv_layer, q, k, v, meta, _ = _paged_case(specs, num_heads, num_kv_heads, head_dim, block_size, dtype, seed)
    triton_backend.store_kv(kv_layer, k, v, meta)
    meta.decode_num_splits = splits
    out = triton_backend.forward(q, kv_layer, meta, window=window)
    ref_meta = type(meta)(**{**meta.__dict__, "backend_plan": None})
    ref = torch_backend.forward(q, kv_layer, ref_meta, window=window)
    assert _rel(out, ref) < TOL[dtype], (specs, window)
    # and the unwindowed kernel differs wherever the window hides keys (the check can fail)
    if max(c + n for c, n in specs) > window + 1:
        full = torch_backend.forward(q, kv_layer, type(meta)(**{**meta.__dict__, "backend_plan": None}))
        assert _rel(full, ref) > 1e-3
    return meta.backend_plan, out


# (cached context, new queries) per sequence; BLOCK_N is 16 under the interpreter (64 on a GPU)
MIXED = [(0, 40), (57, 23), (90, 1), (5, 1), (0, 1), (31, 9), (130, 1)]


@pytest.mark.parametrize("window", [1, 3, 8, 16, 17, 37, 200])
def test_mixed_step_with_window_equals_reference(window: int) -> None:
    plan, _ = _check(MIXED, window, seed=window)
    assert not plan.decode_only


@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 4), (6, 1)])
def test_window_with_other_gqa_groups(num_heads: int, num_kv_heads: int) -> None:
    _check([(70, 30), (3, 12), (44, 1)], 10, num_heads, num_kv_heads, seed=num_heads)


def test_window_long_chunk_bf16() -> None:
    _check([(0, 64), (100, 40), (12, 1)], 24, 8, 2, head_dim=32, block_size=8, dtype=torch.bfloat16, seed=7)


@pytest.mark.parametrize("splits", [1, 2, 4])
@pytest.mark.parametrize("window", [1, 5, 16, 33])
def test_decode_with_window_equals_reference(splits: int, window: int) -> None:
    # contexts shorter than the window, spanning it, and far past it (skipped tiles)
    plan, _ = _check([(4, 1), (40, 1), (150, 1), (15, 1)], window, 8, 2, seed=splits, splits=splits)
    assert plan.decode_only and plan.workspace.num_splits == splits


def test_kernels_against_dense_window_reference() -> None:
    """Independent of the torch backend's masks: float64 dense attention with the window."""
    specs, window = [(45, 20), (0, 33)], 11
    pool, kv_layer, q, k, v, meta, _ = _paged_case(specs, 4, 2, 16, 4, torch.float32, 11)
    triton_backend.store_kv(kv_layer, k, v, meta)
    out = triton_backend.forward(q, kv_layer, meta, window=window)
    # rebuild the full K/V of each sequence from the cache through the reference's gather
    rows, refs = 0, []
    for i, (context, new) in enumerate(specs):
        table = meta.block_tables[i].long().cpu()
        pos = torch.arange(context + new)
        blocks = table[pos // 4]
        keys = kv_layer[blocks, 0, pos % 4].to("cpu")
        values = kv_layer[blocks, 1, pos % 4].to("cpu")
        refs.append(_dense_window_reference(q[rows : rows + new], keys, values, context, window))
        rows += new
    assert _rel(out, torch.cat(refs)) < 1e-5


def test_no_window_arguments_keep_the_old_behaviour() -> None:
    """window=None and a window past every sequence give the causal result (the SDPA route and
    graphs with max_model_len lengths rely on it)."""
    pool, kv_layer, q, k, v, meta, ref = _paged_case(MIXED, 4, 2, 16, 4, torch.float32, 3)
    triton_backend.store_kv(kv_layer, k, v, meta)
    for window in (None, 10_000):
        meta.backend_plan = None
        assert _rel(triton_backend.forward(q, kv_layer, meta, window=window), ref) < 1e-5
    direct = prefill_mod.prefill_attention(q, kv_layer, meta.cu_seqlens_q, meta.seq_lens, meta.block_tables,
                                           meta.num_seqs, window=decode_mod.NO_WINDOW)
    assert _rel(direct, ref) < 1e-5


def test_windowed_layer_never_takes_sdpa(monkeypatch) -> None:
    """A fresh long prefill goes to SDPA when unwindowed; a windowed layer of the same step must
    take the kernel (SDPA's causal call has no window)."""
    calls = []
    monkeypatch.setattr(triton_backend, "fresh_sdpa", lambda *a: calls.append(1) or a[0])
    monkeypatch.setattr(triton_backend, "prefill_attention", lambda *a, **kw: calls.append(kw.get("window")) or a[0])
    meta = type("M", (), {})()
    meta.backend_plan = triton_backend.TritonPlan(False, 1, None, sdpa=[(0, 600)])
    meta.max_seq_len, meta.fresh_kv = 600, (torch.zeros(600, 2, 16), torch.zeros(600, 2, 16))
    meta.cu_seqlens_q = meta.seq_lens = meta.block_tables = None
    q = torch.zeros(600, 4, 16)
    triton_backend.forward(q, None, meta)
    triton_backend.forward(q, None, meta, window=4096)  # wider than the step: plain
    triton_backend.forward(q, None, meta, window=256)
    assert calls == [1, 1, 256]


@pytest.mark.parametrize("arch,overrides", [
    ("mistral", {"sliding_window": 8}),
    ("qwen2", {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1}),
], ids=["mistral-w8", "qwen2-w8-from-layer-1"])
def test_model_with_triton_backend_matches_transformers_past_the_window(arch: str, overrides: dict) -> None:
    """The whole model on the Triton backend and ops: chunked prefill (16-token chunks) then decode
    steps, every sampled row's logits against transformers' forward over the same tokens. Two
    layers: Qwen2's first full, its second windowed (the per-layer switch), Mistral's both windowed;
    chunks and decodes all past the 8-token window."""
    from tiny_hf_models import hf_model, model_config

    from gpu_stage.attention import get_attention_backend
    from gpu_stage.attention.metadata import build_metadata
    from gpu_stage.kv.cache import KvCache
    from gpu_stage.model import get_layer_ops
    from gpu_stage.model.llama import LlamaForCausalLM

    hf = hf_model(arch, num_hidden_layers=2, max_position_embeddings=256, **overrides)
    model = LlamaForCausalLM(model_config(hf), DEVICE, torch.float32, get_attention_backend("triton"),
                             get_layer_ops("triton"))
    model.load_weights((k, v.to(DEVICE)) for k, v in hf.state_dict().items())
    tokens = torch.randint(0, 400, (52,), generator=torch.Generator().manual_seed(5)).tolist()
    with torch.no_grad():
        ref = hf(torch.tensor([tokens])).logits[0]  # [52, vocab]
    cache = KvCache(model.config, 20, 4, DEVICE, torch.float32)
    table = list(range(19, 0, -1))[:13]
    steps = [(0, 16), (16, 32), (32, 48)] + [(p, p + 1) for p in range(48, 52)]
    got, rows = [], []
    for start, end in steps:
        meta = build_metadata([end - start], [end], [table[: -(-end // 4)]], 4, DEVICE, sample_rows=[end - start - 1])
        ids = torch.tensor(tokens[start:end], device=DEVICE)
        got.append(model(ids, meta.positions, cache, meta, torch.tensor([end - start - 1], device=DEVICE))[0])
        rows.append(end - 1)
    assert _rel(torch.stack(got), ref[rows]) < 1e-5
