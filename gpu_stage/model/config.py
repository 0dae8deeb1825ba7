"""ModelConfig: the shape of a Llama-family model, whatever file it came from.

Checked when made (every loader and preset goes through it): RoPE scaling fields
(rope_scaling.check_rope_scaling) and the sliding window, each a ValueError naming the field.

Sliding window (Mistral; Qwen2 with use_sliding_window): a query at position p attends to the keys
at positions p - window + 1 .. p (transformers' `kv_idx > q_idx - sliding_window`: the `window`
most recent, itself included) on the layers `layer_types` names "sliding_attention" (None: every
layer); the others attend to the whole context. KV blocks that fall wholly behind every layer's
window are not freed: a Qwen2 model's full layers still read them, prefix-cache hits and
recompute after preemption need no special case, and the attention kernels skip those blocks'
tiles anyway, so the cost is memory only (a Mistral sequence holds its whole context, as before).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gpu_stage.model.rope_checks import check_rope_scaling

SLIDING, FULL = "sliding_attention", "full_attention"


@dataclass(frozen=True)
class ModelConfig:
    architecture: str  # a model_type the registry knows (model/registry.py), e.g. "llama"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    # e.g. {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    #       "original_max_position_embeddings": 8192}; None for plain RoPE.
    rope_scaling: dict | None = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # Qwen2: bias on q/k/v
    sliding_window: int | None = None  # keys a windowed layer's query sees, itself included
    layer_types: tuple[str, ...] | None = None  # per layer SLIDING or FULL; None: all SLIDING
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        check_rope_scaling(self.rope_scaling, self.max_position_embeddings)
        window = self.sliding_window
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window <= 0):
            raise ValueError(f"sliding_window must be a positive integer or null, got {window!r}")
        if self.layer_types is not None:
            if len(self.layer_types) != self.num_layers:
                raise ValueError(f"layer_types names {len(self.layer_types)} layers, the model has {self.num_layers}")
            odd = sorted({t for t in self.layer_types if t not in (SLIDING, FULL)})
            if odd:
                raise ValueError(f"layer_types: unsupported {odd} (supported: {SLIDING}, {FULL})")

    def layer_window(self, layer: int) -> int | None:
        """The sliding window of layer `layer`, or None where it attends to the whole context."""
        if self.sliding_window is None or (self.layer_types is not None and self.layer_types[layer] != SLIDING):
            return None
        return self.sliding_window

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def num_params(self) -> int:
        h, i, v = self.hidden_size, self.intermediate_size, self.vocab_size
        per_layer = h * (self.q_size + 2 * self.kv_size) + self.q_size * h + 3 * h * i + 2 * h
        if self.architecture == "qwen3":  # an RMSNorm over each head's q and k
            per_layer += 2 * self.head_dim
        head = 0 if self.tie_word_embeddings else v * h
        return v * h + self.num_layers * per_layer + h + head

    def num_linear_params(self) -> int:
        """Parameters that multiply every token: the decoder layers' matrices (norms excluded)."""
        h = self.hidden_size
        return self.num_layers * (h * (self.q_size + 2 * self.kv_size) + self.q_size * h + 3 * h * self.intermediate_size)

    def attention_weight(self) -> float:
        """Attention FLOPs per (query, key) pair, all layers (QK and PV), over the linear layers'
        FLOPs per token: what a cached context token adds to a new token's cost, relative to it."""
        return 4.0 * self.num_heads * self.head_dim * self.num_layers / (2.0 * self.num_linear_params())

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.num_layers * self.kv_size * dtype_bytes
