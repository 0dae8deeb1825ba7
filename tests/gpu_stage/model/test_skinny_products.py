"""--skinny-gemm: which products the skinny kernel takes through the Triton ops, the model with it on
equal to off (CPU: Triton's interpreter, a tiny random Llama), and the flag's refusals."""
from __future__ import annotations

import pytest
import torch
from tiny_hf_models import hf_model, model_config

pytest.importorskip("triton")

from gpu_stage.kernels.skinny_configs import MAX_ROWS  # noqa: E402
from gpu_stage.loaders.model_source import ModelSource  # noqa: E402
from gpu_stage.model import skinny_products  # noqa: E402
from gpu_stage.model.skinny_products import SKINNY_GEMM_MODES, SkinnyProducts, check_skinny_gemm  # noqa: E402
from gpu_stage.model.torch_ops import TorchOps  # noqa: E402
from gpu_stage.model.triton_ops import TritonOps  # noqa: E402
from gpu_stage.model_runner import ModelRunner  # noqa: E402
from stages.messages import NewRequestData, ScheduledChunk, StepBatch  # noqa: E402
from stages.sampling import SamplingParams  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class _Tokenizer:
    vocab_size = 400
    eos_token_ids = frozenset({1})


def _counting(monkeypatch) -> list[dict]:
    """Every call of the skinny kernel from the products, by its keywords."""
    from gpu_stage.kernels import skinny_gemm

    calls: list[dict] = []
    real = skinny_gemm.skinny_linear
    monkeypatch.setattr(skinny_gemm, "skinny_linear", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    return calls


def test_the_kernel_takes_2_to_512_rows_of_its_weight_dtype_with_unit_strides() -> None:
    products = SkinnyProducts()
    w = torch.randn(24, 40, device=DEVICE)
    assert products.takes(torch.randn(2, 40, device=DEVICE), w)
    assert products.takes(torch.randn(MAX_ROWS, 40, device=DEVICE), w)
    assert not products.takes(torch.randn(1, 40, device=DEVICE), w)  # the gemv's or cuBLAS's
    assert not products.takes(torch.randn(MAX_ROWS + 1, 40, device=DEVICE), w)  # cuBLAS at the ceiling
    assert not products.takes(torch.randn(3, 40, device=DEVICE, dtype=torch.float64), w)
    assert not products.takes(torch.randn(40, 3, device=DEVICE).T, w)


def test_triton_ops_ask_the_kernel_first_when_it_is_on(monkeypatch) -> None:
    calls = _counting(monkeypatch)
    ops = TritonOps()
    gen = torch.Generator().manual_seed(0)
    w, b = torch.randn(24, 40, generator=gen).to(DEVICE), torch.randn(24, generator=gen).to(DEVICE)
    x = torch.randn(3, 40, generator=gen).to(DEVICE)
    ops.linear(x, w)  # off: F.linear
    assert not calls
    skinny_products.attach_skinny_products(ops, "on")
    ops.linear(x[:1], w)  # one row: not the kernel's
    assert not calls
    out = ops.linear(x, w, b)
    assert len(calls) == 1 and torch.allclose(out, torch.nn.functional.linear(x, w, b), atol=1e-5)
    out = ops.gate_up_silu(x, w)
    assert len(calls) == 2 and calls[1]["act"] == "silu_mul"
    assert torch.allclose(out, TorchOps.gate_up_silu(x, w), atol=1e-5)


def test_the_products_look_a_shape_up_once() -> None:
    products = SkinnyProducts()
    w = torch.randn(24, 40, device=DEVICE)
    for _ in range(2):
        products.linear(torch.randn(5, 40, device=DEVICE), w)
    assert list(products._configs) == [(5, 24, 40, False)]


def test_the_mode_and_its_backend_are_checked() -> None:
    assert SKINNY_GEMM_MODES == ("off", "on")
    check_skinny_gemm("off", "torch")
    check_skinny_gemm("on", "triton")
    with pytest.raises(ValueError, match="--skinny-gemm 'fast': must be one of off, on"):
        check_skinny_gemm("fast", "triton")
    with pytest.raises(ValueError, match="needs --attention-backend triton"):
        check_skinny_gemm("on", "torch")


def _source() -> ModelSource:
    hf = hf_model("llama", num_hidden_layers=1)
    state = hf.state_dict()
    return ModelSource("tiny", model_config(hf), lambda d, dt: ((k, v.to(d, dt)) for k, v in state.items()),
                       _Tokenizer(), "t")


def _greedy(runner: ModelRunner) -> tuple[dict[str, list[int]], list[float]]:
    """Two prompts prefilled in one step (11 rows), then a decode step of both (2 rows)."""
    prompts = {"a": list(range(2, 9)), "b": list(range(40, 44))}
    tables = {"a": [1, 2, 3], "b": [6, 7]}
    new = [NewRequestData(r, p, SamplingParams(temperature=0.0, logprobs=1)) for r, p in prompts.items()]
    batch = StepBatch(0, new, [ScheduledChunk(r, p, 0, tables[r], True) for r, p in prompts.items()])
    got: dict[str, list[int]] = {r: [] for r in prompts}
    logprobs: list[float] = []
    for step in range(1, 3):
        for t in runner.execute(batch).sampled:
            got[t.request_id].append(t.token_id)
            logprobs.append(t.logprob)
        batch = StepBatch(step, [], [ScheduledChunk(r, got[r][-1:], len(p) + len(got[r]) - 1, tables[r], True)
                                     for r, p in prompts.items()])
    return got, logprobs


def test_model_with_skinny_products_on_equals_off(monkeypatch) -> None:
    """The runner built with skinny_gemm on runs every product of its steps (11 and 2 rows) in the
    kernel, and samples what it samples off, with the same log-probabilities."""
    source = _source()
    calls = _counting(monkeypatch)
    outputs = {}
    for mode in ("off", "on"):
        runner = ModelRunner.build(source, DEVICE, torch.float32, 16, 4, max_num_batched_tokens=32, max_num_seqs=4,
                                   attention_backend="triton", enforce_eager=True, skinny_gemm=mode)
        assert (runner.model.ops.skinny is not None) == (mode == "on")
        outputs[mode] = _greedy(runner)
        assert len(calls) == (0 if mode == "off" else 2 * (4 + 1))  # 2 steps x (4 products + the lm_head)
    assert outputs["on"][0] == outputs["off"][0]
    assert outputs["on"][1] == pytest.approx(outputs["off"][1], abs=1e-5)


def test_a_runner_refuses_skinny_products_without_the_triton_ops() -> None:
    with pytest.raises(ValueError, match="--skinny-gemm on runs the products in a Triton kernel"):
        ModelRunner.build(_source(), "cpu", torch.float32, 16, 4, max_num_batched_tokens=32, max_num_seqs=4,
                          attention_backend="torch", skinny_gemm="on")
