"""The repetition, frequency and presence penalties: `penalize` (the arithmetic), `apply_penalties`
(from the rows' id lists) and PenaltyCache (each penalised request's token history on the device,
kept from step to step).

The repetition penalty needs the tokens a request has seen (prompt and output), the frequency and
presence penalties how often it output each token. Rebuilt from the host's id lists every step
(`apply_penalties`), that cost ~14 ms of the launch thread per step at 64 requests of
2,048-token prompts on this project's 2-core host, a copy that waits for the device, and a history
one token short while a step is in flight (so the scheduler could not build decodes ahead for such
requests). Here a request's row is filled once, when it first samples, and each step adds its
sampled ids on the device (`advance`): a step stages one slot index per row and reads its rows back
by index, with no host list and no sync.

Pools: `seen` [slots, V] bool (prompt tokens) and `counts` [slots, V] int32 (output tokens). Slot 0
is scratch for rows without penalties (their neutral parameters leave logits as they are whatever it
holds). The GPU stage sizes them at start-up for every running request (`initial_slots`, before
the memory profile sizes the KV pool, so they are accounted for: 641 KB a slot at a 128k
vocabulary); they double when full, which only preempted requests keeping their slots can cause.
"""
from __future__ import annotations

import torch

from gpu_stage.sampling.rows import SamplingRow, SamplingTensors, device_ids

INITIAL_SLOTS = 8


class PenaltyCache:
    def __init__(self, vocab: int, device: torch.device | str, initial_slots: int = 0) -> None:
        """`initial_slots`: allocate that many now (slot 0 included); 0: at the first penalised request."""
        self.vocab = vocab
        self.device = torch.device(device)
        self.seen: torch.Tensor | None = None
        self.counts: torch.Tensor | None = None
        self._slots: dict[str, int] = {}
        self._free: list[int] = []
        if initial_slots:
            self._grow(initial_slots)

    def slot(self, request_id: str, prompt_token_ids: list[int], output_token_ids: list[int]) -> int:
        """The request's slot, filled from its ids the first time it is asked for."""
        slot = self._slots.get(request_id)
        if slot is None:
            if not self._free:
                self._grow()
            slot = self._slots[request_id] = self._free.pop()
            self._fill(slot, prompt_token_ids, output_token_ids)
        return slot

    def release(self, request_id: str) -> None:
        slot = self._slots.pop(request_id, None)
        if slot is not None:
            self._free.append(slot)

    @property
    def num_slots_in_use(self) -> int:
        return len(self._slots)

    def apply(self, logits: torch.Tensor, t: SamplingTensors) -> torch.Tensor:
        """The rows' penalties (t.penalty_slot: each row's slot, 0 for a row without) -> new logits."""
        assert self.counts is not None and self.seen is not None, "no request has a slot"
        slots = t.penalty_slot.long()
        counts = self.counts.index_select(0, slots)
        seen = self.seen.index_select(0, slots) if t.flags.need_repetition else None
        return penalize(logits, counts, seen, t.repetition, t.frequency, t.presence)

    def advance(self, slots: torch.Tensor, token_ids: torch.Tensor) -> None:
        """Count each row's sampled token (both [R], on the device) in its slot's output counts."""
        assert self.counts is not None
        ones = torch.ones(1, dtype=self.counts.dtype, device=self.device).expand(slots.shape[0])
        self.counts.index_put_((slots.long(), token_ids.long()), ones, accumulate=True)

    def _grow(self, new: int = 0) -> None:
        old = 0 if self.counts is None else self.counts.shape[0]
        new = new or max(INITIAL_SLOTS, 2 * old)
        seen = torch.zeros((new, self.vocab), dtype=torch.bool, device=self.device)
        counts = torch.zeros((new, self.vocab), dtype=torch.int32, device=self.device)
        if old:
            seen[:old] = self.seen
            counts[:old] = self.counts
        self.seen, self.counts = seen, counts
        self._free.extend(range(new - 1, max(old, 1) - 1, -1))  # slot 0 stays scratch

    def _fill(self, slot: int, prompt_token_ids: list[int], output_token_ids: list[int]) -> None:
        self.seen[slot].zero_()
        self.counts[slot].zero_()
        prompt = self._ids(prompt_token_ids)
        if prompt is not None:
            self.seen[slot].index_fill_(0, prompt, True)
        output = self._ids(output_token_ids)
        if output is not None:
            self.counts[slot].index_add_(0, output, torch.ones_like(output, dtype=torch.int32))

    def _ids(self, ids: list[int]) -> torch.Tensor | None:
        """The ids inside the vocabulary, on the device (no sync)."""
        ids = [t for t in ids if 0 <= t < self.vocab]
        return device_ids(ids, self.device) if ids else None


