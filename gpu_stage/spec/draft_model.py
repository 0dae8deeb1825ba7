"""DraftModel: the draft_model method's guesser, a second (small) model in the same process on the
same device, with its own KV pool.

Its pool has the target's block ids and block size (so the scheduler's block tables serve both and
a prefix hit is a hit for both; in bytes it is as small as the draft's layers and heads make it).
Every step it runs the same schedule as the target, before the target's forward:
  1. one forward over what each chunk adds (prefill chunks, decodes, each verifying row's input),
     from where the draft's KV ends: it writes the draft's KV and guesses each verifying row's
     first draft token (greedy);
  2. k - 1 decode forwards, each over the verifying rows' previous guesses (fed on the device from
     the last forward's argmax: no host sync), replayed as the draft's own decode CUDA graphs on a
     GPU (captured at start-up like the target's);
and hands the guesses to the target's step as a feed for its PENDING_TOKEN draft slots (the ids
are on the device; they ride the step's one device-to-host copy back for the acceptance).

The guesses are greedy: a deterministic draft, so verification keeps the target's distribution
(gpu_stage/spec/verify.py). The draft's KV of a verifying row ends at its last guess's input, so
after a full acceptance it lags the target by one position, which the next step's first forward
takes (it starts where the draft's KV ends, never past the target's chunk).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from gpu_stage.cuda_graphs import CudaGraphRunner
from gpu_stage.kv.cache import KvCache
from gpu_stage.loaders.model_source import ModelSource
from gpu_stage.model.llama import LlamaForCausalLM
from gpu_stage.runner_builder import graphs_wanted, load_model
from gpu_stage.sampling.states import SamplingStates
from gpu_stage.step_inputs import StepInputs, forward_step
from stages.messages import PENDING_TOKEN, ScheduledChunk

Feed = tuple[list[int], list[int], torch.Tensor]


@dataclass
class Guesses:
    """The guesses of one step: `ids` on the device (flat), and where each goes in the target's step."""

    ids: torch.Tensor  # [G] int32
    feed: Feed  # (target token index, index in ids, ids): StepInputs.stage's feed
    order: list[tuple[str, list[int]]]  # per verifying request: the indices of its guesses in ids


class DraftModel:
    def __init__(self, model: LlamaForCausalLM, kv_cache: KvCache, inputs: StepInputs,
                 graphs: CudaGraphRunner | None) -> None:
        self.model, self.kv_cache, self.inputs, self.graphs = model, kv_cache, inputs, graphs
        self.vocab_size = model.config.vocab_size
        self.kv_end: dict[str, int] = {}  # request -> positions of the draft's KV written (valid)

    @classmethod
    def build(cls, source: ModelSource, device: torch.device, dtype: torch.dtype, num_blocks: int, block_size: int,
              max_num_batched_tokens: int, max_num_seqs: int, max_model_len: int, attention_backend: str,
              enforce_eager: bool) -> DraftModel:
        model = load_model(source, device, dtype, attention_backend)
        kv_cache = KvCache(source.config, num_blocks, block_size, device, dtype)
        inputs = StepInputs(max_num_batched_tokens, max_num_seqs, -(-max_model_len // block_size), block_size, device)
        graphs = None
        if graphs_wanted(device.type == "cuda", enforce_eager, attention_backend):
            graphs = CudaGraphRunner(model, kv_cache, inputs, max_num_seqs, max_num_batched_tokens, max_model_len,
                                     prefill_buckets=(), mixed_token_buckets=())  # decode graphs only
            graphs.capture()
        return cls(model, kv_cache, inputs, graphs)

    def release(self, request_id: str) -> None:
        self.kv_end.pop(request_id, None)

    @torch.inference_mode()
    def guess(self, chunks: Sequence[ScheduledChunk], states: SamplingStates) -> Guesses | None:
        """Run the draft over the step (see the module doc) -> the guesses for its PENDING_TOKEN
        draft slots, or None when no chunk has any (the draft still wrote its KV)."""
        first, verifying = [], []  # the first forward's chunks; (chunk, its row among the sampled)
        for chunk in chunks:
            known = len(chunk.token_ids) - chunk.num_draft
            start = min(self.kv_end.get(chunk.request_id, chunk.start_pos), chunk.start_pos)
            tokens = chunk.token_ids[:known]
            if start < chunk.start_pos:  # the draft lags: the last accepted guess it never read
                state = states.requests[chunk.request_id]
                history = state.prompt_token_ids + state.output_token_ids
                tokens = history[start:chunk.start_pos] + tokens
            guessing = chunk.num_draft > 0 and chunk.token_ids[-1] == PENDING_TOKEN
            first.append(ScheduledChunk(chunk.request_id, tokens, start, chunk.block_table, guessing))
            self.kv_end[chunk.request_id] = chunk.start_pos + known
            if guessing:
                verifying.append(chunk)
        logits = forward_step(self.model, self.inputs.stage(first), self.kv_cache)
        if not verifying:
            return None
        ids = [logits[: len(verifying)].argmax(dim=-1).to(torch.int32)]  # each row's first guess
        rows = {c.request_id: j for j, c in enumerate(verifying)}  # request -> row in the last ids
        for i in range(1, max(c.num_draft for c in verifying)):
            active = [c for c in verifying if c.num_draft > i]
            step = [ScheduledChunk(c.request_id, [PENDING_TOKEN], c.start_pos + len(c.token_ids) - c.num_draft + i - 1,
                                   c.block_table, True) for c in active]
            ids.append(self._decode(step, ([j for j in range(len(active))], [rows[c.request_id] for c in active],
                                           ids[-1])))
            rows = {c.request_id: j for j, c in enumerate(active)}
            for c in active:
                self.kv_end[c.request_id] = c.start_pos + len(c.token_ids) - c.num_draft + i
        return _place(chunks, verifying, ids)

    def _decode(self, step: list[ScheduledChunk], feed: Feed) -> torch.Tensor:
        """One decode forward of the draft over `step` (its inputs fed from the last guesses) -> argmax."""
        shape = self.graphs.shape_for(step) if self.graphs is not None else None
        staged = self.inputs.stage(step, shape=shape, feed=feed)
        logits = self.graphs.replay(shape) if shape is not None else forward_step(self.model, staged, self.kv_cache)
        return logits[: len(step)].argmax(dim=-1).to(torch.int32)


def _place(chunks: Sequence[ScheduledChunk], verifying: list[ScheduledChunk], ids: list[torch.Tensor]) -> Guesses:
    """Where each guess goes: guess i of a verifying row is ids[i]'s row among the rows still guessing
    at step i, flattened; its slot in the target's step is its token index there."""
    offsets, n = [], 0  # the first index of each step's ids in the flat tensor
    for step_ids in ids:
        offsets.append(n)
        n += step_ids.shape[0]
    starts, pos = {}, 0
    for chunk in chunks:
        starts[chunk.request_id] = pos
        pos += len(chunk.token_ids)
    dst, src, order = [], [], []
    for row, chunk in enumerate(verifying):
        mine = []
        for i in range(chunk.num_draft):
            # rows guessing at step i: those with num_draft > i, in order; this one's rank among them
            rank = sum(1 for c in verifying[:row] if c.num_draft > i)
            mine.append(offsets[i] + rank)
            dst.append(starts[chunk.request_id] + len(chunk.token_ids) - chunk.num_draft + i)
        src += mine
        order.append((chunk.request_id, mine))
    flat = torch.cat(ids) if len(ids) > 1 else ids[0]
    return Guesses(flat, (dst, src, flat), order)
