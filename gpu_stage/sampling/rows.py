"""A step's sampled rows: SamplingRow (one sequence's parameters, history and generator), their
parameters as per-row lists, a request's logit_bias on the device (BiasRow), the flags that
decide which sampling steps a batch needs, and the [R] tensors the sampler reads
(SamplingTensors; the runner stages the same values in its pinned buffer, step_inputs.py). `device_ids` puts host ids on the device without waiting for it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Sequence

import torch

from stages.sampling import SamplingParams


@dataclass(frozen=True)
class BiasRow:
    """One request's logit_bias on the device: ids [n] int64 and biases [n] float32."""

    ids: torch.Tensor
    values: torch.Tensor

    @staticmethod
    def of(pairs: Sequence[tuple[int, float]], device: torch.device) -> BiasRow:
        ids = device_ids([t for t, _ in pairs], device)
        values = torch.tensor([b for _, b in pairs], dtype=torch.float32)
        if device.type == "cuda":
            values = values.pin_memory().to(device, non_blocking=True)
        return BiasRow(ids, values)

    def __len__(self) -> int:
        return self.ids.shape[0]


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
    # Its uniform, drawn already from its generator (SamplingState.lookahead: a row sampled ahead
    # of the tokens before it being known); None: draw_uniforms draws the next one.
    uniform: float | None = None
    bias: BiasRow | None = None  # its logit_bias on the device (None: built from params when it has one)


def draw_uniform(generator: torch.Generator | None) -> float:
    return float(torch.rand((), generator=generator))


def draw_uniforms(rows: list[SamplingRow]) -> list[float]:
    """One uniform per non-greedy row from the row's own generator (0.0 for greedy rows). The runner
    draws them while it stages the step, before the forward, so no host value is needed after it."""
    return [0.0 if r.params.greedy else r.uniform if r.uniform is not None else draw_uniform(r.generator)
            for r in rows]


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
    need_logit_bias: bool = False

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
            any(r.params.logit_bias for r in rows),
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


def device_ids(values: list[int], device: torch.device) -> torch.Tensor:
    """int64 ids on `device`. On CUDA through pinned memory, not waited for: a copy from pageable
    memory (or indexing a CUDA tensor with a CPU one) first waits for everything queued on the
    device, the forward included, and stalls the launch thread."""
    host = torch.tensor(values, dtype=torch.int64)
    if device.type != "cuda":
        return host
    return host.pin_memory().to(device, non_blocking=True)
