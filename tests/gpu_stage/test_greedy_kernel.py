"""The greedy-sampling kernels (gpu_stage/kernels/greedy.py) against torch.argmax and
isfinite(max): the same token for every row whose maximum is finite, the same ok flag for every row.

Without CUDA they run under Triton's interpreter on CPU (tests/gpu_stage/conftest.py), at small
vocabularies split into many slices; the `gpu` case runs Llama-3's vocabulary at 1-64 rows."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from gpu_stage.kernels.greedy import MAX_SPLITS, choose_num_splits, greedy_sample  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _reference(logits: torch.Tensor) -> tuple[list[int], list[int]]:
    logits = logits.float().cpu()
    return logits.argmax(-1).tolist(), torch.isfinite(logits.max(-1).values).int().tolist()


def _check(logits: torch.Tensor, num_sms: int = 4) -> list[int]:
    num_rows, vocab = logits.shape
    out = greedy_sample(logits.to(DEVICE), num_sms=num_sms).cpu().tolist()
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
    greedy_sample(logits.to(DEVICE), out=buf, num_sms=4)
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
