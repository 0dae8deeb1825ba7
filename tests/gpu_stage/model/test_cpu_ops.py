"""CpuOps and the CPU weight layout: same values, same shapes, products equal to F.linear's within
fp32 summation-order rounding, the whole model's logits and greedy tokens as transformers' (the
reference TorchOps model runs the same comparison in test_llama.py), and only on CPU."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tiny_hf_models import PagedSequence, hf_model, our_model

from gpu_stage.loaders.dummy_loader import load_dummy
from gpu_stage.model.cpu_ops import (LAYER_ROW_BUCKETS, PACKED_HEAD_MIN_ROWS, PACKED_LAYER_ROWS, CpuOps,
                                      onednn_available, prepare_cpu_model, row_bucket)
from gpu_stage.model.torch_ops import TorchOps
from gpu_stage.runner_builder import load_model


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def test_the_layer_weights_keep_values_and_shapes_in_the_transposed_layout() -> None:
    model = our_model(hf_model("llama"))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ops = prepare_cpu_model(model)
    assert isinstance(ops, CpuOps) and model.ops is ops and all(layer.ops is ops for layer in model.layers)
    for name, param in model.named_parameters():
        assert param.shape == before[name].shape and torch.equal(param, before[name]), name
    w = model.layers[0].gate_up_weight
    assert w.t().is_contiguous() and not w.is_contiguous()  # stored [in, out]
    assert model.embed_weight.is_contiguous()  # the embedding (and a tied head) stays as it was


@pytest.mark.skipif(not onednn_available(), reason="torch built without oneDNN")
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 8, 40])
def test_the_packed_head_gives_f_linear_s_products(rows: int) -> None:
    torch.manual_seed(0)
    head = torch.nn.Parameter(torch.randn(1000, 64), requires_grad=False)
    ops = CpuOps()
    assert ops.pack_head(head)
    x = torch.randn(rows, 64)
    out = ops.linear(x, head)
    assert out.shape == (rows, 1000) and _rel(out, F.linear(x, head)) < 1e-6
    other = torch.randn(1000, 64)  # any other weight goes through F.linear
    assert torch.equal(ops.linear(x, other), F.linear(x, other))
    assert PACKED_HEAD_MIN_ROWS == 2  # one row: F.linear over the head's [in, out] copy
    assert ops.head_one_row.t().is_contiguous() and torch.equal(ops.head_one_row, head)
    invariant = CpuOps(row_invariant=True)
    invariant.pack_head(head)
    assert invariant.head_one_row is None


def test_a_bf16_head_is_not_packed() -> None:
    ops = CpuOps()
    assert not ops.pack_head(torch.zeros(8, 4, dtype=torch.bfloat16))
    x = torch.randn(4, 4, dtype=torch.bfloat16)
    w = torch.randn(8, 4, dtype=torch.bfloat16)
    assert torch.equal(ops.linear(x, w), F.linear(x, w))


@pytest.mark.parametrize("arch,overrides", [("llama", {}), ("llama", {"tie_word_embeddings": True}),
                                            ("qwen2", {"tie_word_embeddings": True})])
def test_the_prepared_model_matches_transformers_and_the_reference(arch: str, overrides: dict) -> None:
    hf = hf_model(arch, **overrides)
    reference, prepared = our_model(hf), our_model(hf)
    prepare_cpu_model(prepared)
    prompt = torch.randint(0, 400, (37,), generator=torch.Generator().manual_seed(3)).tolist()
    with torch.no_grad():
        hf_logits = hf(torch.tensor([prompt])).logits[0, -1]
    ref_logits = PagedSequence(reference, 64).prefill(prompt, chunk=16)
    logits = PagedSequence(prepared, 64).prefill(prompt, chunk=16)
    assert (logits - hf_logits).abs().max() < 1e-4 and _rel(logits, ref_logits) < 1e-5
    assert PagedSequence(prepared, 64).greedy(prompt, 8) == PagedSequence(reference, 64).greedy(prompt, 8)


def test_the_builder_prepares_cpu_models_only() -> None:
    source = load_dummy("tiny")
    cpu = load_model(source, torch.device("cpu"), torch.float32, "torch")
    assert isinstance(cpu.ops, CpuOps) and cpu.ops is not TorchOps
    if torch.cuda.is_available():  # a GPU keeps its ops and layouts
        gpu = load_model(source, torch.device("cuda"), torch.bfloat16, "torch")
        assert gpu.ops is TorchOps and gpu.layers[0].gate_up_weight.is_contiguous()


@pytest.mark.skipif(not onednn_available(), reason="torch built without oneDNN")
@pytest.mark.parametrize("out_features,in_features", [(960, 576), (3072, 576), (576, 1536)])  # SmolLM2's products
def test_row_invariant_products_give_a_row_the_same_bits_at_any_row_count(out_features: int, in_features: int) -> None:
    """What an 8-bit pool needs (kv/invariance.py): a row's product does not depend on the rows
    beside it, its place among them or the thread count (MKL's F.linear differs below 4 rows)."""
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(in_features, out_features).t() / in_features**0.5, requires_grad=False)
    bias = torch.randn(out_features)
    ops = CpuOps(row_invariant=True)
    assert ops.pack(weight)
    x = torch.randn(700, in_features)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        ref = ops.linear(x, weight, bias)
        assert _rel(ref, F.linear(x, weight, bias)) < 1e-6
        rng = torch.Generator().manual_seed(1)
        for rows in [1, 2, 3, 4, 5, 7, 8, 9, 17, 64, 130, 512]:
            for num_threads in (1, 2):
                torch.set_num_threads(num_threads)
                start = int(torch.randint(0, 700 - rows, (1,), generator=rng))
                assert torch.equal(ops.linear(x[start:start + rows], weight, bias), ref[start:start + rows]), rows
    finally:
        torch.set_num_threads(threads)


