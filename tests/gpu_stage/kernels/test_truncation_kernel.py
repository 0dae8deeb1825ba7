"""Top-k / top-p thresholds without a sort (gpu_stage/kernels/truncation.py) against the sampler's
torch rule (gpu_stage/sampling/torch_draw.py truncation_mask, which sorts), and the fused draw over what they
keep against the torch path's draw.

Without CUDA the kernels run under Triton's interpreter (tests/gpu_stage/conftest.py) at small
vocabularies split into several slices; the `gpu` case runs Llama-3's vocabulary."""
from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("triton")

from gpu_stage.kernels.sampling import MAX_SPLITS, choose_num_splits, sample_rows  # noqa: E402
from gpu_stage.kernels.truncation import thresholds  # noqa: E402
from gpu_stage.sampling.rows import SamplingRow, SamplingTensors  # noqa: E402
from gpu_stage.sampling.sampler import Sampler  # noqa: E402
from gpu_stage.sampling.torch_draw import truncation_mask  # noqa: E402
from stages.sampling import SamplingParams  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = [pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")]


def _keys(x: torch.Tensor) -> torch.Tensor:
    """The kernels' order key, in torch: float32 -> int32 in the same order, -0 as +0."""
    bits = torch.where(x == 0, torch.zeros_like(x), x).view(torch.int32)
    return torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


def _tensors(params: list[dict], vocab: int) -> SamplingTensors:
    rows = [SamplingRow(SamplingParams(**p), [], [], torch.Generator().manual_seed(i)) for i, p in enumerate(params)]
    return SamplingTensors.build(rows, torch.device(DEVICE), vocab)


def _kernel_mask(logits: torch.Tensor, t: SamplingTensors, num_sms: int) -> torch.Tensor:
    """The kernels' kept set (top_k and top_p): order_key(logits / T) >= the row's threshold."""
    num_rows, vocab = logits.shape
    logits = logits.to(DEVICE)
    scaled = logits / t.temperature[:, None]
    num_splits = choose_num_splits(num_rows, vocab, num_sms, 64)
    part_smax = scaled.max(-1).values.repeat_interleave(num_splits)  # only the row's max is read
    thr = thresholds(logits, t.temperature, part_smax, num_splits, MAX_SPLITS, num_sms,
                     t.top_k if t.flags.need_top_k else None, t.top_p if t.flags.need_top_p else None)
    return (_keys(scaled) >= thr[:, None]).cpu()


def _torch_mask(logits: torch.Tensor, t: SamplingTensors) -> torch.Tensor:
    no_min_p = dataclasses.replace(t, flags=t.flags._replace(need_min_p=False))
    keep = truncation_mask(logits.to(DEVICE) / t.temperature[:, None], no_min_p)
    return torch.ones(logits.shape, dtype=torch.bool) if keep is None else keep.cpu()


ROWS = [  # one batch: rows with each limit, both, neither, and greedy
    {"temperature": 0.7, "top_p": 0.9},
    {"temperature": 1.0, "top_k": 5},
    {"temperature": 1.3, "top_k": 40, "top_p": 0.5},
    {"temperature": 0.0},
    {"temperature": 1.0},
    {"temperature": 0.5, "top_k": 1},
    {"temperature": 2.0, "top_p": 1e-6},
    {"temperature": 1.0, "top_k": 299, "top_p": 0.999},
]


@pytest.mark.parametrize("num_sms", [1, 5])
def test_thresholds_keep_what_the_sorting_rule_keeps(num_sms: int) -> None:
    gen = torch.Generator().manual_seed(num_sms)
    logits = torch.randn(len(ROWS), 300, generator=gen) * 3
    t = _tensors(ROWS, 300)
    kernel, reference = _kernel_mask(logits, t, num_sms), _torch_mask(logits, t)
    assert torch.equal(kernel, reference)
    counts = kernel.sum(-1).tolist()
    assert counts[1] == 5 and counts[5] == 1 and counts[6] == 1
    assert counts[3] == counts[4] == 300  # greedy and untruncated rows keep everything


def test_ties_at_a_cut_off_are_all_kept() -> None:
    logits = torch.zeros(3, 200)
    logits[0, [3, 50, 120, 199]] = 2.0  # top_k 2 falls inside a tie of four: all four stay
    logits[1, :] = torch.arange(200.0).remainder(7)  # many ties; top_p crosses inside the 6s
    logits[2, :] = -0.0  # -0 and +0 are one value
    logits[2, ::2] = 0.0
    t = _tensors([{"top_k": 2}, {"top_p": 0.3}, {"top_k": 3}], 200)
    kernel = _kernel_mask(logits, t, num_sms=4)
    assert torch.equal(kernel, _torch_mask(logits, t))
    assert kernel[0].nonzero().flatten().tolist() == [3, 50, 120, 199]
    assert torch.equal(kernel[1], logits[1] == 6.0)
    assert bool(kernel[2].all())


def test_banned_tokens_and_a_top_k_past_the_finite_ones() -> None:
    logits = torch.randn(2, 150, generator=torch.Generator().manual_seed(3))
    logits[:, 10:] = float("-inf")  # ten tokens left
    t = _tensors([{"top_k": 20}, {"top_k": 4, "top_p": 0.95}], 150)
    kernel = _kernel_mask(logits, t, num_sms=4)
    assert torch.equal(kernel, _torch_mask(logits, t))
    assert int(kernel[1].sum()) <= 4


def _draw(logits: torch.Tensor, params: list[dict], fused: bool) -> list[int]:
    rows = [SamplingRow(SamplingParams(**p), [], [], torch.Generator().manual_seed(i)) for i, p in enumerate(params)]
    out = Sampler(fused=fused)(logits.to(DEVICE), rows)
    assert not out.errors
    return out.token_ids


@pytest.mark.parametrize("seed", [0])
def test_fused_draws_equal_the_torch_path(seed: int) -> None:
    """The same uniforms give the same tokens: both draw the inverse CDF in vocabulary order over
    the same kept set (min_p included)."""
    gen = torch.Generator().manual_seed(20 + seed)
    logits = torch.randn(len(ROWS), 300, generator=gen) * 2
    params = [dict(p, min_p=0.05 * (i % 3)) if p.get("temperature", 1.0) else p for i, p in enumerate(ROWS)]
    fused, plain = _draw(logits, params, True), _draw(logits, params, False)
    assert fused == plain
    assert fused[3] == int(logits[3].argmax())  # the greedy row


def test_one_row_truncated_and_a_row_count_not_a_multiple_of_four() -> None:
    logits = torch.randn(3, 130, generator=torch.Generator().manual_seed(5)) * 4
    g = torch.tensor([False, False, True], device=DEVICE)
    temperature = torch.tensor([0.8, 1.0, 1.0], device=DEVICE)
    uniform = torch.tensor([0.3, 0.99, 0.5], device=DEVICE)
    min_p = torch.tensor([0.0, 0.5, 0.0], device=DEVICE)
    out = sample_rows(logits.to(DEVICE), g, temperature, uniform, num_sms=3, min_p=min_p).cpu().tolist()
    assert out[3:] == [1, 1, 1]
    kept = torch.exp(logits[1] - logits[1].max()) >= 0.5
    assert kept[out[1]]
    assert out[2] == int(logits[2].argmax())


@pytest.mark.gpu
@pytest.mark.parametrize("num_rows", [1, 8, 64])
def test_llama3_vocabulary_gpu(num_rows: int) -> None:
    gen = torch.Generator().manual_seed(70 + num_rows)
    logits = torch.randn(num_rows, 128256, generator=gen) * 4
    params = [ROWS[i % len(ROWS)] for i in range(num_rows)]
    t = _tensors(params, 128256)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert torch.equal(_kernel_mask(logits, t, sms), _torch_mask(logits, t))
    assert _draw(logits, params, True) == _draw(logits, params, False)
