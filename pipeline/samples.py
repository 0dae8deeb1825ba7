"""Fan-out of one request into engine requests: a batch's prompts, then each prompt's n samples.

A batch (completions with a list of prompts) makes prompt i the request `<request_id>-<i>` with a
trace of its own (a copy of the request's edges so far), so each is scheduled, prefix-cached and
timed like a request of its own; its samples are then `<request_id>-<i>-<j>`. One prompt keeps the
request's id. The choice index of sample j of prompt i is i * n + j, as OpenAI numbers them.

A request with n > 1 becomes n engine requests (samples) that share its prompt.

Sample i gets the id `<request_id>-<i>` and its own trace (a copy of the request's edges so far:
each sample is queued, scheduled and timed like a request of its own; the parse and tokenize work,
done once, stays on sample 0's). With a seed, sample i samples with seed + i, so that choice i is
exactly the reply to the same request with n=1 and that seed. Sample 0 leads: the scheduler lets
the others share its prompt blocks (scheduler/sample_group.py). n=1 is the request itself, unchanged.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from protocol.requests.field_checks import UINT64_MAX
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


def branch_traces(request_id: str, trace: RequestTrace, num: int, key: str) -> list[RequestTrace]:
    """The traces of `<request_id>-<i>` for i < num: the request's own (renamed) for 0, copies of its
    edges so far for the others; each with info[key] = i."""
    traces = []
    for i in range(num):
        rid = f"{request_id}-{i}"
        if i == 0:
            trace.request_id = rid
            branch = trace
        else:
            branch = RequestTrace(rid, marks_ns=dict(trace.marks_ns), info=dict(trace.info))
        branch.info[key] = i
        traces.append(branch)
    return traces


def split_prompts(request_id: str, trace: RequestTrace,
                  prompts: list[list[int]]) -> list[tuple[str, RequestTrace]]:
    """(request id, trace) of each prompt of a batch; one prompt is the request itself."""
    if len(prompts) == 1:
        return [(request_id, trace)]
    traces = branch_traces(request_id, trace, len(prompts), "prompt_index")
    for ids, prompt_trace in zip(prompts, traces):
        prompt_trace.info["num_prompt_tokens"] = len(ids)
    return [(t.request_id, t) for t in traces]


def fan_out(request_id: str, params: SamplingParams, trace: RequestTrace, n: int) -> list[Sample]:
    if n == 1:
        return [Sample(request_id, params, trace, None)]
    leader_id = f"{request_id}-0"
    samples = []
    for i, sample_trace in enumerate(branch_traces(request_id, trace, n, "sample_index")):
        sample_params = params if params.seed is None else dataclasses.replace(
            params, seed=sample_seed(params.seed, i))
        samples.append(Sample(sample_trace.request_id, sample_params, sample_trace, None if i == 0 else leader_id))
    return samples
