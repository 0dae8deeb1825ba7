"""Sampler: logits of the sampled rows of a step -> one token per row, vectorised over the batch.

Order of processing (as vLLM): logprobs are taken from the raw model log-softmax; then min_tokens
bans the stop ids, the repetition penalty (HF semantics, over prompt + output) and the frequency /
presence penalties (over output) edit the logits; temperature 0 takes the argmax; otherwise
temperature, top_k, top_p and min_p shape the distribution (`truncation_mask`) and the token is
drawn by inverse CDF, in vocabulary order, with ONE uniform from the request's own generator. Each
request's randomness is therefore its own: a seeded request gives the same tokens whatever else
shares its batch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, NamedTuple

import numpy as np
import torch

from stages.sampling import SamplingParams

if TYPE_CHECKING:
    from gpu_stage.sampling.penalties import PenaltyCache


@dataclass
class SamplingRow:
    """One sequence to sample: its parameters, history (for penalties) and random generator."""

    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    generator: torch.Generator | None = None  # CPU generator; None: torch's global one
    penalty_slot: int = 0  # its PenaltyCache slot (0: none; the penalties come from the id lists)
    # Tokens sampled for it before this one, those of steps still in flight included (a decode
    # launched ahead of the previous step's result); None: len(output_token_ids). min_tokens reads it.
    num_output: int | None = None


@dataclass
class SamplerOutput:
    token_ids: list[int]
    logprobs: list[float | None]
    top_logprobs: list[list[tuple[int, float]] | None]
    errors: dict[int, str] = field(default_factory=dict)  # row -> why it could not be sampled


def draw_uniforms(rows: list[SamplingRow]) -> list[float]:
    """One uniform per non-greedy row from the row's own generator (0.0 for greedy rows). The runner
    draws them while it stages the step, before the forward, so no host value is needed after it."""
    return [0.0 if r.params.greedy else float(torch.rand((), generator=r.generator)) for r in rows]


def row_parameters(rows: list[SamplingRow]) -> tuple[list[float], list[int], list[float], list[float]]:
    """(temperature, top_k, top_p, min_p) per row; greedy rows get neutral values (temperature 1,
    no truncation) so that a batched random draw over every row is finite; their draw is dropped."""
    temperature = [1.0 if r.params.greedy else r.params.temperature for r in rows]
    top_k = [0 if r.params.greedy else (r.params.top_k or 0) for r in rows]  # 0: no limit
    top_p = [1.0 if r.params.greedy else r.params.top_p for r in rows]
    min_p = [0.0 if r.params.greedy else r.params.min_p for r in rows]
    return temperature, top_k, top_p, min_p


def penalty_parameters(rows: list[SamplingRow]) -> tuple[list[int], list[float], list[float], list[float]]:
    """(PenaltyCache slot, repetition, frequency, presence) per row; neutral for rows without
    penalties (a greedy row may have them: they apply before the argmax)."""
    slot = [r.penalty_slot for r in rows]
    repetition = [r.params.repetition_penalty for r in rows]
    frequency = [r.params.frequency_penalty for r in rows]
    presence = [r.params.presence_penalty for r in rows]
    return slot, repetition, frequency, presence


class SamplingFlags(NamedTuple):
    """Which of the sampler's steps a batch needs, from its rows' parameters (host values)."""

    any_random: bool
    need_top_k: bool
    need_top_p: bool
    need_min_p: bool
    need_penalties: bool
    need_repetition: bool
    max_top_k: int  # the largest top_k that limits a row (0: none)

    @staticmethod
    def of(rows: list[SamplingRow], vocab: int) -> SamplingFlags:
        random_rows = [r.params for r in rows if not r.params.greedy]
        top_ks = [p.top_k for p in random_rows if p.top_k is not None and 0 < p.top_k < vocab]
        return SamplingFlags(
            bool(random_rows),
            bool(top_ks),
            any(p.top_p < 1.0 for p in random_rows),
            any(p.min_p > 0.0 for p in random_rows),
            any(r.params.needs_penalties for r in rows),
            any(r.params.repetition_penalty != 1.0 for r in rows),
            max(top_ks, default=0),
        )


@dataclass
class SamplingTensors:
    """The rows' sampling parameters as [R] tensors on the logits' device, plus host-side flags
    (from the parameters, never from device values) that decide which steps run."""

    greedy: torch.Tensor  # bool
    temperature: torch.Tensor  # float32
    top_k: torch.Tensor  # int32, 0 = no limit
    top_p: torch.Tensor  # float32
    min_p: torch.Tensor  # float32
    uniform: torch.Tensor  # float32
    penalty_slot: torch.Tensor  # int32: the row's PenaltyCache slot (0: none)
    repetition: torch.Tensor  # float32 (1: none)
    frequency: torch.Tensor  # float32 (0: none)
    presence: torch.Tensor  # float32 (0: none)
    flags: SamplingFlags

    @classmethod
    def build(cls, rows: list[SamplingRow], device: torch.device, vocab: int,
              uniforms: list[float] | None = None) -> SamplingTensors:
        """From lists (the CPU path and tests; the runner stages these in its pinned buffer)."""
        uniforms = draw_uniforms(rows) if uniforms is None else uniforms
        temperature, top_k, top_p, min_p = row_parameters(rows)
        slot, repetition, frequency, presence = penalty_parameters(rows)

        def t(values: list, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype).to(device)

        return cls(
            t([r.params.greedy for r in rows], torch.bool), t(temperature, torch.float32),
            t(top_k, torch.int32), t(top_p, torch.float32), t(min_p, torch.float32),
            t(uniforms, torch.float32), t(slot, torch.int32), t(repetition, torch.float32),
            t(frequency, torch.float32), t(presence, torch.float32), SamplingFlags.of(rows, vocab),
        )

    def select(self, i: int) -> SamplingTensors:
        """Row i alone (the runner's retry of a failed batch, one row at a time)."""
        def one(x: torch.Tensor) -> torch.Tensor:
            return x[i : i + 1]

        return SamplingTensors(one(self.greedy), one(self.temperature), one(self.top_k), one(self.top_p),
                               one(self.min_p), one(self.uniform), one(self.penalty_slot),
                               one(self.repetition), one(self.frequency), one(self.presence), self.flags)


@dataclass
class PendingSample:
    """A sampled batch whose results are still on their way to the host: `token_ids` stays on the
    device (the next step may read its inputs from it), `packed` lands in a pinned buffer when
    `event` has passed (None: on the host already)."""

    token_ids: torch.Tensor  # [R] int32, on the logits' device
    packed: torch.Tensor  # int32: ids [R] | ok [R] | chosen logprob bits [R] | top ids [R*k] | top bits [R*k]
    event: object | None
    num_rows: int
    logprob_ks: list[int | None]  # per row: None (no logprobs) or how many alternatives
    max_k: int


class Sampler:
    # Landing buffers for the device-to-host copies: one per step that may be in flight, so the
    # copy of step N+1 never overwrites results of step N the host has not read yet.
    NUM_HOST_BUFFERS = 2

    def __init__(self, eos_token_ids: Iterable[int] = (), fused: bool = False,
                 penalties: PenaltyCache | None = None) -> None:
        """`fused`: tokens are drawn by the Triton kernels of kernels/sampling.py (truncation by
        kernels/truncation.py, without a sort): 2 launches instead of 7-15, or ~12-22 instead of a
        sort of every row (the runner turns it on on CUDA); logprobs stay torch's.
        `penalties`: a PenaltyCache holding the rows' histories (rows with a slot read them there;
        without one, from their id lists)."""
        self.penalties = penalties
        self.eos_token_ids = tuple(sorted(set(eos_token_ids)))
        self._row_kernel = None
        if fused:
            from gpu_stage.kernels.sampling import sample_rows

            self._row_kernel = sample_rows
        self._host: list[torch.Tensor | None] = [None] * self.NUM_HOST_BUFFERS  # pinned (CUDA)
        self._turn = 0

    def warm_up(self, vocab: int, device: torch.device) -> None:
        """Compile the fused kernels' variants (all greedy; some rows sampling; some truncating)
        before serving: a compile on a request's path costs about a second."""
        if self._row_kernel is None:
            return
        logits = torch.zeros((2, vocab), dtype=torch.float32, device=device)
        self._row_kernel(logits)
        draw = (torch.tensor([True, False], device=device), torch.ones(2, device=device),
                torch.full((2,), 0.5, device=device))
        self._row_kernel(logits, *draw)
        self._row_kernel(logits, *draw, top_k=torch.full((2,), 2, dtype=torch.int32, device=device),
                         top_p=torch.full((2,), 0.5, device=device), min_p=torch.full((2,), 0.1, device=device))

    def __call__(self, logits: torch.Tensor, rows: list[SamplingRow],
                 tensors: SamplingTensors | None = None) -> SamplerOutput:
        """logits [B, vocab] (any float dtype) -> one token per row, waiting for the result."""
        return self.finish(self.start(logits, rows, tensors))

    def start(self, logits: torch.Tensor, rows: list[SamplingRow],
              tensors: SamplingTensors | None = None) -> PendingSample:
        """Queue the sampling of one token per row and the single device-to-host copy of the packed
        results (ids, ok flags and, when asked, logprobs); no host sync. `tensors`: the rows'
        staged parameters (drawn and built here when None)."""
        assert logits.shape[0] == len(rows)
        if tensors is None:
            tensors = SamplingTensors.build(rows, logits.device, logits.shape[1])
        logits = logits.to(torch.float32)  # [B, V]
        ks = [r.params.logprobs for r in rows]
        raw_logprobs = torch.log_softmax(logits, dim=-1) if any(k is not None for k in ks) else None
        logits = self._ban_stop_ids(logits, rows)
        if tensors.flags.need_penalties:
            if self.penalties is not None and all(r.penalty_slot for r in rows if r.params.needs_penalties):
                logits = self.penalties.apply(logits, tensors)
            else:
                logits = apply_penalties(logits, rows)
        num_rows = len(rows)
        ids_ok = self._ids_and_ok(logits, tensors)  # int32 [2R]: ids | ok flags
        token_ids = ids_ok[:num_rows]
        parts = [ids_ok]
        max_k = 0
        if raw_logprobs is not None:  # of the drawn token, from the raw model distribution
            max_k = max(k or 0 for k in ks)
            parts.append(raw_logprobs.gather(1, token_ids[:, None].long())[:, 0].view(torch.int32))  # float bits
            if max_k:
                top_v, top_i = raw_logprobs.topk(max_k, dim=-1)  # [B, k]
                parts += [top_i.to(torch.int32).reshape(-1), top_v.reshape(-1).view(torch.int32)]
        packed, event = self._copy_to_host(parts[0] if len(parts) == 1 else torch.cat(parts))
        return PendingSample(token_ids, packed, event, num_rows, ks, max_k)

    def _ids_and_ok(self, logits: torch.Tensor, t: SamplingTensors) -> torch.Tensor:
        """The drawn ids, then each row's ok flag (int32 [2R]): the Triton kernels, or torch."""
        if self._row_kernel is not None:
            if not t.flags.any_random:
                return self._row_kernel(logits)
            return self._row_kernel(logits, t.greedy, t.temperature, t.uniform,
                                    top_k=t.top_k if t.flags.need_top_k else None,
                                    top_p=t.top_p if t.flags.need_top_p else None,
                                    min_p=t.min_p if t.flags.need_min_p else None)
        tokens = torch.argmax(logits, dim=-1)  # [B]
        # [B]: a row whose max is NaN, +inf or -inf (all banned) cannot be sampled.
        ok = torch.isfinite(logits.max(dim=-1).values)
        if t.flags.any_random:
            sampled, row_ok = _sample(logits, t)
            tokens = torch.where(t.greedy, tokens, sampled)
            ok = ok & (t.greedy | row_ok)
        return torch.cat([tokens.to(torch.int32), ok.to(torch.int32)])

    def finish(self, pending: PendingSample) -> SamplerOutput:
        """Wait for the copy (the step's one host sync) and unpack it."""
        if pending.event is not None:
            pending.event.synchronize()
        packed = pending.packed.numpy()
        num_rows, max_k = pending.num_rows, pending.max_k
        token_list: list[int] = packed[:num_rows].tolist()
        errors = {i: "logits are not finite: no token can be sampled"
                  for i, g in enumerate(packed[num_rows : 2 * num_rows].tolist()) if not g}
        lps: list[float | None] = [None] * num_rows
        tops: list[list[tuple[int, float]] | None] = [None] * num_rows
        if packed.shape[0] > 2 * num_rows:
            chosen = packed[2 * num_rows : 3 * num_rows].view(np.float32).tolist()
            end = 3 * num_rows + num_rows * max_k
            top_i = packed[3 * num_rows : end].reshape(num_rows, max_k).tolist()
            top_v = packed[end : end + num_rows * max_k].view(np.float32).reshape(num_rows, max_k).tolist()
            for i, k in enumerate(pending.logprob_ks):
                if k is not None:
                    lps[i] = chosen[i]
                    tops[i] = list(zip(top_i[i][:k], top_v[i][:k])) if k else []
        return SamplerOutput(token_list, lps, tops, errors)

    def _copy_to_host(self, packed: torch.Tensor) -> tuple[torch.Tensor, object | None]:
        """The one device-to-host copy, into the next persistent pinned buffer; not waited for."""
        if packed.device.type != "cuda":
            return packed, None
        n = packed.numel()
        self._turn = (self._turn + 1) % self.NUM_HOST_BUFFERS
        host = self._host[self._turn]
        if host is None or host.numel() < n:
            host = self._host[self._turn] = torch.empty(max(n, 4096), dtype=torch.int32, pin_memory=True)
        view = host[:n]
        view.copy_(packed, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        return view, event

    def _ban_stop_ids(self, logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
        """Rows below min_tokens may not end: their eos and stop_token_ids get -inf."""
        vocab = logits.shape[1]
        ban_rows, ban_ids = [], []
        for i, row in enumerate(rows):
            num_output = len(row.output_token_ids) if row.num_output is None else row.num_output
            if num_output < row.params.min_tokens:
                ids = {t for t in (*self.eos_token_ids, *row.params.stop_token_ids) if 0 <= t < vocab}
                ban_rows += [i] * len(ids)
                ban_ids += sorted(ids)
        if not ban_rows:
            return logits
        logits = logits.clone()
        # The value as a device tensor: a Python float is copied to the device with a stream sync,
        # which waited for the forward (a 64-row decode step's launch thread stalled ~8 ms).
        index = (device_ids(ban_rows, logits.device), device_ids(ban_ids, logits.device))
        logits.index_put_(index, logits.new_full((len(ban_rows),), float("-inf")))
        return logits


def device_ids(values: list[int], device: torch.device) -> torch.Tensor:
    """int64 ids on `device`. On CUDA through pinned memory, not waited for: a copy from pageable
    memory (or indexing a CUDA tensor with a CPU one) first waits for everything queued on the
    device, the forward included, and stalls the launch thread."""
    host = torch.tensor(values, dtype=torch.int64)
    if device.type != "cuda":
        return host
    return host.pin_memory().to(device, non_blocking=True)


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


def _sample(logits: torch.Tensor, t: SamplingTensors) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [R, V] -> (tokens [R], row_ok [R] bool), every row drawn with its staged uniform
    (greedy rows have neutral parameters; the caller drops their draw): the inverse CDF, in
    vocabulary order, of softmax(logits / temperature) over the tokens the truncation keeps."""
    vocab = logits.shape[1]
    logits = logits / t.temperature[:, None]
    keep = truncation_mask(logits, t)
    if keep is not None:
        logits = logits.masked_fill(~keep, float("-inf"))
    probs = torch.softmax(logits, dim=-1)  # [R, V]
    cdf = probs.cumsum(dim=-1)  # [R, V]; zero-probability tokens repeat the previous value
    total = cdf[:, -1:]  # [R, 1]
    # Strictly below the total so that searchsorted(right) lands on a token with probability > 0.
    target = torch.minimum(t.uniform[:, None] * total, torch.nextafter(total, torch.zeros_like(total)))
    picked = torch.searchsorted(cdf, target, right=True).clamp_(max=vocab - 1)  # [R, 1]
    row_ok = torch.isfinite(total[:, 0]) & (total[:, 0] > 0)
    return picked[:, 0], row_ok


def truncation_mask(scaled: torch.Tensor, t: SamplingTensors) -> torch.Tensor | None:
    """scaled = logits / temperature [R, V] -> bool [R, V], the tokens each row may draw (None: all).

    Thresholds, ties included (kernels/truncation.py finds the same ones without a sort):
    - top_k: values >= the k-th largest (vLLM's rule: every logit equal to it stays);
    - top_p, over the top-k tokens: a token stays when the tokens strictly more likely hold less
      than top_p of their mass (the crossing token included; so the most likely always stays);
    - min_p: a token's probability at least min_p times the most likely token's."""
    if not (t.flags.need_top_k or t.flags.need_top_p or t.flags.need_min_p):
        return None
    top = scaled.max(dim=-1, keepdim=True).values  # [R, 1]
    keep = torch.ones_like(scaled, dtype=torch.bool)
    if t.flags.need_top_k or t.flags.need_top_p:
        vocab = scaled.shape[1]
        width = vocab
        if not scaled.is_cuda:  # a partial selection: exact while every row's cut falls inside it
            width = min(vocab, max(TOP_P_CANDIDATES if t.flags.need_top_p else 0, t.flags.max_top_k))
            if width < vocab and t.flags.need_top_p and _nucleus_may_pass(scaled, top, t, width):
                width = vocab  # a flat row: sort at once rather than select, then sort
        floor = _cut_off(scaled, top, t, width)
        if floor is None:  # some row's top_p reaches past the candidates
            floor = _cut_off(scaled, top, t, vocab)
        keep &= scaled >= floor
    if t.flags.need_min_p:
        keep &= torch.exp(scaled - top) >= t.min_p[:, None]
    return keep


# On CPU the top_p cut is looked for among each row's most likely values first (torch.topk) rather
# than in a sort of the whole row: 8 rows of SmolLM2's 49,152 took ~24 ms a step to sort, against
# steps of ~160-280 ms. A trained model's nucleus nearly always lies among these; when a row's does
# not, the rows are sorted whole.
TOP_P_CANDIDATES = 1024


def _nucleus_may_pass(scaled: torch.Tensor, top: torch.Tensor, t: SamplingTensors, width: int) -> bool:
    """Whether some row's top_p nucleus cannot fit in `width` candidates even if each held the
    largest weight (exp(0) = 1): width < top_p * its mass. (A top_k row fits: its k <= width.)"""
    open_rows = (t.top_p < 1.0) & ~((t.top_k > 0) & (t.top_k < scaled.shape[1]))
    if not bool(open_rows.any()):
        return False
    mass = torch.exp(scaled[open_rows] - top[open_rows]).sum(dim=-1)
    return bool((width < t.top_p[open_rows] * mass).any())


def _cut_off(scaled: torch.Tensor, top: torch.Tensor, t: SamplingTensors, width: int) -> torch.Tensor | None:
    """Each row's least value that top_k then top_p keep ([R, 1]; -inf: all), from its `width`
    largest values; None when some row's top_p cut lies past them."""
    vocab = scaled.shape[1]
    if width < vocab:
        ordered = scaled.topk(width, dim=-1).values  # [R, width], descending: the sort's first values
    else:
        ordered = scaled.sort(dim=-1, descending=True).values  # [R, V]
    floor = torch.full_like(top, float("-inf"))
    if t.flags.need_top_k:
        limited = (t.top_k > 0) & (t.top_k < vocab)
        k = torch.where(limited, t.top_k, 1).long()  # <= max_top_k <= width where limited
        floor = torch.where(limited[:, None], ordered.gather(1, k[:, None] - 1), floor)  # the k-th largest
    if t.flags.need_top_p:
        weights = torch.exp(ordered - top).masked_fill(ordered < floor, 0.0)
        mass_before = weights.cumsum(dim=-1) - weights
        if width < vocab:  # the mass of every token the top_k keeps, not only the candidates'
            total = torch.exp(scaled - top).masked_fill(scaled < floor, 0.0).sum(dim=-1, keepdim=True)
        else:
            total = weights.sum(dim=-1, keepdim=True)
        count = (mass_before < t.top_p[:, None] * total).sum(dim=-1, keepdim=True).clamp_(min=1)
        limited = t.top_p < 1.0
        if width < vocab and bool(((count[:, 0] == width) & limited).any()):  # (CPU: no device to wait for)
            return None
        cut = ordered.gather(1, count - 1)  # the least likely value that stays
        floor = torch.where(limited[:, None], torch.maximum(cut, floor), floor)
    return floor
