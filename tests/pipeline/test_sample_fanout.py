"""fan_out: n=1 is the request unchanged; n > 1 gives ids <rid>-<i>, sample 0 as leader, a trace
each (the request's edges so far) and seed + i, wrapping past the top of the 64-bit range."""
from __future__ import annotations

from protocol.requests.field_checks import UINT64_MAX
from pipeline.samples import fan_out, sample_seed, split_prompts
from stages.sampling import SamplingParams
from stages.trace import RequestTrace


def test_sample_seed():
    assert sample_seed(None, 3) is None
    assert [sample_seed(7, i) for i in range(3)] == [7, 8, 9]
    assert [sample_seed(UINT64_MAX - 1, i) for i in range(4)] == [UINT64_MAX - 1, UINT64_MAX, 0, 1]
    assert sample_seed(-(2**63), 1) == -(2**63) + 1


def test_n1_is_the_request_itself():
    trace, params = RequestTrace("r"), SamplingParams(seed=5)
    [only] = fan_out("r", params, trace, 1)
    assert (only.request_id, only.params, only.trace, only.leader_id) == ("r", params, trace, None)
    assert trace.request_id == "r" and "sample_index" not in trace.info


def test_n3_samples():
    trace = RequestTrace("r")
    trace.mark("received", 10)
    trace.mark("tokenized", 20)
    trace.add_host("parse", 5)
    trace.info["num_prompt_tokens"] = 4
    samples = fan_out("r", SamplingParams(seed=UINT64_MAX, temperature=0.5), trace, 3)
    assert [s.request_id for s in samples] == ["r-0", "r-1", "r-2"]
    assert [s.leader_id for s in samples] == [None, "r-0", "r-0"]
    assert [s.params.seed for s in samples] == [UINT64_MAX, 0, 1]
    assert all(s.params.temperature == 0.5 for s in samples)
    assert samples[0].trace is trace and trace.request_id == "r-0"
    for i, s in enumerate(samples):
        assert s.trace.request_id == f"r-{i}" and s.trace.info["sample_index"] == i
        assert s.trace.marks_ns == {"received": 10, "tokenized": 20} and s.trace.info["num_prompt_tokens"] == 4
    # The shared parse/tokenize work is counted once, on sample 0; later marks are each sample's own.
    assert [s.trace.host_ns for s in samples] == [{"parse": 5}, {}, {}]
    samples[1].trace.mark("queued", 30)
    assert "queued" not in samples[2].trace.marks_ns
    unseeded = fan_out("u", SamplingParams(), RequestTrace("u"), 2)
    assert [s.params.seed for s in unseeded] == [None, None]


def test_split_prompts_one_prompt_is_the_request_and_a_batch_gives_a_request_per_prompt():
    trace = RequestTrace("r")
    assert split_prompts("r", trace, [[1, 2]]) == [("r", trace)] and trace.request_id == "r"
    trace.mark("tokenized", 20)
    trace.add_host("tokenize", 7)
    parts = split_prompts("r", trace, [[1, 2], [3], [4, 5, 6]])
    assert [rid for rid, _ in parts] == ["r-0", "r-1", "r-2"]
    assert parts[0][1] is trace and trace.request_id == "r-0"
    for i, (rid, t) in enumerate(parts):
        assert t.request_id == rid and t.marks_ns == {"tokenized": 20}
        assert (t.info["prompt_index"], t.info["num_prompt_tokens"]) == (i, [2, 1, 3][i])
    assert parts[1][1].host_ns == {}  # the tokenizing work stays on the first prompt's trace
    # Then each prompt's samples: <rid>-<i>-<j>
    assert [s.request_id for s in fan_out("r-1", SamplingParams(), parts[1][1], 2)] == ["r-1-0", "r-1-1"]
