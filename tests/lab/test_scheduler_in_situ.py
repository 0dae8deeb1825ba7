"""lab.scheduler_in_situ on dummy:tiny: every update() of the run is timed and summarized."""
from __future__ import annotations

import gc
import json

from lab.scheduler_in_situ import main


def test_it_times_the_updates_of_an_embedded_run(capsys):
    assert main(["--model", "dummy:tiny", "--gc-freeze"]) == 0
    assert gc.get_freeze_count() == 0  # the heap is unfrozen again: the rest of the process collects
    out = json.loads(capsys.readouterr().out)
    # 16 prompts x 64 tokens: at least 64 steps, most of them decodes only.
    assert out["update_calls"] >= 64 and out["num_decode_only_steps"] > out["update_calls"] // 2
    assert 0 < out["update_us_per_request_decode_steps"] < out["update_us_median_per_call"] * 8
