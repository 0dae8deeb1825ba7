"""One scheduler step against a fake GPU that samples token 7 for every chunk that samples, with
every invariant checked before and after: the helper the scheduler tests share."""
from __future__ import annotations

from scheduler.scheduler import Scheduler
from stages.messages import SampledToken, StepBatch, StepResult


def run_step(s: Scheduler) -> StepBatch:
    batch = s.schedule()
    s.check()
    assert batch is not None
    sampled = [SampledToken(c.request_id, 7) for c in batch.chunks if c.sample]
    s.update(batch, StepResult(batch.step_id, sampled))
    s.check()
    return batch
