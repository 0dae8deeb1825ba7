"""lab.host_overhead: the micro-benchmark runs the real scheduler, emitter and framing end to end."""
from __future__ import annotations

import json

from lab.host_overhead import Harness, bench_decode, bench_e2e, load_tokenizer, main


def test_e2e_runs_every_request_to_its_last_frame() -> None:
    tok = load_tokenizer("dummy")
    res = bench_e2e(tok, 3, context=40, max_tokens=64)
    assert res["total_ms"] > 0 and res["num_steps"] >= 64
    h = Harness(tok, 2, context=40, max_tokens=5)
    for req in h.requests:
        assert h.sched.add_request(req) is None
    t = {"add": 0, "schedule": 0, "update": 0, "emit": 0, "frame": 0}
    while h.sched.has_work():
        h.step(t)
    assert all(e.finished and e.num_output_tokens == 5 for e in h.emitters.values())
    assert sorted(h.num_sampled.values()) == [5, 5] and all(n > 0 for n in h.frames.values())


def test_decode_reports_per_request_costs_and_writes_json_only_when_asked(tmp_path, capsys) -> None:
    per = bench_decode(load_tokenizer("dummy"), 4, context=40, steps=5)
    assert set(per) == {"schedule", "update", "emit", "frame", "sched_total", "emit_total"}
    assert all(v > 0 for v in per.values())
    out = tmp_path / "r.json"
    assert main(["--tokenizer", "dummy", "--batch", "2", "--context", "32", "--steps", "3", "--repeat", "1"]) == 0
    assert not out.exists()
    assert main(["--tokenizer", "dummy", "--batch", "1", "2", "--context", "32", "--steps", "3",
                 "--repeat", "1", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["batch"] for r in rows] == [1, 2] and "total_ms" in rows[1]["e2e_ms_per_request"]
    assert "e2e ms" in capsys.readouterr().out
