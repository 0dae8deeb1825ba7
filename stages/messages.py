"""The messages that cross stages. Nouns for what travels; each is owned by its receiver once sent.

    engine    --Admission/Abort-------->  scheduler  --StepBatch, KvTransferOps (early)-->  gpu
    gpu       --StepResult------------->  scheduler  --StepEvents (+ the Admissions)--> emitter
    emitter   --RequestOutput---------->  the request's own output stream (read by HTTP / embedder)
    emitter   --Abort(reason="stop")--->  scheduler   (a stop string ended the reply)

A request enters as one Admission: its samples' GenerateRequests for the scheduler and their output
streams for the emitter, which the scheduler hands on ahead of the requests' first events.
"""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from operator import attrgetter

from stages.sampling import SamplingParams
from stages.trace import RequestTrace


@dataclass(slots=True)
class GenerateRequest:
    """A parsed, validated, tokenized request on its way to the scheduler."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    trace: RequestTrace
    deadline_ns: int | None = None  # perf_counter_ns after which it is aborted ("timeout")
    priority: int = 0  # lower runs first where the policy honours it
    cache_salt: str | None = None
    # n > 1: the id of sample 0 of the same HTTP request (same prompt), whose prompt blocks this
    # sample shares (scheduler/sample_group.py). None: a request of its own, or sample 0.
    leader_id: str | None = None
    # What its first sampled token waits for (its grammar's compile, still running when it was
    # queued: scheduler/sampling_gates.py); None: nothing.
    sampling_gate: Future | None = None


@dataclass(slots=True)
class Admission:
    """One admitted request: all its engine requests (a batch's prompts times n samples), admitted
    together, and where each one's outputs go."""

    requests: list[GenerateRequest]
    # Per request, in the same order: (its OutputStream, its RequestEmitter). The scheduler does not
    # look at them; the emitter registers them before it handles any event of theirs.
    outputs: list[tuple[object, object]]


@dataclass(slots=True)
class Abort:
    """Stop a request and free its blocks. `reason` is the finish_reason reported to its stream."""

    request_id: str
    reason: str = "abort"


@dataclass(slots=True)
class NewRequestData:
    """Sent to the GPU stage the first time a request is scheduled: what its sampler needs."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams


# A decode's input token that is still being sampled by the step before (async scheduling): the
# GPU stage replaces it on the device with that step's sampled id for the same request.
PENDING_TOKEN = -1
# Steps the scheduler may have in flight at once: the running one and the next, built ahead.
MAX_STEPS_IN_FLIGHT = 2


@dataclass(slots=True)
class ScheduledChunk:
    """One sequence's share of a step: compute `token_ids` at positions start_pos, start_pos+1, ..."""

    request_id: str
    token_ids: list[int]  # [PENDING_TOKEN] for a decode built ahead of its input's sampling
    start_pos: int  # == num_computed_tokens (+ tokens of the step in flight) before the step
    block_table: list[int]  # covers positions [0, start_pos + len(token_ids))
    sample: bool  # the chunk reaches the last known token: sample the next one
    # Speculative decoding: the last `num_draft` token_ids are guessed, not known (a verifying
    # row: the model samples at each of the last num_draft + 1 positions and keeps the run of
    # guesses it agrees with). PENDING_TOKEN guesses are the GPU stage's draft model's to make.
    num_draft: int = 0

    @property
    def num_sampled_positions(self) -> int:
        """Positions at its end whose logits are sampled when it samples: the last, and each guess."""
        return self.num_draft + 1


_token_ids = attrgetter("token_ids")


@dataclass(slots=True)
class StepBatch:
    step_id: int
    new_requests: list[NewRequestData]
    chunks: list[ScheduledChunk]
    finished_ids: list[str] = field(default_factory=list)  # the runner may drop their state
    kv_ops: KvTransferOps | None = None  # tier copies to run before this step's forward
    # A request is admitted in this step: its first chunk may read blocks loaded by early tier
    # copies, so the forward waits for those (decode-only steps do not).
    admits: bool = False
    # "latency" or "long-prefill" (only long prompts' chunks: scheduler/step_builder.py).
    lane: str = "latency"

    @property
    def num_tokens(self) -> int:
        # map() over an attrgetter, not a generator: the stages ask several times per step.
        return sum(map(len, map(_token_ids, self.chunks)))


@dataclass(slots=True)
class PromptLogprob:
    """One prompt position's score (prompt_logprobs): the prompt token there given those before it."""

    token_id: int
    logprob: float
    rank: int  # how many tokens were at least as likely there, itself included (1: the most likely)
    top: list[tuple[int, float]]  # the k most likely tokens there (id, logprob), most likely first


@dataclass(slots=True)
class SampledToken:
    request_id: str
    token_id: int
    logprob: float | None = None  # of the sampled token, when logprobs were asked for
    top_logprobs: list[tuple[int, float]] | None = None
    # With the first token of a request that asked for prompt_logprobs: prompt positions 1.. (the
    # first prompt token has nothing before it), computed in its prefill.
    prompt_logprobs: list[PromptLogprob] | None = None


@dataclass(slots=True)
class StepResult:
    step_id: int
    sampled: list[SampledToken]
    failed: dict[str, str] = field(default_factory=dict)  # request_id -> message: that request only
    # Verifying rows: the tokens after `sampled`'s that the verification accepted, in order (the
    # accepted guesses' successors: a row accepting a guesses emits 1 + a tokens).
    spec: dict[str, list[SampledToken]] = field(default_factory=dict)
    error: str | None = None  # the whole step failed: the engine is broken
    duration_ns: int = 0
    # The GPU stage's clock (perf_counter ns; 0: not run there): the launch thread took the step,
    # had queued all its device work, and its sampled ids reached the host.
    started_ns: int = 0
    launched_ns: int = 0
    synced_ns: int = 0


@dataclass(slots=True)
class TokenEvent:
    """What one step produced for one request."""

    request_id: str
    token_ids: list[int]
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "timeout" | "error"
    logprobs: list[SampledToken] | None = None
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0
    num_cached_tokens: int = 0
    error: str | None = None
    error_status: int = 500  # the HTTP status of `error`: 400 for a request refused at admission
    prompt_logprobs: list[PromptLogprob] | None = None  # with the first token (SampledToken's)


@dataclass(slots=True)
class StepEvents:
    step_id: int
    events: list[TokenEvent]
    admitted: list[Admission] = field(default_factory=list)  # registered by the emitter before `events`


@dataclass(slots=True)
class TokenLogprob:
    token: str
    token_id: int
    logprob: float
    top: list[tuple[str, int, float]]  # (text, id, logprob) of the alternatives
    rank: int | None = None  # prompt logprobs: PromptLogprob.rank


@dataclass(slots=True)
class PromptScores:
    """A request's prompt logprobs as the emitter hands them out (with its first output)."""

    first_token: str  # the text of prompt token 0: nothing comes before it, so it has no logprob
    first_token_id: int
    positions: list[TokenLogprob]  # prompt tokens 1.., each given the ones before it (rank set)


@dataclass(slots=True)
class RequestOutput:
    """One flush for one request: the text added this step, and the end when it ended."""

    request_id: str
    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    logprobs: list[TokenLogprob] | None = None
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0
    num_cached_tokens: int = 0
    error: str | None = None
    error_status: int = 500
    index: int = 0  # the choice index of this sample within its request (n > 1)
    prompt_logprobs: PromptScores | None = None  # with the first output, when they were asked for


@dataclass(slots=True)
class KvTransferOps:
    """Block copies between the device pool and the host tier, run by the GPU stage before the
    step they ride with: every offload first, then every load, in order, on one copy stream."""

    offloads: list[tuple[int, int]] = field(default_factory=list)  # (device block, host slot)
    loads: list[tuple[int, int]] = field(default_factory=list)  # (host slot, device block)
    # Whether the step's forward must wait for these copies: it reads a loaded block, or may
    # overwrite a block whose copy to host is still running (evicted and reused). False (only
    # early offloads of cached blocks): the copies run beside the forward.
    fence: bool = True
    # Whether the copies first wait for the steps already queued on the device (they may still
    # write a block loaded into here, or have written one offloaded from here). False only for
    # early loads into blocks no step in flight writes (KvTierManager.take_early_ops).
    wait_compute: bool = True

    def __bool__(self) -> bool:
        return bool(self.offloads or self.loads)


@dataclass(slots=True)
class KvDiskRequest:
    """A disk-tier job for the disk stage: read a block file into a host slot, write a host
    slot to a block file, or delete a block file."""

    kind: str  # "read" | "write" | "delete"
    block_hash: bytes
    slot: int = -1


@dataclass(slots=True)
class KvDiskDone:
    kind: str
    block_hash: bytes
    slot: int
    ok: bool
    num_bytes: int = 0
    duration_ns: int = 0
