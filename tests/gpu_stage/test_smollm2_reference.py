"""SmolLM2 (the packaged Q4_1 GGUF) served by ttft vs transformers loading the same GGUF.

Logits over several prompts agree within 1e-3 max absolute error (float32, CPU); 32-token greedy
continuations agree under the exactness rule; decoded text equals transformers' decode.
"""
from __future__ import annotations

import asyncio

import pytest
import torch

from exactness import ExactnessReport, compare_runs
from gguf_once import gguf_parsed_once
from gpu_stage.attention.metadata import build_metadata
from gpu_stage.loaders import default_model_path
from pipeline import Engine, EngineConfig
from stages.sampling import SamplingParams

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "Les chats sont des animaux",
]
NUM_NEW = 32


@pytest.fixture(scope="module")
def hf():
    transformers = pytest.importorskip("transformers")
    path = default_model_path()
    with gguf_parsed_once():
        tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32)
    model.eval()
    return tok, model


@pytest.fixture(scope="module")
def ttft_runs():
    """Our logits over each whole prompt, and our greedy continuations, from one engine."""
    async def main():
        async with Engine(EngineConfig(num_kv_blocks=256)) as engine:
            runner = engine.built.runner
            logits = []
            for text in PROMPTS:
                ids = engine.tokenizer.encode(text, add_special_tokens=False)
                logits.append((ids, _full_logits(runner, ids)))
            continuations = []
            for ids, _ in logits:
                params = SamplingParams(max_tokens=NUM_NEW, temperature=0.0, ignore_eos=True)
                out_ids, text = [], []
                async for out in engine.generate(ids, params):
                    out_ids.extend(out.token_ids)
                    text.append(out.text)
                continuations.append((out_ids, "".join(text)))
            return logits, continuations

    return asyncio.run(main())


@torch.inference_mode()
def _full_logits(runner, ids: list[int]) -> torch.Tensor:
    """One prefill through the paged path with the lm_head on every position (test only)."""
    n = len(ids)
    bs = runner.block_size
    table = list(range(1, (n + bs - 1) // bs + 1))  # block 0 is the null block
    meta = build_metadata([n], [n], [table], bs, "cpu")
    return runner.model(torch.tensor(ids), torch.arange(n), runner.kv_cache, meta, torch.arange(n))


def test_tokenizer_ids_agree(hf, ttft_runs):
    tok, _ = hf
    for text, (ids, _) in zip(PROMPTS, ttft_runs[0]):
        if not any(c.isdigit() for c in text):  # transformers' GGUF converter drops the digit split
            assert ids == tok.encode(text, add_special_tokens=False), text


@torch.inference_mode()
def test_logits_match_transformers(hf, ttft_runs):
    _, model = hf
    worst = 0.0
    for ids, ours in ttft_runs[0]:
        ref = model(torch.tensor([ids])).logits[0]
        err = (ours - ref).abs().max().item()
        worst = max(worst, err)
        assert err < 1e-3, f"max abs error {err} over a {len(ids)}-token prompt"
    print(f"worst max abs logit error: {worst:.2e}")


def _hf_greedy(model, ids: list[int], num_new: int) -> tuple[list[int], list[torch.Tensor]]:
    """Plain greedy decoding with transformers' forward (no EOS stop, as ignore_eos on our side)."""
    seq, out, top2 = list(ids), [], []
    past = None
    step_input = torch.tensor([seq])
    for _ in range(num_new):
        res = model(step_input, past_key_values=past, use_cache=True)
        past = res.past_key_values
        logits = res.logits[0, -1]
        top2.append(logits.topk(2).values)
        nxt = int(logits.argmax())
        out.append(nxt)
        step_input = torch.tensor([[nxt]])
    return out, top2


@torch.inference_mode()
def test_greedy_continuations_and_text_match_transformers(hf, ttft_runs):
    tok, model = hf
    report = ExactnessReport()
    for (ids, _), (ours, text) in zip(ttft_runs[0], ttft_runs[1]):
        ref, top2 = _hf_greedy(model, ids, NUM_NEW)

        compare_runs(report, repr(tok.decode(ids)[:30]), ref, ours, lambda i: float(top2[i][0] - top2[i][1]))
        if ours == ref:
            assert text == tok.decode(ours, skip_special_tokens=True)
    print(f"SmolLM2 greedy vs transformers: {report.summary()}")
    assert not report.failures, report.failures
