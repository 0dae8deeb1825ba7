"""Teacher-forced accuracy of a KV format: one fixed text through the paged cache in chunks, each
format against float32 KV on the same model (bench/kv_accuracy.py reports it).

Every chunk runs the real model over its own paged pool in the format (the torch backend, the CPU
path): its K/V are stored quantized and every read, the chunk's own keys included, dequantizes
them, so chunks after the first attend over a quantized context. The reference pool is float32.
Per position: the negative log-likelihood of the next token, KL(reference || format) of the
next-token distributions, and whether the argmaxes agree.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from gpu_stage.attention.metadata import build_metadata
from gpu_stage.kv.cache import KvCache
from gpu_stage.kv.format import KvFormat
from gpu_stage.model.interface import CausalLM

REFERENCE = "float32"


@dataclass
class Totals:
    """Sums over the positions that have a next token (num_positions of them)."""

    nll: float = 0.0
    kl: float = 0.0
    top1_agree: int = 0
    num_positions: int = 0
    max_kl: float = 0.0

    def as_json(self, reference: "Totals | None") -> dict:
        n = max(1, self.num_positions)
        ppl = float(torch.tensor(self.nll / n).exp())
        out = {"perplexity": ppl, "num_positions": self.num_positions}
        if reference is not None:
            ref_ppl = float(torch.tensor(reference.nll / max(1, reference.num_positions)).exp())
            out.update(perplexity_rel_change=ppl / ref_ppl - 1, mean_kl=self.kl / n, max_kl=self.max_kl,
                       top1_agreement=self.top1_agree / n)
        return out


def teacher_forced(model: CausalLM, token_ids: list[int], formats: list[str], chunk: int,
                   block_size: int = 16) -> dict[str, Totals]:
    """Run `token_ids` in chunks of `chunk` through one pool per format (REFERENCE first)."""
    config = model.config
    num_tokens = len(token_ids)
    num_blocks = -(-num_tokens // block_size) + 1
    table = list(range(1, num_blocks))  # block 0 is the null block
    names = [REFERENCE] + [f for f in formats if f != REFERENCE]
    pools = {f: KvCache(config, num_blocks, block_size, "cpu", torch.float32, KvFormat(f)) for f in names}
    totals = {f: Totals() for f in names}
    ids = torch.tensor(token_ids)
    for start in range(0, num_tokens, chunk):
        end = min(num_tokens, start + chunk)
        targets = ids[start + 1:end + 1]  # the next token of each position that has one
        rows = torch.arange(end - start)
        ref_logp = None
        for name in names:
            meta = build_metadata([end - start], [end], [table], block_size, "cpu")
            logits = model(ids[start:end], meta.positions, pools[name], meta, rows)  # [n, vocab] float32
            logp = torch.log_softmax(logits.double(), dim=-1)[: targets.shape[0]]
            t = totals[name]
            t.nll -= float(logp.gather(1, targets[:, None]).sum())
            t.num_positions += targets.shape[0]
            if ref_logp is None:
                ref_logp = logp
                continue
            kl = (ref_logp.exp() * (ref_logp - logp)).sum(-1)  # [n]
            t.kl += float(kl.sum())
            t.max_kl = max(t.max_kl, float(kl.max())) if kl.numel() else t.max_kl
            t.top1_agree += int((logp.argmax(-1) == ref_logp.argmax(-1)).sum())
    return totals
