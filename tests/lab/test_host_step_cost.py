"""lab.host_step_cost: per-step host costs of the real scheduler and emitter, at a tiny size."""
from __future__ import annotations

import json

from lab.host_overhead import load_tokenizer
from lab.host_step_cost import PHASES, CacheEvictor, StepHarness, main, measure


def test_the_harness_keeps_the_stages_pipeline_and_every_sequence_decodes() -> None:
    tok = load_tokenizer("dummy")
    for async_on, depth in ((False, 1), (True, 2)):
        h = StepHarness(tok, 3, context=40, max_tokens=30, async_scheduling=async_on)
        h.prefill()
        for _ in range(5):
            t = h.step()
            assert t["num_decodes"] == 3 and all(t[p] > 0 for p in PHASES)
            assert len(h.in_flight) == depth  # async: the step built ahead is in flight too
        assert all(s.trace.host_ns["emit"] > 0 for s, _ in h.streams)
        if async_on:
            assert h.sched.num_decodes_ahead > 0


def test_rows_are_positive_and_the_digest_is_deterministic() -> None:
    tok = load_tokenizer("dummy")
    a = measure(tok, 2, context=48, steps=6, warmup=2, repeat=2, async_scheduling=True)
    b = measure(tok, 2, context=48, steps=6, warmup=2, repeat=1, async_scheduling=True)
    for phase in PHASES:
        assert a[phase]["us_per_step"] > 0 and a[phase]["us_per_step_mean"] > 0
    assert abs(a["update"]["us_per_seq"] - a["update"]["us_per_step"] / 2) < 0.01
    assert a["emit"]["us_per_token"] > 0 and a["host_us_per_step"] > 0
    c = measure(tok, 2, context=48, steps=6, warmup=2, repeat=2, async_scheduling=True)
    assert a["output_sha256"] == c["output_sha256"] != b["output_sha256"]


def test_main_prints_json_and_writes_it_when_asked(tmp_path, capsys) -> None:
    out = tmp_path / "r.json"
    assert main(["--tokenizer", "dummy", "--seqs", "1", "2", "--context", "32", "--steps", "3",
                 "--warmup", "1", "--repeat", "1", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    assert [(r["num_seqs"], r["async_scheduling"]) for r in printed["rows"]] == [
        (1, False), (1, True), (2, False), (2, True)]


def test_eviction_streams_the_buffer_and_leaves_the_steps_unchanged() -> None:
    evict = CacheEvictor(1)
    evict._src[::4096] = b"\x01" * len(evict._src[::4096])
    evict()
    assert evict._dst == evict._src  # one MiB went through the caches
    CacheEvictor(0)()  # off: nothing to stream
    tok = load_tokenizer("dummy")
    cold = measure(tok, 2, context=48, steps=6, warmup=2, repeat=1, async_scheduling=False, evict=evict)
    hot = measure(tok, 2, context=48, steps=6, warmup=2, repeat=1, async_scheduling=False)
    assert cold["output_sha256"] == hot["output_sha256"]  # the same steps, only colder
