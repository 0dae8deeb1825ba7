"""HostKvPool: the host-memory tier's bytes, slots of one KV block each.

Pinned on a CUDA machine, so host <-> device copies run asynchronously at full PCIe rate. The
pool is allocated in chunks of at most 1 GiB: torch's pinned allocator rounds each allocation up
to a power of two, so one 40 GiB tensor would pin 64 GiB; chunks keep the waste under a block.
"""
from __future__ import annotations

import torch

CHUNK_BYTES = 1 << 30


class HostKvPool:
    def __init__(self, num_slots: int, block_numel: int, dtype: torch.dtype, pin: bool) -> None:
        assert num_slots > 0 and block_numel > 0
        self.num_slots = num_slots
        self.block_numel = block_numel
        self.dtype = dtype
        element_size = torch.empty((), dtype=dtype).element_size()
        self.block_nbytes = block_numel * element_size
        self.slots_per_chunk = max(1, min(num_slots, CHUNK_BYTES // self.block_nbytes))
        self.chunks: list[torch.Tensor] = []
        left = num_slots
        while left > 0:
            rows = min(left, self.slots_per_chunk)
            self.chunks.append(torch.empty((rows, block_numel), dtype=dtype, pin_memory=pin))
            left -= rows
        self.pinned = pin

    def slot(self, slot: int) -> torch.Tensor:
        """[block_numel] view of one slot."""
        return self.chunks[slot // self.slots_per_chunk][slot % self.slots_per_chunk]

    def slot_bytes(self, slot: int) -> torch.Tensor:
        """The same slot as a uint8 tensor (what the disk tier reads and writes)."""
        return self.slot(slot).view(torch.uint8)

    def run(self, first_slot: int, num: int) -> torch.Tensor | None:
        """[num, block_numel] view of consecutive slots in one chunk, or None across chunks."""
        chunk, row = divmod(first_slot, self.slots_per_chunk)
        if row + num > self.chunks[chunk].shape[0]:
            return None
        return self.chunks[chunk][row:row + num]

    @property
    def num_bytes(self) -> int:
        return self.num_slots * self.block_nbytes
