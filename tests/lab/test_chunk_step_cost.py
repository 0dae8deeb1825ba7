"""lab.chunk_step_cost: both kinds of step are timed, and a chunk step holds the decodes and one chunk."""
from __future__ import annotations

from lab.chunk_step_cost import main, measure


def test_measure_times_decode_steps_and_each_chunk_step_of_every_prompt() -> None:
    out = measure(decodes=2, prompt_len=100, chunk=32, prompts=2, evict_mb=0)
    assert out["decode"]["steps"] == 2 * 3
    assert out["chunk"]["steps"] == 2 * 4  # 100 tokens in chunks of 32: 4 steps a prompt
    for kind in ("decode", "chunk"):
        assert out[kind]["schedule_us"] > 0 and out[kind]["update_us"] > 0
    # Every chunk step has the 2 decodes beside at most 32 of the prompt's tokens (figures are
    # rounded to 0.1 us).
    assert 0 < out["chunk_share_by_tokens_us"] <= out["chunk"]["total_us"] * 32 / 34 + 0.1
    assert out["chunk_adds_us"] == round(out["chunk"]["total_us"] - out["decode"]["total_us"], 1)


def test_main_writes_the_report(tmp_path) -> None:
    path = tmp_path / "r.json"
    assert main(["--decodes", "1", "--prompt-len", "40", "--chunk", "16", "--prompts", "1", "--evict-mb", "0",
                 "--out", str(path)]) == 0
    assert '"chunk_tokens": 16' in path.read_text()
