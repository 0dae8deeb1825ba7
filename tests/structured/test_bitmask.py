"""The masking: bit j of word w allows id 32w + j; disallowed logits become -inf, other rows and the
input are left as they are; the persistent buffers hand out host rows and give the device view."""
from __future__ import annotations

import torch

from structured.bitmask import GrammarBitmask, apply_bitmask


def reference(logits: torch.Tensor, rows: list[int], bits: torch.Tensor) -> torch.Tensor:
    out = logits.clone()
    for k, r in enumerate(rows):
        for i in range(logits.shape[1]):
            if not (int(bits[k, i // 32]) >> (i % 32)) & 1:
                out[r, i] = float("-inf")
    return out


def test_apply_matches_a_bit_by_bit_reference():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 70, generator=gen)  # 70 ids: the last word half used
    bits = torch.randint(-2**31, 2**31 - 1, (2, 3), dtype=torch.int32, generator=gen)
    before = logits.clone()
    out = apply_bitmask(logits, torch.tensor([3, 1]), bits)
    assert torch.equal(out, reference(logits, [3, 1], bits))
    assert torch.equal(logits, before)  # (a failed batch is sampled again from the input)
    assert torch.equal(out[[0, 2]], logits[[0, 2]])


def test_every_row_in_order_is_masked_without_a_row_index():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 100, generator=gen)
    bits = torch.randint(-2**31, 2**31 - 1, (3, 4), dtype=torch.int32, generator=gen)
    before = logits.clone()
    out = apply_bitmask(logits, None, bits)
    assert torch.equal(out, reference(logits, [0, 1, 2], bits))
    assert torch.equal(out, apply_bitmask(logits, torch.tensor([0, 1, 2]), bits))
    assert torch.equal(logits, before)


def test_the_sign_bit_is_id_31_of_its_word():
    bits = torch.tensor([[-2**31, 1]], dtype=torch.int32)  # ids 31 and 32 allowed
    out = apply_bitmask(torch.zeros(1, 64), torch.tensor([0]), bits)
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == [31, 32]


def test_buffers_are_allocated_once_and_sized_by_the_vocabulary():
    bitmask = GrammarBitmask(max_rows=8, vocab_size=100, device=torch.device("cpu"))
    assert bitmask.words == 4 and bitmask.max_rows == 8
    rows = bitmask.host_rows(3)
    assert rows.shape == (3, 4)
    rows.fill_(-1)  # every id allowed
    dev = bitmask.to_device(rows)
    logits = torch.randn(5, 100)
    assert torch.equal(bitmask.apply(logits, torch.tensor([0, 2, 4]), dev), logits)
    assert bitmask.host_rows(8).data_ptr() == rows.data_ptr()  # the same storage, reused
