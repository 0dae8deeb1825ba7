"""lab.tokenizer_cost on the default tokenizer, small sizes: every call timed, the same ids."""
from __future__ import annotations

import json

from lab.tokenizer_cost import main


def test_both_calls_are_timed_and_the_lock_probe_counts(capsys):
    # A busy machine may not schedule the main thread during a short call at all: grow the long
    # text until the call outlasts that (a call that held the lock would stay at 0 at any length).
    for long_tokens in (2000, 8000, 32000):
        assert main(["--tokens", "50", "--prompts", "3", "--long-tokens", str(long_tokens)]) == 0
        out = json.loads(capsys.readouterr().out)
        if out["encode_batch_fast_main_thread_iterations"] > 0:
            break
    assert out["encode_cpu_ms"] > 0 and out["encode_batch_fast_cpu_ms"] > 0
    assert out["bpe_tokenizer_one_line_cpu_ms"] > 0 and out["bpe_tokenizer_lines_cpu_ms"] > 0
    # encode() holds the interpreter lock: on a text this short it may finish inside one switch
    # interval, leaving the main thread no iteration at all. encode_batch_fast releases it.
    assert out["encode_main_thread_iterations"] >= 0
    assert out["encode_batch_fast_main_thread_iterations"] > 0


def test_lines_keep_the_words():
    from lab.tokenizer_cost import _in_lines
    assert _in_lines("a b c d e", words_per_line=2) == "a b\nc d\ne"
