"""Sampling parameters: the validated, internal form of a request's generation options.

Ingress builds one from the OpenAI body; the scheduler reads its limits; the GPU stage's sampler
reads the rest. It is immutable so that it can cross threads without copies.
"""
from __future__ import annotations

from dataclasses import dataclass

from stages.structured import StructuredOutput


@dataclass(frozen=True, slots=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0  # in (0, 1]
    top_k: int | None = None  # None: no top-k filter
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    # None: no logprobs; k >= 0: the sampled token's logprob plus the k most likely alternatives.
    logprobs: int | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    min_tokens: int = 0
    # OpenAI's logit_bias: (token id, bias) pairs, ids ascending and unique, added to the logits
    # before the penalties (gpu_stage/sampling/logit_bias.py).
    logit_bias: tuple[tuple[int, float], ...] = ()
    # vLLM's prompt_logprobs: None, or k >= 0: each prompt token's logprob (and rank) given the
    # tokens before it, plus the k most likely tokens there, computed in the prefill.
    prompt_logprobs: int | None = None
    # The output must match this grammar (stages/structured.py); None: free text.
    structured: StructuredOutput | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def needs_penalties(self) -> bool:
        return (
            self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
            or self.repetition_penalty != 1.0
        )
