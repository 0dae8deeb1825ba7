"""`ttft bench --workload multi-turn` against real `ttft serve --model dummy:tiny` processes: every turn
answered, returning turns served from the prefix cache, and a capped pool that the round-robin order
really evicts from."""
from __future__ import annotations

import argparse
import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bench.baselines.server_process import ServerProcess, free_port, start_server, ttft_serve_command
from bench.cli import add_bench_arguments
from bench.load import run_bench

BLOCK = 16  # ttft serve's default block size
SMALL = ["--workload", "multi-turn", "--conversations", "4", "--turns", "3", "--doc-len", "64",
         "--turn-len", "16", "--output-len", "8", "--vocab-size", "512", "--warmup", "1"]


def _serve(log: Path, *flags: str) -> ServerProcess:
    port = free_port()
    return start_server(ttft_serve_command("dummy:tiny", port, list(flags)), port, log, ready_timeout_s=60)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """A roomy pool, and one of 12 blocks: less than two conversations' final contexts (9 blocks each)."""
    d = tmp_path_factory.mktemp("multi-turn")
    specs = [("roomy", ("--max-model-len", "1024")), ("capped", ("--max-model-len", "160", "--num-kv-blocks", "12"))]
    with ThreadPoolExecutor(2) as pool:  # start-up is mostly imports: in parallel they cost about one
        started = dict(zip([n for n, _ in specs], pool.map(lambda s: _serve(d / f"{s[0]}.log", *s[1]), specs)))
    yield {name: server.base_url for name, server in started.items()}
    for server in started.values():
        server.stop(grace_s=20)


def bench(url: str, tmp_path: Path, *flags: str) -> dict:
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    args = parser.parse_args(["--base-url", url, *SMALL, "--result-dir", str(tmp_path), *flags])
    return asyncio.run(run_bench(args))


def test_returning_turns_hit_the_prefix_cache(servers, tmp_path, capsys):
    result = bench(servers["roomy"], tmp_path, "--concurrency", "2")
    m, mt = result["metrics"], result["multi_turn"]
    assert (m["completed"], m["failed"], m["skipped_turns"]) == (16, 0, 0)
    samples = {(s["conversation"], s["turn"]): s for s in result["samples"]}
    assert len(samples) == 16 and all(s["success"] and s["output_tokens"] == 8 for s in samples.values())
    for c in range(4):
        assert samples[(c, 0)]["cached_tokens"] == 0  # distinct documents: the opening turns are cold
        for t in range(1, 4):
            prev, cur = samples[(c, t - 1)], samples[(c, t)]
            assert cur["prompt_tokens"] == prev["prompt_tokens"] + 8 + 16  # + reply + new user tokens
            # the previous prompt's full blocks are cached; the reply's are not (a stand-in replaced it)
            assert cur["cached_tokens"] == prev["prompt_tokens"] // BLOCK * BLOCK
    assert mt["opening"]["completed"] == 4 and mt["returning"]["completed"] == 12
    assert [t["mean_cached_tokens"] for t in mt["per_turn"]] == [0, 64, 80, 112]
    assert result["working_set"] == {"tokens": 576, "max_context_tokens": 144, "block_size": 16,
                                     "quarter_tokens": 144, "quarter_blocks": 9}
    saved = json.loads(Path(result["paths"]["json"]).read_text())
    assert saved["config"]["workload"] == "multi-turn" and len(saved["samples"]) == 16
    table = Path(result["paths"]["markdown"]).read_text()
    assert "| returning | 12 |" in table and "| 3 | 4 |" in table and table in capsys.readouterr().out


def test_text_prompts_send_the_reply_text_back(servers, tmp_path):
    result = bench(servers["roomy"], tmp_path, "--prompt-format", "text", "--conversations", "2",
                   "--turns", "2", "--no-save")
    samples = {(s["conversation"], s["turn"]): s for s in result["samples"]}
    assert result["metrics"]["completed"] == 6 and result["metrics"]["failed"] == 0
    for c in range(2):
        for t in (1, 2):
            prev = samples[(c, t - 1)]["prompt_tokens"]
            # re-tokenizing prompt + reply text may change the boundary: at most the last block is lost
            assert samples[(c, t)]["cached_tokens"] >= (prev // BLOCK - 1) * BLOCK > 0


def test_round_robin_evicts_from_a_capped_pool(servers, tmp_path):
    result = bench(servers["capped"], tmp_path, "--concurrency", "1", "--no-save")
    assert result["metrics"]["completed"] == 16 and result["metrics"]["failed"] == 0
    kv = result["server_kv"]
    assert kv["pool_blocks"] <= 12
    # each conversation's next turn comes after three others' turns, which need the whole pool
    assert kv["evictions"] > 0
