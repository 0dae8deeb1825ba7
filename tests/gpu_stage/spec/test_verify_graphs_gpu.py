"""Verification CUDA graphs on a GPU: a server with speculation of k tokens captures a verify graph
per bucket; a verifying step's replay equals the eager forward on its real rows and stores no pad
KV outside the null block; through the Engine (dummy:tiny, float32) greedy output with ngram and
with draft_model speculation is the output without speculation and with --enforce-eager, the
verification steps did replay graphs, and every block is returned (spec_kit.run's check)."""
from __future__ import annotations

import asyncio
import json

import pytest
import torch
from gpu_runner_helpers import make_runner, source_from_hf
from tiny_hf_models import hf_model

from gpu_stage.spec.graph_shapes import VERIFY, verify_graphs
from pipeline import Engine
from scheduler.spec.drafts import SpecDrafts
from stages.messages import ScheduledChunk
from stages.sampling import SamplingParams
from tests.pipeline.spec_kit import NGRAM, REPEATING, collect, config

pytestmark = pytest.mark.gpu

GREEDY = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
DRAFT = json.dumps({"method": "draft_model", "model": "dummy:tiny", "num_speculative_tokens": 4})


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.norm(a.double() - b.double()) / torch.linalg.norm(b.double()))


def test_verify_replay_equals_eager_on_real_rows_and_pads_store_nothing_live() -> None:
    source = source_from_hf(hf_model("llama", num_hidden_layers=2))
    runner = make_runner(source, graph_families=[verify_graphs(3)])  # max_num_seqs 8, 128 tokens, block 4
    graphs = runner.graphs
    assert graphs.families[VERIFY].sizes == [1, 2, 4, 8] and graphs.family_logits[VERIFY].shape[0] == 32
    gen = torch.Generator().manual_seed(3)
    lengths = [9, 30, 17, 4, 50]
    tables = [list(range(1 + 20 * i, 1 + 20 * i + -(-(n + 4) // 4))) for i, n in enumerate(lengths)]
    for i, n in enumerate(lengths):  # each sequence's context, eagerly
        ids = torch.randint(2, 400, (n,), generator=gen).tolist()
        runner._forward(runner.inputs.stage([ScheduledChunk(f"s{i}", ids, 0, tables[i], False)]), runner.kv_cache)
    torch.cuda.synchronize()
    live = torch.zeros(runner.kv_cache.num_blocks, dtype=torch.bool, device=runner.device)
    live[[b for t in tables for b in t]] = True
    free = ~live
    free[0] = False  # the null block: the pads' scratch
    for drafts in ([3], [3, 1, 0], [2, 3, 0, 1, 3]):
        chunks = [ScheduledChunk(f"s{i}", torch.randint(2, 400, (d + 1,), generator=gen).tolist(), lengths[i],
                                 tables[i], True, d) for i, d in enumerate(drafts)]
        n = sum(d + 1 for d in drafts)
        kv_before = runner.kv_cache.kv.clone()
        eager = runner._forward(runner.inputs.stage(chunks), runner.kv_cache)[:n].clone()
        kv_eager = runner.kv_cache.kv.clone()
        runner.kv_cache.kv.copy_(kv_before)
        shape = graphs.shape_for(chunks)
        assert shape is not None and shape.family == VERIFY
        assert shape.num_seqs >= len(drafts) and shape.num_tokens == 4 * shape.num_seqs
        runner.inputs.stage(chunks, shape=shape)
        graph = graphs.replay(shape)[:n].clone()
        torch.cuda.synchronize()
        assert _rel(graph, eager) < 1e-5, drafts
        assert torch.equal(runner.kv_cache.kv[free], kv_before[free])  # no pad stored into a block a sequence may get
        assert torch.allclose(runner.kv_cache.kv[live], kv_eager[live], atol=1e-5)  # the rows' own KV: the eager step's


def _run(spec: str | None, **kw) -> tuple[list[list[int]], int, object]:
    """REPEATING's greedy replies through an Engine on the GPU (float32) -> (token ids, verify-graph
    replays, draft counters); every block returned at the end."""
    cfg = config(spec, device="cuda", dtype="float32", **kw)

    async def main():
        async with Engine(cfg) as engine:
            graphs = engine.built.runner.graphs
            replays = []
            if graphs is not None:
                original = graphs.replay

                def counting(shape):
                    replays.append(shape)
                    return original(shape)

                graphs.replay = counting
            replies = await asyncio.gather(*[collect(engine, p, GREEDY) for p in REPEATING])
            scheduler = engine.built.scheduler
            scheduler.check()
            assert scheduler.stats().num_used_blocks == 0 and scheduler.shadow.num_reserved == 0
            counters = drafts.counters if (drafts := scheduler.hooks.get(SpecDrafts)) else None
            return [r.token_ids for r in replies], sum(s.family == VERIFY for s in replays), counters

    return asyncio.run(main())


@pytest.mark.parametrize("spec", [NGRAM, DRAFT], ids=["ngram", "draft_model"])
def test_greedy_with_verify_graphs_equals_eager_and_no_speculation(spec: str) -> None:
    plain, plain_verify, _ = _run(None)
    graphs, verify_replays, counters = _run(spec)
    eager, _, _ = _run(spec, enforce_eager=True)
    assert plain_verify == 0
    assert verify_replays > 0 and counters.num_accepted_tokens > 0  # verification ran in graphs, and accepted
    assert graphs == plain
    assert eager == plain
