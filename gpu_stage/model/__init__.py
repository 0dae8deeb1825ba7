"""Model definitions. A checkpoint's architecture maps to its class through `registry` (Llama,
Mistral and Qwen2 share llama.py); the rest of the GPU stage holds a model through
`interface.CausalLM`. A model's shape is `config.ModelConfig`, its rotary embedding
`rotary`, its layer ops `torch_ops.TorchOps` (the reference) or `triton_ops.TritonOps`. Nothing is
imported at the top here: kv_cache.py needs config.py, and llama.py needs kv_cache.py."""
from __future__ import annotations

LAYER_OPS = ("torch", "triton")


def get_layer_ops(name: str):
    """'torch' or 'triton' (the latter needs triton, and a GPU unless TRITON_INTERPRET=1): a fresh
    TritonOps per call, since it carries the model's measured gemv plan."""
    if name == "torch":
        from gpu_stage.model.torch_ops import TorchOps

        return TorchOps
    if name == "triton":
        from gpu_stage.model.triton_ops import TritonOps

        return TritonOps()
    raise ValueError(f"unknown layer ops {name!r} (known: {', '.join(LAYER_OPS)})")
