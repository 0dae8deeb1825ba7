"""The cuBLASLt plan: which algorithm a product at a row count takes, and that it computes x @ W^T.
The plan's logic runs on CPU with a stand-in library; the timing and the real library on a GPU."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gpu_stage.model.triton_ops import TritonOps
from gpu_stage.tuning import gemm_tuning
from gpu_stage.tuning.cublaslt import LtAlgo
from gpu_stage.tuning.gemm_tuning import LtPlan, tuned_row_counts


class FakeProduct:
    def __init__(self, rows: int, unsupported: set[int]) -> None:
        self.rows, self.unsupported, self.runs = rows, unsupported, 0

    def supports(self, algo: LtAlgo) -> bool:
        return self.rows not in self.unsupported

    def run(self, x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, algo: LtAlgo) -> None:
        self.runs += 1
        out.copy_(x @ weight.t())


class FakeLibrary:
    def __init__(self, unsupported: set[int] = frozenset()) -> None:
        self.unsupported = set(unsupported)
        self.built: list[tuple[int, int, int]] = []

    def product(self, rows: int, out_features: int, in_features: int, dtype: torch.dtype) -> FakeProduct:
        self.built.append((rows, out_features, in_features))
        return FakeProduct(rows, self.unsupported)


A, B = LtAlgo(b"a" * 64, 0), LtAlgo(b"b" * 64, 3)


def test_a_choice_serves_exactly_the_row_count_it_was_timed_at() -> None:
    plan = LtPlan(FakeLibrary(), torch.float32)
    plan.choose(24, 16, 64, A)
    plan.choose(24, 16, 8, None)
    plan.choose(24, 16, 2048, B)
    assert plan.choice_for(8, 24, 16) is None  # F.linear won at 8
    assert plan.choice_for(64, 24, 16) == A and plan.choice_for(2048, 24, 16) == B
    assert all(plan.choice_for(r, 24, 16) is None for r in (4, 63, 65, 2047, 5000))  # never timed
    assert plan.choice_for(64, 16, 24) is None  # another weight shape: never timed
    with pytest.raises(AssertionError):
        plan.choose(24, 16, 64, B)


def test_the_plan_runs_its_choice_and_leaves_the_rest_to_f_linear() -> None:
    lib = FakeLibrary(unsupported={100})
    plan = LtPlan(lib, torch.float32)
    plan.choose(24, 16, 80, A)
    plan.choose(24, 16, 100, A)
    w = torch.randn(24, 16)
    x = torch.randn(80, 16)
    out = plan.linear(x, w)
    assert out is not None and torch.allclose(out, F.linear(x, w), atol=1e-6)
    assert plan.linear(x[:10], w) is None  # no choice at 10 rows
    assert plan.linear(torch.randn(100, 16), w) is None  # the library cannot run that shape
    assert plan.linear(x.double(), w.double()) is None  # not the plan's dtype
    assert plan.linear(torch.randn(80, 32)[:, :16], w) is None  # rows not dense
    plan.linear(x, w)
    assert lib.built.count((80, 24, 16)) == 1  # built once per row count, then reused


def test_triton_ops_route_products_through_the_plan() -> None:
    ops = TritonOps()
    lib = FakeLibrary()
    ops.lt_plan = LtPlan(lib, torch.float32)
    ops.lt_plan.choose(32, 16, 5, A)
    x, w = torch.randn(5, 16), torch.randn(32, 16)
    assert torch.allclose(ops.linear(x, w), F.linear(x, w), atol=1e-6)
    gate, up = (x @ w.t()).chunk(2, dim=-1)
    assert torch.allclose(ops.gate_up_silu(x, w), F.silu(gate) * up, atol=1e-5)
    assert lib.built == [(5, 32, 16)]
    bias = torch.randn(32)  # products with a bias stay on F.linear
    assert torch.allclose(ops.linear(x, w, bias), F.linear(x, w, bias), atol=1e-6)
    assert lib.built == [(5, 32, 16)]


def test_tuned_row_counts_are_the_decode_buckets_within_the_budget() -> None:
    assert tuned_row_counts([1, 2, 64, 256, 64, 1024], 512) == [2, 64, 256]


def test_tuning_is_switched_off_by_the_environment(monkeypatch) -> None:
    monkeypatch.setattr(gemm_tuning.cublaslt, "available", lambda: True)
    monkeypatch.setenv("TTFT_CUBLASLT", "0")
    assert not gemm_tuning.enabled()
    monkeypatch.setenv("TTFT_CUBLASLT", "1")
    assert gemm_tuning.enabled()


@pytest.mark.gpu
def test_tuned_plan_equals_f_linear_at_timed_and_untimed_row_counts() -> None:
    from gpu_stage.loaders import load_model_source
    from gpu_stage.model.llama import LlamaForCausalLM

    source = load_model_source("dummy:tiny", seed=0)
    model = LlamaForCausalLM(source.config, "cuda", torch.bfloat16)
    model.load_weights(source.weights("cuda", torch.bfloat16))
    plan, report = gemm_tuning.tune_products(model, [2, 3, 64, 512], [2, 8])
    assert {(r["product"], r["rows"]) for r in report} >= {("gate_up_weight", 512), ("lm_head", 8)}
    layer = model.layers[0]
    for weight in (layer.qkv_weight, layer.o_weight, layer.gate_up_weight, layer.down_weight):
        for rows in (2, 3, 64, 100, 512, 777):
            x = torch.randn(rows, weight.shape[1], device="cuda", dtype=torch.bfloat16)
            ref = F.linear(x, weight)
            out = plan.linear(x, weight)
            if out is not None:
                assert (out.float() - ref.float()).abs().max().item() <= 1e-2 * ref.abs().max().item()


@pytest.mark.gpu
def test_the_real_library_runs_a_plan_choice_at_its_row_counts_only() -> None:
    from gpu_stage.tuning import cublaslt

    lt = cublaslt.Lt(torch.device("cuda", torch.cuda.current_device()))
    w = torch.randn(768, 512, device="cuda", dtype=torch.bfloat16)
    plan = LtPlan(lt, torch.bfloat16)
    for rows in (16, 256):
        plan.choose(768, 512, rows, lt.product(rows, 768, 512, torch.bfloat16).algorithms()[-1])
    for rows in (16, 17, 200, 256, 1000):
        x = torch.randn(rows, 512, device="cuda", dtype=torch.bfloat16)
        out = plan.linear(x, w)
        assert (out is None) == (rows not in (16, 256)), rows
        if out is None:
            continue
        ref = F.linear(x, w).float()
        assert (out.float() - ref).abs().max().item() <= 1e-2 * ref.abs().max().item()
