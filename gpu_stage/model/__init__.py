"""Model definitions. Every architecture of the Llama family maps to `LlamaForCausalLM`."""
from gpu_stage.model.llama import LlamaForCausalLM

__all__ = ["LlamaForCausalLM"]
