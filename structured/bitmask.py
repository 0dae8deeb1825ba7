"""GrammarBitmask: the persistent buffers a step's grammar masks travel through, and the masking.

The host fills rows of a pinned int32 [max_rows, words] buffer (two, alternating, so that a step's
fill never overwrites the one whose copy the device may still be reading); one non-blocking copy
puts them in a device buffer of the same shape, allocated once, and `apply` sets the logits of
disallowed ids to -inf on the device, with no host sync. On CPU the same code runs on host tensors.

The masking reads the words as bytes (little-endian, as on every host and GPU ttft runs on: bit k
of byte b is id 8b + k) and tests each against the 8 bit values in uint8: its only [rows, vocab]
intermediate is the banned-id mask of one byte per id, where unpacking int32 words by 32 shifts
made two int32 ones (8 bytes per id each). When every row is masked, in order (a batch whose
requests are all constrained), the masked copy is made at once, without a gather and a scatter.
"""
from __future__ import annotations

import torch

from structured.backend import bitmask_words


class GrammarBitmask:
    NUM_HOST_BUFFERS = 2

    def __init__(self, max_rows: int, vocab_size: int, device: torch.device) -> None:
        self.vocab_size = vocab_size
        self.words = bitmask_words(vocab_size)
        self.device = device
        cuda = device.type == "cuda"
        self._host = [torch.empty((max_rows, self.words), dtype=torch.int32, pin_memory=cuda)
                      for _ in range(self.NUM_HOST_BUFFERS if cuda else 1)]
        self._device = torch.empty((max_rows, self.words), dtype=torch.int32, device=device) if cuda else None
        self._turn = 0
        self._bit_values = bit_values(device)

    @property
    def max_rows(self) -> int:
        return self._host[0].shape[0]

    def host_rows(self, num_rows: int) -> torch.Tensor:
        """The next host buffer's first rows, for the matchers to fill."""
        self._turn = (self._turn + 1) % len(self._host)
        return self._host[self._turn][:num_rows]

    def to_device(self, host: torch.Tensor) -> torch.Tensor:
        if self._device is None:
            return host
        out = self._device[: host.shape[0]]
        out.copy_(host, non_blocking=True)
        return out

    def apply(self, logits: torch.Tensor, rows: torch.Tensor | None, bits: torch.Tensor) -> torch.Tensor:
        """logits [R, V] with the rows `rows` (int64 [n], on the device; None: every row, in order)
        masked by `bits` [n, words]; a new tensor (the input is left as it is)."""
        return apply_bitmask(logits, rows, bits, self._bit_values)


def bit_values(device: torch.device) -> torch.Tensor:
    """uint8 [8]: 1, 2, 4, ..., 128."""
    return torch.tensor([1 << k for k in range(8)], dtype=torch.uint8).to(device)


def apply_bitmask(logits: torch.Tensor, rows: torch.Tensor | None, bits: torch.Tensor,
                  values: torch.Tensor | None = None) -> torch.Tensor:
    n, vocab = bits.shape[0], logits.shape[1]
    if values is None:
        values = bit_values(bits.device)
    as_bytes = bits.contiguous().view(torch.uint8)  # [n, 4 * words]
    banned = ((as_bytes.unsqueeze(-1) & values) == 0).reshape(n, -1)[:, :vocab]  # [n, V] bool
    if rows is None:
        return logits.masked_fill(banned, float("-inf"))
    masked = logits.index_select(0, rows).masked_fill(banned, float("-inf"))
    return logits.index_copy(0, rows, masked)
