"""StepResults on its own, built from explicit collaborators (no Scheduler): a result advances the
requests it names and appends their tokens; a request that ends is retired once, out of the table
it was handed, its blocks back in the pool, its id kept for the next batch; a stale result is dropped."""
from __future__ import annotations

from scheduler.config import SchedulerConfig
from scheduler.kv_manager import KVManager
from scheduler.kv_tiers.no_tiers import NoTiers
from scheduler.predictor import OutputLengthPredictor
from scheduler.request_state import RequestState, RequestStatus
from scheduler.request_table import RequestTable
from scheduler.shadow import ShadowAdmission
from scheduler.step_builder import StepBuilder
from scheduler.step_results import StepResults
from stages.messages import SampledToken, StepResult
from test_scheduler import EOS, make_req


def running_request(kv: KVManager, table: RequestTable, rid: str, max_tokens: int) -> RequestState:
    req = RequestState(make_req(rid, 6, max_tokens=max_tokens), len(table.requests))
    kv.admit(req, [], req.num_tokens)
    table.add(req)
    table.admit(req)
    return req


def test_apply_then_retire_on_the_collaborators_it_was_given() -> None:
    config = SchedulerConfig(num_blocks=8, block_size=4, eos_token_ids=frozenset({EOS}), shadow=False)
    kv = KVManager(config)
    predictor = OutputLengthPredictor(config.prior_output_tokens)
    table = RequestTable()
    requests, running = table.requests, table.running
    results = StepResults(config, kv, ShadowAdmission(config, kv, predictor), NoTiers(), predictor)
    a = running_request(kv, table, "a", max_tokens=1)
    b = running_request(kv, table, "b", max_tokens=3)
    step = StepBuilder(0, 32)
    step.add(a, 6)
    step.add(b, 6)
    for req in (a, b):
        req.was_scheduled = True
    batch = step.build([])
    events = results.apply(batch, StepResult(0, [SampledToken("a", 11), SampledToken("b", 12)]), table)
    assert [(e.request_id, e.token_ids, e.finish_reason) for e in events] == [("a", [11], "length"),
                                                                              ("b", [12], None)]
    assert running == [b] and list(requests) == ["b"] and a.status is RequestStatus.FINISHED
    assert b.num_computed_tokens == 6 and b.all_token_ids[-1] == 12
    assert kv.pool.num_used == len(b.block_ids)  # a's blocks are back
    assert results.take_finished_ids() == ["a"] and results.take_finished_ids() == []
    assert results.apply(batch, StepResult(0, [SampledToken("b", 13)]), table) == []  # stale: dropped
    results.retire(b, "abort", None, table)
    assert not running and not requests and kv.pool.num_used == 0
    assert results.event(b, [], None).finish_reason == "abort"
