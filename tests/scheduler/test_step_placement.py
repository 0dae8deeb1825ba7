"""StepPlacement on its own, built from explicit collaborators (no Scheduler): it works only on
what it is given (the block tables, the shadow, the policy, the tiers, and with each call the
request table it places into and takes from) and counts what it does; and the Scheduler's own
shares those very collaborators but keeps its requests, handing them to each call."""
from __future__ import annotations

from scheduler.config import SchedulerConfig
from scheduler.kv_manager import KVManager
from scheduler.kv_tiers.no_tiers import NoTiers
from scheduler.policy import FcfsPolicy
from scheduler.predictor import OutputLengthPredictor
from scheduler.request_state import RequestState, RequestStatus
from scheduler.request_table import RequestTable
from scheduler.scheduler import Scheduler
from scheduler.shadow import ShadowAdmission
from scheduler.step_builder import StepBuilder
from scheduler.step_placement import StepPlacement
from test_scheduler import make_req


class RecordingTiers(NoTiers):
    """Tiers off, recording the calls the placement makes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def prefetch(self, req: RequestState, device_hits: list[int]) -> bool:
        self.calls.append(("prefetch", req.request_id))
        return False

    def release(self, req: RequestState) -> None:
        self.calls.append(("release", req.request_id))


def make_placement(num_blocks: int = 5) -> tuple[StepPlacement, RequestTable, RecordingTiers]:
    config = SchedulerConfig(num_blocks=num_blocks, block_size=4, max_num_seqs=4, max_num_batched_tokens=32,
                             policy="fcfs", shadow=False)
    kv = KVManager(config)
    tiers = RecordingTiers()
    shadow = ShadowAdmission(config, kv, OutputLengthPredictor(config.prior_output_tokens))
    return StepPlacement(config, kv, shadow, FcfsPolicy(config), tiers), RequestTable(), tiers


def queued(place: StepPlacement, table: RequestTable, rid: str, num: int, seq: int) -> RequestState:
    req = RequestState(make_req(rid, num), seq)
    table.add(req)
    place.queue(req, step_id=0)
    return req


def test_admission_moves_the_request_between_the_queues_it_was_given() -> None:
    place, table, tiers = make_placement()
    running, waiting = table.running, table.waiting
    a = queued(place, table, "a", 6, 0)
    step = StepBuilder(0, 32)
    assert place.try_admit(a, step, table)
    assert running == [a] and not waiting and a.status is RequestStatus.RUNNING
    assert len(a.block_ids) == 2 and [c.request_id for c in step.chunks] == ["a"]
    assert tiers.calls == [("prefetch", "a"), ("release", "a")]
    assert place.num_admitted_by_lane == {"short": 1, "long": 0}


def test_short_of_blocks_the_newest_is_preempted_back_to_the_front_of_the_queue() -> None:
    place, table, tiers = make_placement(num_blocks=5)  # 4 usable blocks of 4 tokens
    running, waiting = table.running, table.waiting
    a, b = queued(place, table, "a", 8, 0), queued(place, table, "b", 7, 1)
    step = StepBuilder(0, 32)
    assert place.try_admit(a, step, table) and place.try_admit(b, step, table)
    for req in (a, b):  # their step is done: a lacks its 9th token, b its 8th
        req.in_flight.clear()
        req.in_flight_step, req.num_in_flight_tokens = None, 0
        req.num_computed_tokens = req.num_tokens
        req.all_token_ids.append(7)
    step = StepBuilder(1, 32)
    place.schedule_running(a, step, table)  # a's 9th token needs a 3rd block: none free, b goes
    assert running == [a] and list(waiting) == [b] and b.status is RequestStatus.PREEMPTED
    assert b.block_ids == [] and b.num_computed_tokens == 0 and place.num_preemptions == 1
    assert step.preempted_ids == {"b"} and [c.request_id for c in step.chunks] == ["a"]
    assert tiers.calls[-1] == ("prefetch", "b")  # queued again, shadowed again


def test_the_scheduler_shares_its_collaborators_but_hands_its_requests_to_each_call() -> None:
    s = Scheduler(SchedulerConfig(num_blocks=16, block_size=4))
    for part in (s.placement, s.results):
        assert part.kv is s.kv and part.shadow is s.shadow and part.tiers is s.tiers
    assert s.placement.policy is s.policy and s.results.predictor is s.predictor and s.results.hooks is s.hooks
    assert s.requests is s.table.requests and s.running is s.table.running and s.waiting is s.table.waiting
    # The placement holds no requests of its own: it admits into whichever table it is handed.
    other = RequestTable()
    req = RequestState(make_req("x", 6), 0)
    other.add(req)
    s.placement.queue(req, step_id=0)
    assert s.placement.try_admit(req, StepBuilder(0, 32), other)
    assert other.running == [req] and not other.waiting and not s.running and not s.requests
