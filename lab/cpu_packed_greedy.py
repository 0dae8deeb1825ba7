"""Do SmolLM2's float32 greedy outputs change when the layer products run from oneDNN-packed copies?

    python -m lab.cpu_packed_greedy [--new-tokens 48] [--threads 2] [--ab decode-kernel]

`--ab decode-kernel`: one model (packed layers), a without and b with the C++ decode kernel
(gpu_stage/attention/cpu_decode_kernel.py). `--ab fused-ops`: b a second copy prepared with the C++
elementwise ops (gpu_stage/model/cpu_fused.py); `--ab cpu-kernels`: b with both. `--one-row`: each
prompt decoded alone (one-row products), a's lm_head by F.linear over its [out, in] storage as main
ran it, b's from its [in, out] copy (gpu_stage/model/cpu_ops.py).

Two copies of the packaged SmolLM2 (runner_builder.load_model, as `ttft serve` loads it): a with
prepare_cpu_model(pack_layers=False), b as the runner prepares it now (layer products from packed
copies at 2-64 rows). Both decode the same 8 prompts together, greedily (a prefill step of all of
them, then decode steps of 8 rows: the packed path), and the tokens are compared under the
exactness rule (../shared/ARCHITECTURE.md: identical, or the first difference at a top-2 logit gap
under 2e-3 in a's run). Prints the count of identical / excused / differing sequences.
"""
from __future__ import annotations

import argparse

import torch

from gpu_stage.attention import cpu_decode_kernel
from gpu_stage.attention.metadata import build_metadata
from gpu_stage.kv.cache import KvCache
from gpu_stage.loaders import load_model_source
from gpu_stage.model import cpu_fused
from gpu_stage.model.cpu_ops import prepare_cpu_model
from gpu_stage.runner_builder import load_model

BLOCK = 16
BLOCKS_PER_SEQ = 16
PROMPTS = [
    "The tallest mountain in Europe is",
    "import math\n\ndef area(r):\n",
    "<|im_start|>user\nName a red fruit.<|im_end|>\n<|im_start|>assistant\n",
    "In the winter of 1812, the army",
    "Der Hund ist",
    "List three prime numbers:",
    "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "The quick brown fox",
]


def generate(model, kv: KvCache, prompts: list[list[int]], new_tokens: int) -> tuple[list[list[int]], list[list[float]]]:
    """Greedy tokens of every prompt, and each step's top-2 logit gap."""
    tables = [list(range(1 + i * BLOCKS_PER_SEQ, 1 + (i + 1) * BLOCKS_PER_SEQ)) for i in range(len(prompts))]
    out, gaps = [[] for _ in prompts], [[] for _ in prompts]
    query_lens, seq_lens = [len(p) for p in prompts], [len(p) for p in prompts]
    ids = torch.tensor([t for p in prompts for t in p])
    for _ in range(new_tokens):
        cu = torch.tensor(query_lens).cumsum(0)
        rows = (cu - 1).tolist()
        meta = build_metadata(query_lens, seq_lens, tables, BLOCK, "cpu", rows)
        with torch.inference_mode():
            logits = model(ids, meta.positions, kv, meta, torch.tensor(rows))
        top = logits.topk(2, dim=-1)
        for i in range(len(prompts)):
            out[i].append(int(top.indices[i, 0]))
            gaps[i].append(float(top.values[i, 0] - top.values[i, 1]))
        ids = top.indices[:, 0].clone()
        query_lens = [1] * len(prompts)
        seq_lens = [n + 1 for n in seq_lens]
    return out, gaps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ab", choices=("packed-layers", "decode-kernel", "fused-ops", "cpu-kernels"), default="packed-layers")
    p.add_argument("--one-row", action="store_true", help="decode each prompt alone (a: the lm_head by F.linear "
                   "over its [out, in] storage, as main ran it)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    source = load_model_source(None)
    prompts = [source.tokenizer.encode(text) for text in PROMPTS]
    old = load_model(source, torch.device("cpu"), torch.float32, "torch")
    if a.ab == "packed-layers":
        prepare_cpu_model(old, pack_layers=False)
        new = load_model(source, torch.device("cpu"), torch.float32, "torch")
    elif a.ab in ("fused-ops", "cpu-kernels"):  # CpuOps takes the fused ops when the model is prepared
        assert cpu_fused.enable(), "the fused ops did not build"
        new = load_model(source, torch.device("cpu"), torch.float32, "torch")
    else:
        new = old
    kv = KvCache(old.config, 1 + len(prompts) * BLOCKS_PER_SEQ, BLOCK, "cpu", torch.float32)
    if a.one_row:  # each prompt alone: one-row products (the lm_head's [in, out] copy in b)
        old.ops.head_one_row = None
        ref, ref_gaps = [], []
        for prompt in prompts:
            r, g = generate(old, kv, [prompt], a.new_tokens)
            ref, ref_gaps = ref + r, ref_gaps + g
    else:
        ref, ref_gaps = generate(old, kv, prompts, a.new_tokens)
    if a.ab in ("decode-kernel", "cpu-kernels"):
        assert cpu_decode_kernel.enable(), "the decode kernel did not build"
    if a.one_row:
        got = [generate(new, kv, [prompt], a.new_tokens)[0][0] for prompt in prompts]
    else:
        got, _ = generate(new, kv, prompts, a.new_tokens)
    identical = excused = differ = 0
    for i, (r, g) in enumerate(zip(ref, got)):
        if r == g:
            identical += 1
            continue
        at = next(k for k in range(len(r)) if r[k] != g[k])
        gap = ref_gaps[i][at]
        print(f"prompt {i}: first difference at token {at}, reference top-2 gap {gap:.2e}")
        excused, differ = excused + (gap < 2e-3), differ + (gap >= 2e-3)
    print(f"{len(prompts)} sequences x {a.new_tokens} tokens: identical {identical}, excused {excused}, differ {differ}")


if __name__ == "__main__":
    main()