def apply_penalties(logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
    """The rows' penalties from their id lists (PenaltyCache keeps the same on the device)."""
    idx = [i for i, r in enumerate(rows) if r.params.needs_penalties]
    if not idx:
        return logits
    device, vocab = logits.device, logits.shape[1]
    outputs = _padded([rows[i].output_token_ids for i in idx], vocab, device)  # [R, Lo]
    counts = torch.zeros(len(idx), vocab + 1, dtype=torch.int32, device=device)  # the extra column: padding
    counts = counts.scatter_add_(1, outputs, torch.ones_like(outputs, dtype=torch.int32))[:, :vocab]
    seen = None
    if any(rows[i].params.repetition_penalty != 1.0 for i in idx):
        prompts = _padded([rows[i].prompt_token_ids for i in idx], vocab, device)  # [R, Lp]
        seen = torch.zeros(len(idx), vocab + 1, dtype=torch.bool, device=device)
        seen = seen.scatter_(1, prompts, True)[:, :vocab]

    def param(name: str) -> torch.Tensor:
        return torch.tensor([getattr(rows[i].params, name) for i in idx], dtype=torch.float32, device=device)

    logits = logits.clone()
    logits[idx] = penalize(logits[idx], counts, seen, param("repetition_penalty"), param("frequency_penalty"),
                           param("presence_penalty"))
    return logits


def penalize(logits: torch.Tensor, counts: torch.Tensor, seen: torch.Tensor | None, repetition: torch.Tensor,
             frequency: torch.Tensor, presence: torch.Tensor) -> torch.Tensor:
    """logits [R, V], output token counts [R, V], prompt tokens [R, V] bool (None: no row has a
    repetition penalty), parameters [R] -> new logits. The repetition penalty over prompt + output
    (HF: divide positive logits, multiply negative ones), then logits -= frequency * count +
    presence * (count > 0) (OpenAI). Neutral parameters (1, 0, 0) leave a row as it is."""
    counts = counts.to(logits.dtype)
    if seen is not None:
        # Floored so that a valid but tiny penalty (it rounds to 0 in fp32) cannot make logits infinite.
        rep = repetition.clamp(min=1e-30)[:, None]
        logits = torch.where(seen | (counts > 0), torch.where(logits > 0, logits / rep, logits * rep), logits)
    return logits - frequency[:, None] * counts - presence[:, None] * (counts > 0).to(logits.dtype)


def _padded(seqs: list[list[int]], vocab: int, device: torch.device) -> torch.Tensor:
    """Ragged id lists -> [R, max_len] int64 padded with `vocab`: callers scatter into one extra
    column and drop it. Ids outside [0, vocab) are routed there too."""
    width = max(1, max(len(s) for s in seqs))
    out = torch.full((len(seqs), width), vocab, dtype=torch.int64)
    for i, s in enumerate(seqs):
        if s:
            out[i, : len(s)] = torch.tensor(s, dtype=torch.int64)
    out[(out < 0) | (out > vocab)] = vocab
    return out.to(device)
