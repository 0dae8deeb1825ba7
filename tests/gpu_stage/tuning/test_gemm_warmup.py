"""The start-up sweep runs every product of a layer at every row count a step can have, through
the model's ops (where a cuBLASLt algorithm may have been chosen)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

import gpu_stage.tuning.gemm_warmup as warmup
from gpu_stage.loaders import load_model_source
from gpu_stage.model.llama import LlamaForCausalLM


def test_row_counts_cover_small_counts_then_every_step() -> None:
    counts = warmup.row_counts(100, step=8)
    assert counts[:8] == list(range(1, 9)) and counts[-1] == 100
    assert all(b - a <= 8 for a, b in zip(counts, counts[1:]))
    assert warmup.row_counts(5, step=8) == [1, 2, 3, 4, 5]


def test_warm_gemm_kernels_runs_each_layer_product_at_each_row_count(monkeypatch) -> None:
    source = load_model_source("dummy:tiny", seed=0)
    model = LlamaForCausalLM(source.config)
    model.load_weights(source.weights("cpu", torch.float32))
    seen: set[tuple[int, tuple[int, int]]] = set()
    real_linear = F.linear

    def recording_linear(x, weight, bias=None):
        assert x.shape[1] == weight.shape[1] and x.is_contiguous()
        seen.add((x.shape[0], tuple(weight.shape)))
        return real_linear(x, weight, bias)

    monkeypatch.setattr(model, "ops", type("RecordingOps", (), {"linear": staticmethod(recording_linear)}))
    calls = warmup.warm_gemm_kernels(model, max_tokens=40, max_sampled_rows=3)
    layer = model.layers[0]
    shapes = {tuple(w.shape) for w in (layer.qkv_weight, layer.o_weight, layer.gate_up_weight, layer.down_weight)}
    head = tuple(model.embed_weight.shape if model.lm_head_weight is None else model.lm_head_weight.shape)
    expected = {(rows, shape) for rows in warmup.row_counts(40) for shape in shapes} | {(r, head) for r in (1, 2, 3)}
    assert seen == expected
    assert calls == 4 * len(warmup.row_counts(40)) + 3


def test_the_sweep_stops_at_max_sweep_rows(monkeypatch) -> None:
    source = load_model_source("dummy:tiny", seed=0)
    model = LlamaForCausalLM(source.config)
    model.load_weights(source.weights("cpu", torch.float32))
    monkeypatch.setattr(warmup, "MAX_SWEEP_ROWS", 24)
    rows: list[int] = []
    real_linear = F.linear
    recording = staticmethod(lambda x, w, b=None: rows.append(x.shape[0]) or real_linear(x, w, b))
    monkeypatch.setattr(model, "ops", type("RecordingOps", (), {"linear": recording}))
    warmup.warm_gemm_kernels(model, max_tokens=1000, max_sampled_rows=1)
    assert max(rows) == 24
