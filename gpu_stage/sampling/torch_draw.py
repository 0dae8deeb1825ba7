"""The torch path of a random draw (the CPU path, and the reference of kernels/sampling.py and
kernels/truncation.py): temperature, then top_k / top_p / min_p (`truncation_mask`), then the
inverse CDF of each row's staged uniform, in vocabulary order.
"""
from __future__ import annotations

import torch

from gpu_stage.sampling.rows import SamplingTensors


def draw(logits: torch.Tensor, t: SamplingTensors) -> tuple[torch.Tensor, torch.Tensor]:
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
