"""SpeculativeConfig: `--speculative-config` (vLLM's JSON and field names), validated once at start-up.

    {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    {"method": "draft_model", "model": "dummy:tiny", "num_speculative_tokens": 4}
    "disable_by_batch_size": N  turns speculation off while more than N sequences run

The scheduler reads it (how many draft slots a decode row may carry, the n-gram proposer's
window), the GPU stage too (draft_model: the draft it loads). A config that cannot work is a
ValueError naming the field (`speculative_config.<field>`), which start-up turns into a refusal.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields

METHODS = ("ngram", "draft_model")
MAX_SPECULATIVE_TOKENS = 16  # draft slots per row: past this the verification step is a prefill


@dataclass(frozen=True, slots=True)
class SpeculativeConfig:
    method: str
    num_speculative_tokens: int
    prompt_lookup_max: int = 4  # ngram: the longest suffix looked up in the sequence
    prompt_lookup_min: int = 1  # ngram: the shortest
    model: str | None = None  # draft_model: any model ttft loads (dummy: included)
    disable_by_batch_size: int | None = None  # no drafts while more sequences than this run

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, what: str) -> None:
            if not ok:
                raise ValueError(f"speculative_config.{name}: {what}")

        need(self.method in METHODS, "method", f"unknown method {self.method!r}; known: {', '.join(METHODS)}")
        k = self.num_speculative_tokens
        need(isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= MAX_SPECULATIVE_TOKENS,
             "num_speculative_tokens", f"must be an integer in 1..{MAX_SPECULATIVE_TOKENS}, got {k!r}")
        for name in ("prompt_lookup_max", "prompt_lookup_min"):
            value = getattr(self, name)
            need(isinstance(value, int) and not isinstance(value, bool) and value >= 1, name,
                 f"must be an integer >= 1, got {value!r}")
        need(self.prompt_lookup_min <= self.prompt_lookup_max, "prompt_lookup_min",
             f"must be <= prompt_lookup_max ({self.prompt_lookup_max}), got {self.prompt_lookup_min}")
        n = self.disable_by_batch_size
        need(n is None or (isinstance(n, int) and not isinstance(n, bool) and n >= 1), "disable_by_batch_size",
             f"must be an integer >= 1, got {n!r}")
        if self.method == "draft_model":
            need(isinstance(self.model, str) and bool(self.model), "model", "draft_model needs a draft model")
        else:
            need(self.model is None, "model", f"only draft_model takes a model, not {self.method!r}")

    @property
    def k(self) -> int:
        return self.num_speculative_tokens

    def speculates(self, num_running: int) -> bool:
        """Whether rows get drafts in a step with this many running sequences."""
        return self.disable_by_batch_size is None or num_running <= self.disable_by_batch_size

    @classmethod
    def parse(cls, text: str) -> SpeculativeConfig:
        """From the flag's JSON text; ValueError naming the field when it cannot work."""
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"speculative_config: not valid JSON ({exc.msg} at {exc.pos})") from None
        if not isinstance(raw, dict):
            raise ValueError("speculative_config: must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"speculative_config.{unknown[0]}: unknown field; known: {', '.join(sorted(known))}")
        for name in ("method", "num_speculative_tokens"):
            if name not in raw:
                raise ValueError(f"speculative_config.{name}: required")
        return cls(**raw)
