"""A config's `rope_scaling` dict checked once (gpu_stage/model/rope_scaling.py computes its
frequencies), without torch: a ModelConfig is made (and so checked) by `ttft serve`'s checks of its
flags before torch loads.

`check_rope_scaling` runs when a ModelConfig is made (every loader, every preset): a missing or
inconsistent field is a ValueError that names it (`rope_scaling.factor`), which the server turns
into a start-up error. Where transformers defaults a field we default it the same way (yarn's and
llama3's `original_max_position_embeddings` is `max_position_embeddings` when absent, as
transformers' `standardize_rope_params` and llama.cpp's `n_ctx_orig_yarn` both do), so a config
transformers loads we load; where it only warns about nonsense (a factor <= 0, beta_fast below
beta_slow, high_freq_factor not above low_freq_factor) we refuse.
"""
from __future__ import annotations

import math

SUPPORTED = ("default", "linear", "llama3", "yarn", "dynamic")
_NEEDS_FACTOR = ("linear", "llama3", "yarn", "dynamic")


def rope_type(scaling: dict | None) -> str:
    scaling = scaling or {}
    return scaling.get("rope_type", scaling.get("type", "default")) or "default"


def _number(scaling: dict, name: str, positive: bool = False) -> float | None:
    value = scaling.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"rope_scaling.{name} must be a number, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"rope_scaling.{name} must be > 0, got {value!r}")
    return float(value)


def check_rope_scaling(scaling: dict | None, max_position_embeddings: int) -> None:
    """ValueError naming the field when `scaling` cannot be computed as its type says."""
    if scaling is None:
        return
    if not isinstance(scaling, dict):
        raise ValueError(f"rope_scaling must be an object, got {scaling!r}")
    kind = rope_type(scaling)
    if kind not in SUPPORTED:
        raise ValueError(f"rope_scaling.rope_type {kind!r} is not supported (supported: {', '.join(SUPPORTED)})")
    if _number(scaling, "partial_rotary_factor") not in (None, 1.0):
        raise ValueError(f"rope_scaling.partial_rotary_factor {scaling['partial_rotary_factor']!r} is not "
                         f"supported (only 1.0: every dimension rotated)")
    if kind == "default":
        return
    if kind in _NEEDS_FACTOR and scaling.get("factor") is None:
        raise ValueError(f"rope_scaling.factor is required for rope_type {kind!r}")
    _number(scaling, "factor", positive=True)
    orig = scaling.get("original_max_position_embeddings")
    if orig is not None and (isinstance(orig, bool) or not isinstance(orig, int) or orig <= 0):
        raise ValueError(f"rope_scaling.original_max_position_embeddings must be a positive integer, got {orig!r}")
    if kind == "llama3":
        low = _number(scaling, "low_freq_factor", positive=True) or 1.0
        high = _number(scaling, "high_freq_factor", positive=True) or 4.0
        if high <= low:
            raise ValueError(f"rope_scaling.high_freq_factor ({high}) must be above low_freq_factor ({low})")
    if kind == "yarn":
        _number(scaling, "attention_factor", positive=True)
        _number(scaling, "mscale")
        _number(scaling, "mscale_all_dim")
        fast = _number(scaling, "beta_fast", positive=True) or 32.0
        slow = _number(scaling, "beta_slow", positive=True) or 1.0
        if fast < slow:
            raise ValueError(f"rope_scaling.beta_fast ({fast}) must not be below beta_slow ({slow})")
        if not isinstance(scaling.get("truncate", True), bool):
            raise ValueError(f"rope_scaling.truncate must be true or false, got {scaling['truncate']!r}")
