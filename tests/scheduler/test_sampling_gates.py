"""SamplingGates through the Scheduler: a request whose gate (its grammar's compile) is pending is
admitted and prefilled up to its last prompt token, never sampled, never blocking the queue or the
decodes of others; once the gate opens its last token is a one-token sampling chunk, and a gate that
fails holds the request until its abort. A gate open at arrival changes nothing; preemption and an
abort while held work as for any request; with no gate pending the decode fast path stays on."""
from __future__ import annotations

from concurrent.futures import Future

from test_scheduler import make_req, make_sched, run_step, shape

from stages.messages import GenerateRequest


def gated(rid: str, prompt: int, gate: Future, **kw) -> GenerateRequest:
    req = make_req(rid, prompt, **kw)
    req.sampling_gate = gate
    return req


def test_a_held_request_prefills_all_but_its_sampling_token_then_samples_when_its_gate_opens():
    s = make_sched(max_num_batched_tokens=8)
    gate = Future()
    s.add_request(gated("g", 10, gate))
    assert shape(run_step(s)[0]) == [("g", 0, 8, False)]
    assert shape(run_step(s)[0]) == [("g", 8, 1, False)]  # stops before position 9, which samples
    assert s.schedule() is None  # nothing else to do: no step, no sampling
    s.check()
    gate.set_result("compiled")
    batch, events = run_step(s)
    assert shape(batch) == [("g", 9, 1, True)] and events[0].token_ids == [1000]
    assert not s.gates.pending


def test_others_run_beside_a_held_request_and_its_wait_blocks_no_admission():
    s = make_sched(max_num_batched_tokens=64, max_num_seqs=4)
    gate = Future()
    s.add_request(make_req("a", 6, max_tokens=8))
    s.add_request(gated("g", 12, gate))
    s.add_request(make_req("b", 5, max_tokens=8))
    assert shape(run_step(s)[0]) == [("a", 0, 6, True), ("g", 0, 11, False), ("b", 0, 5, True)]
    for _ in range(3):  # decodes of a and b; g sits out (its token is held)
        assert shape(run_step(s)[0]) == [("a", 6 + _, 1, True), ("b", 5 + _, 1, True)]
    s.add_request(make_req("c", 4))  # admitted behind the held one
    assert ("c", 0, 4, True) in shape(run_step(s)[0])
    gate.set_result("compiled")
    assert ("g", 11, 1, True) in shape(run_step(s)[0])


def test_a_prompt_of_one_token_or_a_full_prefix_hit_waits_without_blocking_the_queue():
    s = make_sched(max_num_batched_tokens=64, max_num_seqs=4)
    gate = Future()
    s.add_request(gated("one", 1, gate))
    s.add_request(make_req("b", 3))
    assert shape(run_step(s)[0]) == [("b", 0, 3, True)]  # "one" has nothing to compute before sampling
    gate.set_result("compiled")
    assert ("one", 0, 1, True) in shape(run_step(s)[0])


def test_a_gate_done_at_arrival_holds_nothing_and_no_gate_keeps_the_fast_path():
    s = make_sched()
    done = Future()
    done.set_result("compiled")
    s.add_request(gated("g", 5, done))
    assert not s.gates.pending and s.requests["g"].num_held_tokens == 0
    assert shape(run_step(s)[0]) == [("g", 0, 5, True)]
    assert s._decode_fast_path and not s._gated


def test_a_failed_gate_never_opens_the_request_waits_for_its_abort():
    s = make_sched()
    gate = Future()
    s.add_request(gated("g", 5, gate))
    assert shape(run_step(s)[0]) == [("g", 0, 4, False)]
    gate.set_exception(ValueError("the grammar does not compile"))
    assert s.schedule() is None and s.requests["g"].num_held_tokens == 1  # never sampled
    s.abort("g")  # the engine's, with its 400
    assert s.schedule() is None and not s.gates.pending and s.is_idle()
    s.check()


def test_a_held_request_preempted_or_aborted():
    s = make_sched(num_blocks=6, block_size=4, max_num_batched_tokens=64)  # 5 usable blocks
    gate = Future()
    s.add_request(make_req("a", 8, max_tokens=12))
    s.add_request(gated("g", 8, gate))
    run_step(s)  # a: 8 (samples), g: 7 (held)
    while s.running[-1].request_id == "g" and s.requests["g"].num_computed_tokens:
        run_step(s)  # a grows until g, the newest, is preempted
    assert s.requests["g"].num_preemptions == 1 and s.requests["g"].num_held_tokens == 1
    s.abort("g")
    gate.set_result("compiled")
    run_step(s)
    assert not s.gates.pending and "g" not in s.requests
