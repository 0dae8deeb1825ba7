"""DraftModel: the draft_model method's guesser, a second (small) model in the same process on the
same device, with its own KV pool.

Its pool has the target's block ids and block size (so the scheduler's block tables serve both and
a prefix hit is a hit for both; in bytes it is as small as the draft's layers and heads make it).
Every step it runs the same schedule as the target, before the target's forward:
  1. one forward over what each chunk adds (prefill chunks, decodes, each verifying row's input),
     from where the draft's KV ends: it writes the draft's KV and guesses each verifying row's
     first draft token (greedy). On a GPU it replays a graph: a decode graph when every row has one
     token, else a catch-up graph (rows of up to CATCH_UP_TOKENS tokens: a verifying row's input
     and, after a full acceptance, the last guess the draft never read), else a prefill graph;
     eager only past them (a prefill chunk beside other rows, a chunk past the largest bucket);
  2. k - 1 decode forwards, each over the verifying rows' previous guesses (fed on the device from
     the last forward's argmax: no host sync), replayed as the draft's own decode CUDA graphs on a
     GPU (captured at start-up like the target's). Its StepInputs has k + 1 pinned buffers, so
     staging them back to back never waits on the device for a free one;
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
from gpu_stage.model.interface import CausalLM
from gpu_stage.runner_builder import graphs_wanted, load_model
from gpu_stage.sampling.states import SamplingStates
from gpu_stage.spec.graph_shapes import catch_up_graphs
from gpu_stage.step_inputs import StepInputs, forward_step
from gpu_stage.step_layout import GraphShape
from stages.messages import PENDING_TOKEN, ScheduledChunk

Feed = tuple[list[int], list[int], torch.Tensor]

# Tokens per row of the catch-up graphs: a verifying row's input beside the one guess whose KV the
# draft lacks after a full acceptance (its KV ends at its last guess's input, one short).
CATCH_UP_TOKENS = 2


@dataclass
class DraftCounts:
    """Forwards the draft ran, by kind: its first forward of a step (catch-up) and its guessing
    decodes (steps), each replayed as a CUDA graph or run eagerly (what the GPU test checks)."""

    catch_up_graph: int = 0
    catch_up_eager: int = 0
    step_graph: int = 0
    step_eager: int = 0


@dataclass
class Guesses:
    """The guesses of one step: `ids` on the device (flat), and where each goes in the target's step."""

    ids: torch.Tensor  # [G] int32
    feed: Feed  # (target token index, index in ids, ids): StepInputs.stage's feed
    order: list[tuple[str, list[int]]]  # per verifying request: the indices of its guesses in ids


class DraftModel:
    def __init__(self, model: CausalLM, kv_cache: KvCache, inputs: StepInputs,
                 graphs: CudaGraphRunner | None) -> None:
        self.model, self.kv_cache, self.inputs, self.graphs = model, kv_cache, inputs, graphs
        self.vocab_size = model.config.vocab_size
        self.kv_end: dict[str, int] = {}  # request -> positions of the draft's KV written (valid)
        self.counts = DraftCounts()

    @classmethod
    def build(cls, source: ModelSource, device: torch.device, dtype: torch.dtype, num_blocks: int, block_size: int,
              max_num_batched_tokens: int, max_num_seqs: int, max_model_len: int, attention_backend: str,
              enforce_eager: bool, num_speculative_tokens: int = 1) -> DraftModel:
        """`num_speculative_tokens`: k, the forwards it stages per step (one pinned buffer each)."""
        model = load_model(source, device, dtype, attention_backend)
        kv_cache = KvCache(source.config, num_blocks, block_size, device, dtype)
        inputs = StepInputs(max_num_batched_tokens, max_num_seqs, -(-max_model_len // block_size), block_size, device,
                            num_host_buffers=num_speculative_tokens + 1)
        graphs = None
        if graphs_wanted(device.type == "cuda", enforce_eager, attention_backend):
            # decode, catch-up and prefill graphs; no mixed ones (a prefill beside decodes runs eagerly)
            graphs = CudaGraphRunner(model, kv_cache, inputs, max_num_seqs, max_num_batched_tokens, max_model_len,
                                     mixed_token_buckets=(), families=[catch_up_graphs(CATCH_UP_TOKENS)])
            graphs.capture()
        return cls(model, kv_cache, inputs, graphs)

    def release(self, request_id: str) -> None:
        self.kv_end.pop(request_id, None)

    @torch.inference_mode()
    def guess(self, chunks: Sequence[ScheduledChunk], states: SamplingStates) -> Guesses | None:
        """Run the draft over the step (see the module doc) -> the guesses for its PENDING_TOKEN
        draft slots, or None when no chunk has any (the draft still wrote its KV)."""
        # The first forward's chunks, the verifying rows first: logits row j is verifying row j's
        # whether the forward is eager (rows of the sampled chunks) or a graph (a row per sequence).
        first, rest, verifying = [], [], []
        for chunk in chunks:
            known = len(chunk.token_ids) - chunk.num_draft
            start = min(self.kv_end.get(chunk.request_id, chunk.start_pos), chunk.start_pos)
            tokens = chunk.token_ids[:known]
            if start < chunk.start_pos:  # the draft lags: the last accepted guess it never read
                state = states.requests[chunk.request_id]
                tokens = _history(state.prompt_token_ids, state.output_token_ids, start, chunk.start_pos) + tokens
            guessing = chunk.num_draft > 0 and chunk.token_ids[-1] == PENDING_TOKEN
            (first if guessing else rest).append(ScheduledChunk(chunk.request_id, tokens, start, chunk.block_table,
                                                                guessing))
            self.kv_end[chunk.request_id] = chunk.start_pos + known
            if guessing:
                verifying.append(chunk)
        logits = self._catch_up(first + rest)
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

    def _catch_up(self, first: list[ScheduledChunk]) -> torch.Tensor:
        """The draft's first forward of a step (what each chunk adds, its lag included) -> logits,
        row j the j-th sampled chunk's (they come first)."""
        return self._counted_forward(first, None, "catch_up")

    def _decode(self, step: list[ScheduledChunk], feed: Feed) -> torch.Tensor:
        """One decode forward of the draft over `step` (its inputs fed from the last guesses) -> argmax."""
        return self._counted_forward(step, feed, "step")[: len(step)].argmax(dim=-1).to(torch.int32)

    def _counted_forward(self, chunks: list[ScheduledChunk], feed: Feed | None, kind: str) -> torch.Tensor:
        """_forward in its graph when one fits, counted in DraftCounts as `kind`_graph or `kind`_eager."""
        shape = self._shape(chunks)
        logits = self._forward(chunks, shape, feed)
        counter = f"{kind}_{'eager' if shape is None else 'graph'}"
        setattr(self.counts, counter, getattr(self.counts, counter) + 1)
        return logits

    def _shape(self, chunks: list[ScheduledChunk]) -> GraphShape | None:
        return self.graphs.shape_for(chunks) if self.graphs is not None else None

    def _forward(self, chunks: list[ScheduledChunk], shape: GraphShape | None, feed: Feed | None) -> torch.Tensor:
        """Stage `chunks` (padded to `shape`) and replay its graph, or run them eagerly (no shape)."""
        staged = self.inputs.stage(chunks, shape=shape, feed=feed)
        return self.graphs.replay(shape) if shape is not None else forward_step(self.model, staged, self.kv_cache)


def _history(prompt: list[int], output: list[int], start: int, end: int) -> list[int]:
    """Positions start..end of prompt + output, without building the whole sequence every step."""
    n = len(prompt)
    return prompt[start:end] + output[max(0, start - n) : max(0, end - n)]


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
