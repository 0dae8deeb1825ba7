"""Token counts for datasets whose lengths are measured, not chosen (ShareGPT): a local tokenizer or
the server's own `POST /tokenize` (vLLM's route and shape: `{"model", "prompt"}` in, `count` out).

Counts include the special tokens the tokenizer adds (BOS), as `vllm bench serve` counts them
(`tokenizer(text).input_ids`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Awaitable, Callable

from bench.client import BenchClient
from ingress.bpe_tokenizer import BpeTokenizer
from ingress.dummy_tokenizer import MIN_VOCAB_SIZE, DummyTokenizer

TokenCounter = Callable[[str], Awaitable[int]]


def local_counter(spec: str) -> TokenCounter:
    """`dummy` (the byte tokenizer of ttft's dummy models), or an HF model directory (or its
    tokenizer.json) as ttft serve loads it."""
    if spec == "dummy":
        tokenizer = DummyTokenizer(MIN_VOCAB_SIZE)  # its encoding does not depend on the vocabulary size
    else:
        path = Path(spec)
        if path.is_file() and path.name == "tokenizer.json":
            path = path.parent
        if not path.is_dir():
            raise ValueError(f"--tokenizer {spec!r}: not 'dummy', a model directory or a tokenizer.json")
        tokenizer = BpeTokenizer.from_dir(path)

    async def count(text: str) -> int:
        return len(tokenizer.encode(text))

    return count


def server_counter(client: BenchClient, model: str) -> TokenCounter:
    async def count(text: str) -> int:
        try:
            reply = await client.post_json("/tokenize", {"model": model, "prompt": text})
        except RuntimeError as e:
            raise RuntimeError(f"the server cannot count tokens at /tokenize ({e}); pass --tokenizer") from e
        return int(reply["count"])

    return count
