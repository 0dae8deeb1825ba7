"""Model definitions. Every architecture of the Llama family maps to `llama.LlamaForCausalLM`; its
shape is `config.ModelConfig`, its rotary embedding `rotary`, its elementwise ops `torch_ops` (the
reference) or `triton_ops`. Nothing is imported here: kv_cache.py needs config.py, and llama.py
needs kv_cache.py."""
