"""Prompt logprobs (vLLM's prompt_logprobs), computed in the prefill of the request that asks.

Prompt position p's logits score the prompt token at p + 1. So for a chunk at positions [s, s + q)
of a request asking for them, the rows of positions [max(s, next), min(s + q, L - 1)) are scored
(L: the prompt's length; `next`: the first position not scored yet, which a recompute after a
preemption has passed already; the last prompt position's logits are the sampled row's). Those
token rows go after the step's sampled rows in its logits_indices (StepInputs stages them with
their targets, the next prompt tokens), for this request only: the other requests of the step
get the lm_head on their last token as always. Such a step runs eagerly (no graph has the rows).

The lm_head then runs on the prompt rows a slice at a time (step_inputs.forward_step), so that a
2,048-token chunk at a 128k vocabulary never holds more than PROMPT_SLICE_ROWS rows of logits;
each slice is reduced at once (PromptLogprobsPass: log-softmax, the target's logprob and rank, the
top k) into one small packed tensor, copied to the host once, after the step's sampling is queued
and without waiting. The results are kept per request on the host (SamplingState) and travel with
the request's first sampled token (SampledToken.prompt_logprobs).

Logprobs are the model's own distribution (as the sampled tokens' logprobs are: no bias, penalty
or temperature). A request that asks for them never reads the prefix cache (scheduler: its blocks
are not hashed), so every position is computed here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from stages.messages import PromptLogprob, ScheduledChunk

PROMPT_SLICE_ROWS = 256  # rows of prompt logits at a time: 128 MiB of float32 at a 128k vocabulary


@dataclass
class PromptSpan:
    """One request's scored positions in a step: prompt positions first_pos .. first_pos + count - 1."""

    request_id: str
    first_pos: int
    count: int
    k: int  # alternatives asked for


@dataclass
class PromptRows:
    """A step's prompt rows: their spans, token rows in the step, targets and the largest k."""

    spans: list[PromptSpan] = field(default_factory=list)
    token_rows: list[int] = field(default_factory=list)
    targets: list[int] = field(default_factory=list)
    max_k: int = 0


class PromptProgress:
    """One request's prompt logprobs on the host: the next position to score and the results so far."""

    __slots__ = ("k", "prompt_token_ids", "next_pos", "results")

    def __init__(self, k: int, prompt_token_ids: list[int]) -> None:
        self.k = k
        self.prompt_token_ids = prompt_token_ids
        self.next_pos = 0
        self.results: list[PromptLogprob] | None = []  # None once handed over with the first token

    def take(self) -> list[PromptLogprob] | None:
        """The results, once: for the request's first sampled token."""
        results, self.results = self.results, None
        return results


def plan_prompt_rows(chunks: Sequence[ScheduledChunk], progress: dict[str, PromptProgress]) -> PromptRows | None:
    """The rows a step scores for the requests in `progress` (advanced past them), or None."""
    rows = PromptRows()
    offset = 0
    for chunk in chunks:
        state = progress.get(chunk.request_id)
        if state is not None:
            ids = state.prompt_token_ids
            first = max(chunk.start_pos, state.next_pos)
            end = min(chunk.start_pos + len(chunk.token_ids), len(ids) - 1)
            if end > first:
                rows.spans.append(PromptSpan(chunk.request_id, first, end - first, state.k))
                base = offset - chunk.start_pos
                rows.token_rows.extend(range(base + first, base + end))
                rows.targets.extend(ids[first + 1 : end + 1])
                rows.max_k = max(rows.max_k, state.k)
                state.next_pos = end
        offset += len(chunk.token_ids)
    return rows if rows.spans else None


class PromptLogprobsPass:
    """Reduces a step's prompt logits slice by slice into one packed int32 tensor [P, 2 + 2k]:
    logprob bits | rank | top ids [k] | top logprob bits [k]; `start_copy` sends it to the host."""

    def __init__(self, rows: PromptRows, targets: torch.Tensor) -> None:
        """`targets`: the rows' target ids on the device [P] (the staged prompt_targets)."""
        self.rows = rows
        self.targets = targets
        self.packed = torch.empty((len(rows.targets), 2 + 2 * rows.max_k), dtype=torch.int32, device=targets.device)
        self._host: torch.Tensor | None = None
        self._event = None

    def add(self, start: int, logits: torch.Tensor) -> None:
        """Rows [start, start + n) of the prompt rows: their logits [n, V] float32."""
        n, k = logits.shape[0], self.rows.max_k
        logprobs = torch.log_softmax(logits, dim=-1)  # [n, V]
        chosen = logprobs.gather(1, self.targets[start : start + n].long()[:, None])  # [n, 1]
        out = self.packed[start : start + n]
        out[:, 0] = chosen[:, 0].view(torch.int32)
        out[:, 1] = (logprobs >= chosen).sum(dim=-1).to(torch.int32)
        if k:
            top_v, top_i = logprobs.topk(k, dim=-1)
            out[:, 2 : 2 + k] = top_i.to(torch.int32)
            out[:, 2 + k :] = top_v.view(torch.int32)

    def start_copy(self) -> None:
        """The one device-to-host copy of the results, not waited for."""
        if self.packed.device.type != "cuda":
            self._host = self.packed
            return
        self._host = torch.empty(self.packed.shape, dtype=torch.int32, pin_memory=True)
        self._host.copy_(self.packed, non_blocking=True)
        self._event = torch.cuda.Event()
        self._event.record()

    def results(self) -> list[tuple[str, list[PromptLogprob]]]:
        """Wait for the copy -> each span's request id and its positions' PromptLogprob."""
        assert self._host is not None, "start_copy first"
        if self._event is not None:
            self._event.synchronize()
        packed = self._host.numpy()
        k = self.rows.max_k
        logprobs = packed[:, 0].copy().view(np.float32).tolist()
        ranks = packed[:, 1].tolist()
        top_ids = packed[:, 2 : 2 + k].tolist()
        top_values = np.ascontiguousarray(packed[:, 2 + k :]).view(np.float32).tolist()
        out, row = [], 0
        for span in self.rows.spans:
            entries = []
            for j in range(row, row + span.count):
                top = list(zip(top_ids[j][: span.k], top_values[j][: span.k]))
                entries.append(PromptLogprob(self.rows.targets[j], logprobs[j], ranks[j], top))
            out.append((span.request_id, entries))
            row += span.count
        return out
