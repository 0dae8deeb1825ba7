"""Sample groups: the n samples of one request (n > 1) compute their prompt once.

The samples arrive as n requests with the same prompt; sample 0 is the leader, the others name it
(`GenerateRequest.leader_id`). They share the prompt's full blocks before the one holding the last
prompt token: floor((P - 1) / B) of them. The last token is computed by every sample, because its
logits give the sample its own first token (and a block others read is never written in place).

A follower waits while its leader is running and has not computed the shared blocks yet. Then it
is admitted with the leader's blocks as its prefix (one more reference each, with prefix caching on
or off) and computes only the rest of its prompt. Its shadow footprint does not count them: the
leader's claim does.

A follower whose leader is not running (still waiting because it does not fit, preempted, finished,
aborted) does not wait: it goes on as a request of its own (with the prefix cache if on). So a
follower only ever waits on a running request, which always progresses: no deadlock. Samples already
admitted keep their references when the leader ends or is preempted; ref counts free each block once.

Plain functions over RequestState, called by the scheduler at arrival (`link`) and when a waiting
request might be admitted (`is_held`), by its placement for the prefix it is admitted with
(`admission_hits`), by the shadow for the footprint (`num_blocks_from_leader`).
"""
from __future__ import annotations

from scheduler.request_state import RequestState, RequestStatus


def link(req: RequestState, requests: dict[str, RequestState], block_size: int) -> None:
    """At arrival: make `req` a follower of its live leader, if it names one and shares a block.
    It takes the leader's prompt block hashes too (the same tokens and salt: hashed once)."""
    leader_id = req.request.leader_id
    if leader_id is None:
        return
    leader = requests.get(leader_id)
    num_shared = (req.num_prompt_tokens - 1) // block_size
    if leader is None or num_shared == 0 or leader.sample_leader is not None:
        return
    if req.params.prompt_logprobs is not None:
        return  # it scores every prompt position itself: nothing of its prompt may come from others
    prompt, leader_prompt = req.request.prompt_token_ids, leader.request.prompt_token_ids
    if (prompt is not leader_prompt and prompt != leader_prompt) or (
            leader.request.cache_salt != req.request.cache_salt):
        return  # the engine builds groups right; anything else is simply not a group
    req.sample_leader = leader
    req.num_shared_blocks = num_shared
    req.block_hashes = leader.block_hashes[:req.num_prompt_tokens // block_size]


def _leader(req: RequestState) -> RequestState | None:
    """A follower's leader while it lives. A finished leader is let go (and its state with it):
    the follower is a request of its own from then on."""
    leader = req.sample_leader
    if leader is not None and leader.status is RequestStatus.FINISHED:
        req.sample_leader = leader = None
        req.num_shared_blocks = 0
    return leader


def is_held(req: RequestState, block_size: int) -> bool:
    """Whether a waiting follower must not be admitted yet: its leader runs and is still
    computing the blocks they will share."""
    leader = _leader(req)
    return (leader is not None and leader.status is RequestStatus.RUNNING
            and leader.num_computed_tokens < req.num_shared_blocks * block_size)


def admission_hits(req: RequestState, cached: list[int], block_size: int) -> list[int]:
    """The prefix a waiting request is admitted with: its running leader's computed shared blocks,
    unless the prefix cache found as many (`cached`; more after a preemption: its own outputs)."""
    leader = _leader(req)
    num_shared = req.num_shared_blocks
    if (leader is None or leader.status is not RequestStatus.RUNNING or len(cached) >= num_shared
            or leader.num_computed_tokens < num_shared * block_size):
        return cached
    return leader.block_ids[:num_shared]


def num_blocks_from_leader(req: RequestState) -> int:
    """Blocks of a follower's prompt that its leader holds or will hold (for the shadow's
    footprint): none once the leader is preempted or gone."""
    leader = _leader(req)
    if leader is None or leader.status is RequestStatus.PREEMPTED:
        return 0
    return req.num_shared_blocks
