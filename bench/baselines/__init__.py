"""Baselines: a plain transformers server with the same OpenAI endpoint, on the same dummy weights.

- `hf_weights`: transformers' model of the same architecture carrying exactly ttft's dummy weights of
  (preset, seed).
- `hf_server`: the Starlette app (`python -m bench.baselines.hf_server --mode generate|continuous`).
- `generate_engine` / `continuous_engine`: one request at a time through `generate()` (the "before"
  of published TTFT write-ups) and transformers' own continuous batching with paged attention.
- `suite`: starts each server in turn and runs the same client workloads against it.
"""
