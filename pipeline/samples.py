"""Fan-out of one request with n > 1 into n engine requests (samples) that share its prompt.

Sample i gets the id `<request_id>-<i>` and its own trace (a copy of the request's edges so far:
each sample is queued, scheduled and timed like a request of its own; the parse and tokenize work,
done once, stays on sample 0's). With a seed, sample i samples with seed + i, so that choice i is
exactly the reply to the same request with n=1 and that seed. Sample 0 leads: the scheduler lets
the others share its prompt blocks (scheduler/sample_group.py). n=1 is the request itself, unchanged.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ingress.field_checks import UINT64_MAX
from stages.sampling import SamplingParams
from stages.trace import RequestTrace


@dataclass(slots=True)
class Sample:
    request_id: str
    params: SamplingParams
    trace: RequestTrace
    leader_id: str | None  # None: sample 0 (or n=1)


def sample_seed(seed: int | None, index: int) -> int | None:
    """seed + index; past the top of the 64-bit seed range it wraps around to 0."""
    if seed is None:
        return None
    seed += index
    return seed - 2**64 if seed > UINT64_MAX else seed


def fan_out(request_id: str, params: SamplingParams, trace: RequestTrace, n: int) -> list[Sample]:
    if n == 1:
        return [Sample(request_id, params, trace, None)]
    leader_id = f"{request_id}-0"
    samples = []
    for i in range(n):
        rid = f"{request_id}-{i}"
        if i == 0:
            trace.request_id = rid
            sample_trace = trace
        else:
            sample_trace = RequestTrace(rid, marks_ns=dict(trace.marks_ns), info=dict(trace.info))
        sample_trace.info["sample_index"] = i
        sample_params = params if params.seed is None else dataclasses.replace(
            params, seed=sample_seed(params.seed, i))
        samples.append(Sample(rid, sample_params, sample_trace, None if i == 0 else leader_id))
    return samples