@pytest.mark.skipif(not onednn_available(), reason="torch built without oneDNN")
def test_a_row_invariant_model_packs_every_product_and_keeps_the_reference_s_logits() -> None:
    hf = hf_model("llama")
    reference, prepared = our_model(hf), our_model(hf)
    ops = prepare_cpu_model(prepared, row_invariant=True)
    assert ops.row_invariant and len(ops.packed) == 4 * len(prepared.layers) + 1
    x = torch.randn(2, prepared.layers[0].gate_up_weight.shape[1])
    assert torch.equal(ops.gate_up_silu(x, prepared.layers[0].gate_up_weight),
                       ops.silu_and_mul(ops.linear(x, prepared.layers[0].gate_up_weight)))
    prompt = torch.randint(0, 400, (37,), generator=torch.Generator().manual_seed(3)).tolist()
    ref_logits = PagedSequence(reference, 64).prefill(prompt, chunk=16)
    assert _rel(PagedSequence(prepared, 64).prefill(prompt, chunk=16), ref_logits) < 1e-5
    assert PagedSequence(prepared, 64).greedy(prompt, 8) == PagedSequence(reference, 64).greedy(prompt, 8)
    assert not prepare_cpu_model(our_model(hf)).row_invariant  # the default: F.linear at 1 row and past 64


@pytest.mark.skipif(not onednn_available(), reason="torch built without oneDNN")
def test_packed_layers_serve_2_to_64_rows_and_f_linear_the_rest() -> None:
    model = our_model(hf_model("llama"))
    ops = prepare_cpu_model(model)  # the default: layer weights packed too
    assert not ops.row_invariant and ops.num_packed_layers == 4 * len(model.layers)
    assert len(ops.packed) == 4 * len(model.layers) + 1
    w = model.layers[0].down_weight
    weight, _, first, last = ops.packed[id(w)]
    assert weight is w and (first, last) == PACKED_LAYER_ROWS
    # Swap in the packed copy of 2 x w: a product that used it reads twice F.linear's.
    ops.packed[id(w)] = (w, torch.ops.mkldnn._reorder_linear_weight(2 * w.detach(), 8), first, last)
    for rows in (1, first, 4, last, last + 1):
        x = torch.randn(rows, w.shape[1])
        want = 2 * F.linear(x, w) if first <= rows <= last else F.linear(x, w)
        assert _rel(ops.linear(x, w), want) < 1e-6, rows
    assert prepare_cpu_model(our_model(hf_model("llama")), pack_layers=False).num_packed_layers == 0


def test_row_buckets_cover_2_to_64_rows_with_at_most_half_again() -> None:
    assert LAYER_ROW_BUCKETS[0] == PACKED_LAYER_ROWS[0] and LAYER_ROW_BUCKETS[-1] == PACKED_LAYER_ROWS[1]
    for rows in range(PACKED_LAYER_ROWS[0], PACKED_LAYER_ROWS[1] + 1):
        bucket = row_bucket(rows)
        assert bucket in LAYER_ROW_BUCKETS and rows <= bucket <= max(2, 1.5 * rows), rows


@pytest.mark.skipif(not onednn_available(), reason="torch built without oneDNN")
def test_a_padded_layer_product_gives_each_row_its_bucket_s_bits_and_f_linear_s_values() -> None:
    model = our_model(hf_model("llama"))
    ops = prepare_cpu_model(model)
    w = model.layers[0].gate_up_weight
    torch.manual_seed(1)
    x = torch.randn(48, w.shape[1])
    full = ops.linear(x, w)  # 48 rows: a bucket of its own
    for rows in (33, 40, 47):  # padded to 48: each row's bits are those of the 48-row product
        part = ops.linear(x[:rows], w)
        assert part.shape == (rows, w.shape[0]) and torch.equal(part, full[:rows]), rows
        assert _rel(part, F.linear(x[:rows], w)) < 1e-6


@pytest.mark.skipif(not onednn_available(), reason="torch built without oneDNN")
def test_the_layer_primitives_are_built_before_serving() -> None:
    model = our_model(hf_model("llama"))
    ops = prepare_cpu_model(model, pack_layers=False)
    assert ops.build_layer_primitives() == 0  # nothing packed, nothing to build
    ops = prepare_cpu_model(our_model(hf_model("llama")))
    shapes = {tuple(layer_weight.shape) for layer in model.layers
              for layer_weight in (layer.qkv_weight, layer.o_weight, layer.gate_up_weight, layer.down_weight)}
    assert ops.build_layer_primitives() == len(shapes) * len(LAYER_ROW_BUCKETS)
