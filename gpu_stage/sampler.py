"""Sampler: logits of the sampled rows of a step -> one token per row, vectorised over the batch.

Order of processing (as vLLM): logprobs are taken from the raw model log-softmax; then min_tokens
bans the stop ids, the repetition penalty (HF semantics, over prompt + output) and the frequency /
presence penalties (over output) edit the logits; temperature 0 takes the argmax; otherwise
temperature, top_k, top_p and min_p shape the distribution and the token is drawn by inverse CDF
with ONE uniform from the request's own generator. Each request's randomness is therefore its own:
a seeded request gives the same tokens whatever else shares its batch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import torch

from stages.sampling import SamplingParams


@dataclass
class SamplingRow:
    """One sequence to sample: its parameters, history (for penalties) and random generator."""

    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    generator: torch.Generator | None = None  # CPU generator; None: torch's global one


@dataclass
class SamplerOutput:
    token_ids: list[int]
    logprobs: list[float | None]
    top_logprobs: list[list[tuple[int, float]] | None]
    errors: dict[int, str] = field(default_factory=dict)  # row -> why it could not be sampled


class Sampler:
    def __init__(self, eos_token_ids: Iterable[int] = ()) -> None:
        self.eos_token_ids = tuple(sorted(set(eos_token_ids)))

    def __call__(self, logits: torch.Tensor, rows: list[SamplingRow]) -> SamplerOutput:
        """logits [B, vocab] (any float dtype) -> one token per row."""
        assert logits.shape[0] == len(rows)
        logits = logits.to(torch.float32)  # [B, V]
        want_logprobs = [r.params.logprobs is not None for r in rows]
        raw_logprobs = torch.log_softmax(logits, dim=-1) if any(want_logprobs) else None
        logits = self._ban_stop_ids(logits, rows)
        logits = apply_penalties(logits, rows)

        greedy = [r.params.greedy for r in rows]
        tokens = torch.argmax(logits, dim=-1)  # [B]
        # [B]: a row whose max is NaN, +inf or -inf (all banned) cannot be sampled.
        ok = torch.isfinite(logits.max(dim=-1).values)
        random_rows = [i for i, g in enumerate(greedy) if not g]
        if random_rows:
            idx = torch.tensor(random_rows, device=logits.device)
            sampled, row_ok = _sample(logits[idx], [rows[i] for i in random_rows])
            tokens[idx] = sampled
            ok[idx] &= row_ok

        token_list: list[int] = tokens.tolist()
        errors = {i: "logits are not finite: no token can be sampled" for i, g in enumerate(ok.tolist()) if not g}
        lps: list[float | None] = [None] * len(rows)
        tops: list[list[tuple[int, float]] | None] = [None] * len(rows)
        if raw_logprobs is not None:
            max_k = max(r.params.logprobs or 0 for r in rows)
            chosen = raw_logprobs.gather(1, tokens[:, None])[:, 0].tolist()
            top_v, top_i = raw_logprobs.topk(max_k, dim=-1) if max_k else (None, None)
            top_v = top_v.tolist() if top_v is not None else None
            top_i = top_i.tolist() if top_i is not None else None
            for i, row in enumerate(rows):
                if want_logprobs[i]:
                    k = row.params.logprobs or 0
                    lps[i] = chosen[i]
                    tops[i] = list(zip(top_i[i][:k], top_v[i][:k])) if k else []
        return SamplerOutput(token_list, lps, tops, errors)

    def _ban_stop_ids(self, logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
        """Rows below min_tokens may not end: their eos and stop_token_ids get -inf."""
        vocab = logits.shape[1]
        ban_rows, ban_ids = [], []
        for i, row in enumerate(rows):
            if len(row.output_token_ids) < row.params.min_tokens:
                ids = {t for t in (*self.eos_token_ids, *row.params.stop_token_ids) if 0 <= t < vocab}
                ban_rows += [i] * len(ids)
                ban_ids += sorted(ids)
        if not ban_rows:
            return logits
        logits = logits.clone()
        logits[torch.tensor(ban_rows), torch.tensor(ban_ids)] = float("-inf")
        return logits


def apply_penalties(logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
    """Repetition penalty over prompt + output (HF: divide positive logits, multiply negative ones),
    then logits -= frequency * count + presence * (count > 0) over the output tokens (OpenAI)."""
    idx = [i for i, r in enumerate(rows) if r.params.needs_penalties]
    if not idx:
        return logits
    device, vocab = logits.device, logits.shape[1]
    num_rows = len(idx)
    logits = logits.clone()
    sub = logits[idx]  # [R, V]
    outputs = _padded([rows[i].output_token_ids for i in idx], vocab, device)  # [R, Lo]
    counts = torch.zeros(num_rows, vocab + 1, device=device)  # the extra column takes the padding
    counts = counts.scatter_add_(1, outputs, torch.ones(outputs.shape, device=device))[:, :vocab]
    rep = torch.tensor([rows[i].params.repetition_penalty for i in idx], device=device)[:, None]
    if any(rows[i].params.repetition_penalty != 1.0 for i in idx):
        prompts = _padded([rows[i].prompt_token_ids for i in idx], vocab, device)  # [R, Lp]
        seen = torch.zeros(num_rows, vocab + 1, dtype=torch.bool, device=device)
        seen = seen.scatter_(1, prompts, True)[:, :vocab] | (counts > 0)  # [R, V]
        sub = torch.where(seen, torch.where(sub > 0, sub / rep, sub * rep), sub)
    freq = torch.tensor([rows[i].params.frequency_penalty for i in idx], device=device)[:, None]
    presence = torch.tensor([rows[i].params.presence_penalty for i in idx], device=device)[:, None]
    sub = sub - freq * counts - presence * (counts > 0).to(sub.dtype)
    logits[idx] = sub
    return logits


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


def _sample(logits: torch.Tensor, rows: list[SamplingRow]) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [R, V] of rows with temperature > 0 -> (tokens [R], row_ok [R] bool)."""
    num_rows, vocab = logits.shape
    device = logits.device
    temperature = torch.tensor([r.params.temperature for r in rows], device=device)[:, None]
    logits = logits / temperature
    top_k = [r.params.top_k or vocab for r in rows]
    top_p = [r.params.top_p for r in rows]
    min_p = [r.params.min_p for r in rows]
    need_sort = any(k < vocab for k in top_k) or any(p < 1.0 for p in top_p)
    order = None
    if need_sort:
        logits, order = logits.sort(dim=-1, descending=True)  # [R, V]
        ks = torch.tensor(top_k, device=device)[:, None]
        logits = logits.masked_fill(torch.arange(vocab, device=device)[None, :] >= ks, float("-inf"))
    probs = torch.softmax(logits, dim=-1)  # [R, V]
    if need_sort and any(p < 1.0 for p in top_p):
        # Keep the most likely tokens until their mass reaches top_p (the crossing token included):
        # drop a token when the mass of the tokens strictly more likely is already >= top_p.
        ps = torch.tensor(top_p, device=device)[:, None]
        mass_before = probs.cumsum(dim=-1) - probs
        probs = probs.masked_fill(mass_before >= ps, 0.0)
    if any(m > 0.0 for m in min_p):
        mins = torch.tensor(min_p, device=device)[:, None]
        probs = probs.masked_fill(probs < mins * probs.max(dim=-1, keepdim=True).values, 0.0)
    cdf = probs.cumsum(dim=-1)  # [R, V]; zero-probability tokens repeat the previous value
    total = cdf[:, -1:]  # [R, 1]
    uniforms = torch.stack([torch.rand((), generator=r.generator) for r in rows]).to(device)  # [R]
    # Strictly below the total so that searchsorted(right) lands on a token with probability > 0.
    target = torch.minimum(uniforms[:, None] * total, torch.nextafter(total, torch.zeros_like(total)))
    picked = torch.searchsorted(cdf, target, right=True).clamp_(max=vocab - 1)  # [R, 1]
    tokens = picked if order is None else order.gather(1, picked)
    row_ok = torch.isfinite(total[:, 0]) & (total[:, 0] > 0)
    return tokens[:, 0], row_ok
