"""Sampler: logits of the sampled rows of a step -> one token per row, vectorised over the batch.

Order of processing (as vLLM): a logits processor edits the logits where the runner passes one (a
runner hook's: gpu_stage/runner_hooks.py; a grammar's mask, which vLLM too applies first); then
logprobs are taken from that log-softmax (the model's own, without a grammar); min_tokens bans the stop ids, logit_bias adds its biases (logit_bias.py), the repetition penalty
(HF semantics, over prompt + output) and the frequency / presence penalties (over output) edit
them; temperature 0 takes the argmax; otherwise temperature, top_k, top_p and min_p shape the
distribution (`truncation_mask`) and the token is drawn by inverse CDF, in vocabulary order, with
ONE uniform from the request's own generator. Each request's randomness is therefore its own: a
seeded request gives the same tokens whatever else shares its batch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np
import torch

from gpu_stage.sampling import torch_draw
from gpu_stage.sampling.logit_bias import apply_logit_bias
from gpu_stage.sampling.penalties import PenaltyCache, apply_penalties
from gpu_stage.sampling.rows import SamplingRow, SamplingTensors, device_ids

# logits [R, V] float32 and their rows -> new logits (the input left as it is)
LogitsProcessor = Callable[[torch.Tensor, list[SamplingRow]], torch.Tensor]


@dataclass
class SamplerOutput:
    token_ids: list[int]
    logprobs: list[float | None]
    top_logprobs: list[list[tuple[int, float]] | None]
    errors: dict[int, str] = field(default_factory=dict)  # row -> why it could not be sampled
    extra: list[int] = field(default_factory=list)  # the ids that rode the copy (`start`'s `extra`)


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
    num_extra: int = 0  # int32 ids appended to the packed results (`start`'s `extra`)


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

    def __call__(self, logits: torch.Tensor, rows: list[SamplingRow], tensors: SamplingTensors | None = None,
                 process: LogitsProcessor | None = None) -> SamplerOutput:
        """logits [B, vocab] (any float dtype) -> one token per row, waiting for the result."""
        return self.finish(self.start(logits, rows, tensors, process=process))

    def start(self, logits: torch.Tensor, rows: list[SamplingRow], tensors: SamplingTensors | None = None,
              extra: torch.Tensor | None = None, process: LogitsProcessor | None = None) -> PendingSample:
        """Queue the sampling of one token per row and the single device-to-host copy of the packed
        results (ids, ok flags and, when asked, logprobs); no host sync. `tensors`: the rows'
        staged parameters (drawn and built here when None). `extra`: int32 ids on the device that
        ride the same copy (SamplerOutput.extra). `process`: the logits processor, if any."""
        assert logits.shape[0] == len(rows)
        if tensors is None:
            tensors = SamplingTensors.build(rows, logits.device, logits.shape[1])
        logits = logits.to(torch.float32)  # [B, V]
        if process is not None:  # before the logprobs: a grammar's mask shows in them, as in vLLM
            logits = process(logits, rows)
        ks = [r.params.logprobs for r in rows]
        raw_logprobs = torch.log_softmax(logits, dim=-1) if any(k is not None for k in ks) else None
        logits = self._ban_stop_ids(logits, rows)
        if tensors.flags.need_logit_bias:
            logits = apply_logit_bias(logits, rows)
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
        num_extra = 0 if extra is None else extra.numel()
        if num_extra:
            parts.append(extra.reshape(-1).to(torch.int32))
        packed, event = self._copy_to_host(parts[0] if len(parts) == 1 else torch.cat(parts))
        return PendingSample(token_ids, packed, event, num_rows, ks, max_k, num_extra)

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
            sampled, row_ok = torch_draw.draw(logits, t)
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
        extra = packed[packed.shape[0] - pending.num_extra:].tolist() if pending.num_extra else []
        if pending.num_extra:
            packed = packed[: packed.shape[0] - pending.num_extra]
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
        return SamplerOutput(token_list, lps, tops, errors, extra)

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
