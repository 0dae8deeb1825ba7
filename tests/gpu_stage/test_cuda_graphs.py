"""CUDA graphs (GPU only): a replay equals the eager forward on the real rows, for decode buckets
with padding, for padded single-sequence prefills with cached context and for padded mixed steps
(prefill chunks beside decodes); steps through execute() and through the scheduler give the same
tokens with graphs and with --enforce-eager."""
from __future__ import annotations

import pytest
import torch
from gpu_runner_helpers import greedy, make_runner, serve, source_from_hf
from tiny_hf_models import hf_model

from stages.messages import ScheduledChunk

pytestmark = pytest.mark.gpu


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.norm(a.double() - b.double()) / torch.linalg.norm(b.double()))


@pytest.fixture(scope="module")
def source():
    return source_from_hf(hf_model("llama", num_hidden_layers=2))


def _eager_and_graph(runner, chunks):
    staged = runner.inputs.stage(chunks)
    eager = runner._forward(staged, runner.kv_cache).clone()
    shape = runner.graphs.shape_for(chunks)
    assert shape is not None
    runner.inputs.stage(chunks, shape=shape)
    graph = runner.graphs.replay(shape).clone()
    return eager, graph, shape


def test_decode_replay_equals_eager_on_real_rows(source) -> None:
    runner = make_runner(source)
    assert runner.graphs is not None and 8 in runner.graphs.decode_sizes
    gen = torch.Generator().manual_seed(0)
    lengths = [3, 17, 40, 9, 64, 1, 30, 100]
    tables, prefill = [], []
    for i, n in enumerate(lengths):  # cache each sequence's context first (eager prefill)
        tables.append(list(range(1 + 30 * i, 1 + 30 * i + -(-(n + 1) // 4))))
        prefill.append(ScheduledChunk(f"s{i}", torch.randint(2, 400, (n,), generator=gen).tolist(), 0, tables[-1], True))
    for i in range(0, len(prefill), 2):
        staged = runner.inputs.stage(prefill[i : i + 2])
        runner._forward(staged, runner.kv_cache)
    for num_seqs in (1, 3, 5, 8):
        chunks = [ScheduledChunk(f"s{i}", [7 + i], lengths[i], tables[i], True) for i in range(num_seqs)]
        eager, graph, shape = _eager_and_graph(runner, chunks)
        assert shape.decode and shape.num_seqs >= num_seqs
        assert _rel(graph[:num_seqs], eager[:num_seqs]) < 1e-5


def test_prefill_replay_equals_eager_with_cached_context(source) -> None:
    runner = make_runner(source)
    assert runner.graphs.prefill_sizes == [32, 64, 128]
    table = list(range(1, 40))
    ids = torch.randint(2, 400, (70,), generator=torch.Generator().manual_seed(1)).tolist()
    runner._forward(runner.inputs.stage([ScheduledChunk("p", ids[:50], 0, table, False)]), runner.kv_cache)
    for start, n in ((50, 20), (50, 1), (0, 33)):  # a chunk after a prefix, one token, a fresh prompt
        chunks = [ScheduledChunk("p", ids[start : start + n], start, table, True)]
        eager, graph, shape = _eager_and_graph(runner, chunks)
        # One new token after a prefix is a decode step: it takes the decode graph.
        assert shape.decode if n == 1 else (not shape.decode and shape.num_tokens >= n)
        assert _rel(graph[:1], eager[:1]) < 1e-5


def test_mixed_replay_equals_eager_on_real_rows(source) -> None:
    runner = make_runner(source, mixed_graph_tokens=(48, 96), mixed_graph_seqs=(4, 8))
    assert runner.graphs.mixed_sizes == [(48, 4), (48, 8), (96, 4), (96, 8)]
    gen = torch.Generator().manual_seed(2)
    tables = [list(range(1 + 30 * i, 31 + 30 * i)) for i in range(5)]
    ids = [torch.randint(2, 400, (60,), generator=gen).tolist() for _ in range(5)]
    for i in range(5):  # cached context: 20 tokens of each
        runner._forward(runner.inputs.stage([ScheduledChunk(f"s{i}", ids[i][:20], 0, tables[i], False)]),
                        runner.kv_cache)
    cases = [  # a chunk after a prefix beside two decodes; a fresh prompt and a chunk; five sequences
        [ScheduledChunk("s0", ids[0][20:50], 20, tables[0], True), ScheduledChunk("s1", ids[1][20:21], 20, tables[1], True),
         ScheduledChunk("s2", ids[2][20:21], 20, tables[2], True)],
        [ScheduledChunk("s3", ids[3][20:60], 20, tables[3], True), ScheduledChunk("s4", ids[4][:40], 0, tables[4], True)],
        [ScheduledChunk(f"s{i}", ids[i][20:20 + 3 * (i + 1)], 20, tables[i], True) for i in range(5)],
    ]
    for chunks in cases:
        eager, graph, shape = _eager_and_graph(runner, chunks)
        n = len(chunks)
        assert shape.mixed and shape.num_seqs >= n and shape.num_tokens >= sum(len(c.token_ids) for c in chunks)
        assert _rel(graph[:n], eager) < 1e-5  # every chunk is sampled: eager's rows are the sequences'


def test_mixed_graph_serves_fresh_prompts_of_any_split(source) -> None:
    """A bucket of >= 512 tokens is captured from all-fresh inputs: its plan must still be the
    general kernel, not the fresh-prefill SDPA path that slices by the capture's own lengths."""
    runner = make_runner(source, max_num_batched_tokens=640, max_model_len=1024,
                         mixed_graph_tokens=(640,), mixed_graph_seqs=(4,))
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(2, 400, (600,), generator=gen).tolist()
    for lengths in ((600,), (300, 200)):
        start, chunks = 0, []
        for i, n in enumerate(lengths):
            chunks.append(ScheduledChunk(f"f{i}", ids[start:start + n], 0, list(range(1 + 160 * i, 1 + 160 * i + n // 4 + 1)), True))
            start += n
        eager, graph, shape = _eager_and_graph(runner, chunks)
        assert shape.mixed and shape.num_tokens == 640
        assert _rel(graph[:len(lengths)], eager) < 1e-5


def test_scheduled_steps_with_mixed_graphs_equal_enforce_eager(source) -> None:
    """The scheduler's own mixes (chunked prefills joining running decodes, async scheduling):
    the same tokens replayed as mixed graphs as run eagerly."""
    from stages.sampling import SamplingParams

    gen = torch.Generator().manual_seed(4)
    reqs = [(f"r{i}", torch.randint(2, 400, (n,), generator=gen).tolist(),
             SamplingParams(max_tokens=12, temperature=0.0 if i % 2 else 0.8, seed=i, ignore_eos=True))
            for i, n in enumerate([5, 31, 12, 47, 3, 20])]
    runner = make_runner(source, mixed_graph_tokens=(16, 24), mixed_graph_seqs=(4, 8))
    shapes = []
    replay = runner.graphs.replay
    runner.graphs.replay = lambda shape: shapes.append(shape) or replay(shape)
    graphs, _ = serve(runner, reqs, async_scheduling=True)
    eager, _ = serve(make_runner(source, enforce_eager=True), reqs, async_scheduling=True)
    assert sum(s.mixed for s in shapes) >= 5
    assert graphs == eager


def test_execute_with_graphs_equals_enforce_eager(source) -> None:
    prompts = [list(range(2, 2 + n)) for n in (5, 31, 90)]
    results = {}
    for eager in (False, True):
        runner = make_runner(source, enforce_eager=eager)
        assert (runner.graphs is None) == eager
        results[eager] = [greedy(runner, f"r{i}", p, 12) for i, p in enumerate(prompts)]
    assert results[False] == results[True]


def test_memory_profile_sizes_the_pool(source) -> None:
    runner = make_runner(source, num_blocks=None, gpu_memory_utilization=0.3, enforce_eager=True)
    free, total = torch.cuda.mem_get_info()
    assert runner.kv_cache.num_blocks > 1000
    assert runner.kv_cache.num_bytes < 0.3 * total
    assert greedy(runner, "r", list(range(2, 20)), 4, first_block=runner.kv_cache.num_blocks - 10)


def test_steps_launched_ahead_with_graphs_give_the_same_tokens(source) -> None:
    """Async scheduling on the device: decodes replayed as graphs whose input ids are filled in
    from the previous step's sampled ids (never seen by the host) give the same tokens."""
    from stages.sampling import SamplingParams

    gen = torch.Generator().manual_seed(3)
    reqs = [(f"r{i}", torch.randint(2, 400, (n,), generator=gen).tolist(),
             SamplingParams(max_tokens=20, temperature=0.0 if i % 2 else 0.8, seed=i, ignore_eos=True))
            for i, n in enumerate([5, 31, 12, 47])]
    ahead, num_pending = serve(make_runner(source), reqs, async_scheduling=True)
    plain, _ = serve(make_runner(source), reqs, async_scheduling=False)
    assert num_pending > 20
    assert ahead == plain
