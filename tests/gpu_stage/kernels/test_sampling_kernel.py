"""The sampling kernels (gpu_stage/kernels/sampling.py): greedy rows against torch.argmax and
isfinite(max) (the same token for every row whose maximum is finite, the same ok flag for every
row); sampling rows against the inverse CDF of softmax(logits / temperature) computed in float64
(the same token unless the target lies within float rounding of a boundary).

Without CUDA they run under Triton's interpreter on CPU (tests/gpu_stage/conftest.py), at small
vocabularies split into many slices; the `gpu` cases run Llama-3's vocabulary at 1-64 rows."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from gpu_stage.kernels.sampling import MAX_SPLITS, choose_num_splits, sample_rows  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# inf - inf in the kernels' masked lanes (rows with infinities) and a logit / temperature that
# overflows: numpy warns under the interpreter.
pytestmark = [pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")]


def _reference(logits: torch.Tensor) -> tuple[list[int], list[int]]:
    logits = logits.float().cpu()
    return logits.argmax(-1).tolist(), torch.isfinite(logits.max(-1).values).int().tolist()


def _check(logits: torch.Tensor, num_sms: int = 4) -> list[int]:
    num_rows, vocab = logits.shape
    out = sample_rows(logits.to(DEVICE), num_sms=num_sms).cpu().tolist()
    ids, ok = _reference(logits)
    assert out[num_rows:] == ok
    for row in range(num_rows):
        assert 0 <= out[row] < vocab  # a valid embedding index even for a row that is not ok
        if ok[row]:
            assert out[row] == ids[row], row
    return out


@pytest.mark.parametrize("num_rows,vocab", [(1, 7), (1, 1000), (3, 300), (5, 129), (9, 640)])
def test_random_rows_match_argmax(num_rows: int, vocab: int) -> None:
    gen = torch.Generator().manual_seed(num_rows * 1000 + vocab)
    _check(torch.randn(num_rows, vocab, generator=gen))


def test_ties_take_the_first_index_within_and_across_slices() -> None:
    logits = torch.zeros(4, 500)
    logits[0, 10] = logits[0, 400] = 5.0  # the same maximum in two slices
    logits[1, 300] = logits[1, 301] = 2.0  # twice in one tile
    logits[3, 499] = 1.0  # the last column
    out = _check(logits, num_sms=16)  # 4 rows x 8 slices
    assert out[:4] == [10, 300, 0, 499]  # row 2 is all zeros: its first index


def test_rows_that_cannot_be_sampled_are_flagged() -> None:
    gen = torch.Generator().manual_seed(7)
    logits = torch.randn(5, 300, generator=gen)
    logits[0, 5] = float("nan")  # one NaN anywhere: not ok (torch's max propagates it)
    logits[1, :] = float("-inf")  # everything banned
    logits[2, 17] = float("inf")
    logits[3, 299] = float("nan")  # in the last slice's last tile
    out = _check(logits, num_sms=8)
    assert out[5:] == [0, 0, 0, 0, 1]
    assert out[1] == 0  # an all -inf row gets its first index, as torch.argmax gives


def test_bfloat16_logits_and_a_given_output_buffer() -> None:
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 256, generator=gen).to(torch.bfloat16)
    buf = torch.full((10,), -5, dtype=torch.int32, device=DEVICE)
    sample_rows(logits.to(DEVICE), out=buf, num_sms=4)
    ids, ok = _reference(logits)
    assert buf[:6].cpu().tolist() == ids + ok
    assert buf[6:].cpu().tolist() == [-5] * 4  # nothing written past 2R


def test_rows_are_strided_views() -> None:
    gen = torch.Generator().manual_seed(4)
    wide = torch.randn(4, 200, generator=gen)
    _check(wide[:, :150])  # row stride 200, vocab 150


def test_split_count() -> None:
    assert choose_num_splits(1, 1 << 20, 132, 2048) == MAX_SPLITS
    assert choose_num_splits(1, 128256, 132, 2048) == 63  # a block each
    assert choose_num_splits(64, 128256, 132, 2048) == 5  # ceil(264 / 64)
    assert choose_num_splits(512, 128256, 132, 2048) == 1
    assert choose_num_splits(1, 100, 132, 64) == 2  # never a slice shorter than a block


@pytest.mark.gpu
@pytest.mark.parametrize("num_rows", [1, 8, 64])
def test_llama3_vocabulary_gpu(num_rows: int) -> None:
    gen = torch.Generator().manual_seed(num_rows)
    logits = torch.randn(num_rows, 128256, generator=gen) * 4
    _check(logits, num_sms=torch.cuda.get_device_properties(0).multi_processor_count)


def _inverse_cdf(logits: torch.Tensor, temperature: torch.Tensor, uniform: torch.Tensor,
                 ) -> tuple[list[int], list[float]]:
    """The torch path's draw in float64 (softmax, cumsum, searchsorted right), and each row's
    distance from its target to the nearest boundary of the cumulative sum, relative to the total."""
    x = logits.double().cpu() / temperature.double().cpu()[:, None]
    cdf = torch.softmax(x, -1).cumsum(-1)
    target = uniform.double().cpu()[:, None] * cdf[:, -1:]
    picked = torch.searchsorted(cdf, target, right=True).clamp(max=logits.shape[1] - 1)[:, 0]
    margin = (cdf - target).abs().min(-1).values / cdf[:, -1]
    return picked.tolist(), margin.tolist()


def _check_sampled(logits: torch.Tensor, greedy: list[bool], temperature: list[float], uniform: list[float],
                   num_sms: int = 8) -> list[int]:
    num_rows = logits.shape[0]
    g, t, u = (torch.tensor(greedy), torch.tensor(temperature), torch.tensor(uniform))
    out = sample_rows(logits.to(DEVICE), g.to(DEVICE), t.to(DEVICE), u.to(DEVICE), num_sms=num_sms).cpu().tolist()
    ids, ok = _reference(logits)
    # The torch path's flag for a sampling row also needs its float32 softmax total finite and > 0.
    total = torch.softmax(logits.float() / t[:, None], -1).sum(-1)
    ok = [int(o and (gr or bool(torch.isfinite(z) and z > 0))) for o, gr, z in zip(ok, greedy, total)]
    drawn, margin = _inverse_cdf(logits, t, u)
    assert out[num_rows:] == ok
    for row in range(num_rows):
        assert 0 <= out[row] < logits.shape[1]
        want = ids[row] if greedy[row] else drawn[row]
        if ok[row]:
            assert out[row] == want or margin[row] < 1e-5, (row, out[row], want, margin[row])
    return out


@pytest.mark.parametrize("seed", range(6))
def test_sampling_rows_draw_the_inverse_cdf_of_their_uniform(seed: int) -> None:
    gen = torch.Generator().manual_seed(100 + seed)
    num_rows, vocab = 6, 700
    logits = torch.randn(num_rows, vocab, generator=gen) * 3
    greedy = [seed % 2 == 0, False, True, False, False, False]
    temperature = [1.0, 0.7, 1.0, 1.5, 0.2, 3.0]
    uniform = torch.rand(num_rows, generator=gen).tolist()
    _check_sampled(logits, greedy, temperature, uniform)


def test_uniforms_at_the_ends_and_masses_in_one_token() -> None:
    logits = torch.zeros(4, 300)
    logits[2, :] = float("-inf")
    logits[2, 123] = 0.0  # banned but one: every draw is that token
    logits[3, :150] = float("-inf")  # the first slices hold no mass
    out = _check_sampled(logits, [False] * 4, [1.0] * 4, [0.0, 0.9999999, 0.5, 0.0])
    assert out[:4] == [0, 299, 123, 150]


def test_sampling_rows_that_cannot_be_drawn_are_flagged() -> None:
    gen = torch.Generator().manual_seed(9)
    logits = torch.randn(4, 300, generator=gen)
    logits[0, :] = float("-inf")
    logits[1, 40] = float("nan")
    logits[2, 41] = float("inf")
    out = _check_sampled(logits, [False] * 4, [1.0, 1.0, 1.0, 1e-30], [0.5] * 4)
    assert out[4:] == [0, 0, 0, 1]
    # A temperature so small that a finite logit / temperature overflows: not ok, as in torch.
    assert _check_sampled(torch.tensor([[3.0, 1.0]]), [False], [1e-39], [0.5])[1] == 0


@pytest.mark.gpu
@pytest.mark.parametrize("num_rows", [1, 8, 64])
def test_llama3_vocabulary_sampling_gpu(num_rows: int) -> None:
    gen = torch.Generator().manual_seed(50 + num_rows)
    logits = torch.randn(num_rows, 128256, generator=gen) * 4
    greedy = [i % 4 == 0 for i in range(num_rows)]
    uniform = torch.rand(num_rows, generator=gen).tolist()
    _check_sampled(logits, greedy, [0.8] * num_rows, uniform,
                   num_sms=torch.cuda.get_device_properties(0).multi_processor_count)


def test_one_compiled_variant_serves_every_row_count() -> None:
    """Triton specialises pointer arguments on 16-byte alignment: the slices' partial results
    must stay aligned whatever the row and split counts, or a new row count compiles while
    serving (the warm-up compiles with two rows)."""
    import gpu_stage.kernels.sampling as sampling

    seen = []
    real_empty = torch.empty

    def spy(*shape, **kw):
        t = real_empty(*shape, **kw)
        seen.append(t)
        return t

    sampling.torch.empty, saved = spy, sampling.torch.empty
    try:
        for num_rows in (1, 2, 3, 5, 7):
            sample_rows(torch.zeros(num_rows, 130, device=DEVICE), num_sms=3)
    finally:
        sampling.torch.empty = saved
    parts = [t for t in seen if t.dim() == 2 and t.shape[0] == 5]
    assert len(parts) == 5
    for t in parts:
        assert all(t[i].data_ptr() % 16 == 0 for i in range(5)), t.shape
