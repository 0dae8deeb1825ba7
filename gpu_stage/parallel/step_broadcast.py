"""StepBroadcast: each step's inputs from the driver (rank 0) to every rank, as tensors, once.

The driver's StepInputs already packs every integer input of a step into one int32 buffer, whose
layout is a function of (T, B, W, S, R, F) alone (step_layout.make_layout). So a step travels as
  1. a fixed header of HEADER_LEN int32 over the host group (gloo): the kind (a step, or stop), a
     sequence number, the layout's sizes, the graph shape it replays (if any) and the host values
     an eager step's attention plans with (max query and sequence lengths);
  2. the packed host buffer, over the host group, into the worker's own StepInputs host buffer,
     which it copies to its device exactly as the driver did (StepInputs.receive);
  3. on CUDA, when the step has feeds (async scheduling: inputs taken from the previous step's
     sampled ids, which exist on the driver's device only), the fed input_ids segment of the
     driver's device buffer, over the device group (NCCL, on the stream, after the feed).
Nothing is pickled. The header and buffer go over gloo so that a worker learns a step's shape and
lengths on the host without a device sync: it can queue step N+1 while step N still runs. The
sampled ids never leave the driver (the workers drop their gathered logits).

A step's KV tier copies (KvTransferOps: device blocks <-> host slots, the same ids on every rank)
travel the same way just before it, and early copies on their own: a header (the counts, whether
they wait for the compute stream) and the (block, slot) pairs as one int32 buffer. Each rank then
copies its own shard (sharded_tiers.py).

Only the driver sends; every other rank receives in the same order, so the messages need no tags.
The host group waits indefinitely (an idle server sends nothing); a dead driver closes its sockets
and the receive raises, a stopped one is the liveness monitor's business (liveness.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from gpu_stage.attention.metadata import AttentionMetadata, SampledRows
from gpu_stage.parallel.group import rank_lost
from gpu_stage.step_inputs import StagedStep, StepInputs
from gpu_stage.step_layout import GraphShape, Layout, make_layout
from stages.messages import KvTransferOps

HEADER_LEN = 16
KIND_STEP, KIND_STOP, KIND_COPIES = 1, 2, 3
# Header slots (a copies header: _T offloads, _B loads, _SIZE their int32 count, _WAIT wait_compute;
# _P: a step's prompt-logprob rows, whose lm_head slices every rank runs for the gather).
_KIND, _SEQ, _T, _B, _W, _S, _R, _F, _SIZE, _GRAPH, _DECODE, _MIXED, _MAX_Q, _MAX_SEQ, _WAIT, _P = range(16)


@dataclass
class ReceivedStep:
    seq: int
    staged: StagedStep | None  # None for a graph replay (the captured graph holds its own views)
    shape: GraphShape | None


class StepBroadcast:
    def __init__(self, rank: int, host_group: dist.ProcessGroup | None, device_group: dist.ProcessGroup | None,
                 device: torch.device) -> None:
        self.rank = rank
        self.host_group, self.device_group = host_group, device_group
        self.device = torch.device(device)
        self._header = torch.zeros(HEADER_LEN, dtype=torch.int32)
        self._pairs = torch.zeros(0, dtype=torch.int32)  # the copies' pairs, grown once as needed
        self._seq = 0

    # -- the driver -------------------------------------------------------------------------
    def send(self, staged: StagedStep, shape: GraphShape | None) -> None:
        """Send a step staged by the driver's StepInputs (after its copy and feed)."""
        assert self.rank == 0 and staged.host is not None
        assert shape is None or not shape.family, "a graph family's shapes do not travel (no header field)"
        layout, meta = staged.layout, staged.meta
        sizes = [layout.offsets[name][1] for name in ("input_ids", "cu_seqlens_q", "block_tables",
                                                       "logits_indices", "greedy", "feed_dst", "prompt_targets")]
        num_tokens, num_seqs_plus_1, table, num_logits, num_rows, num_feeds, num_prompt_rows = sizes
        num_seqs = num_seqs_plus_1 - 1
        width = table // num_seqs if num_seqs else 0
        self._seq += 1
        h = self._header
        h.zero_()
        h[_KIND], h[_SEQ], h[_SIZE] = KIND_STEP, self._seq, layout.size
        h[_T], h[_B], h[_W], h[_S], h[_R], h[_F] = num_tokens, num_seqs, width, num_logits, num_rows, num_feeds
        h[_P] = num_prompt_rows
        if shape is not None:
            h[_GRAPH], h[_DECODE], h[_MIXED] = 1, int(shape.decode), int(shape.mixed)
        h[_MAX_Q], h[_MAX_SEQ] = meta.max_query_len, meta.max_seq_len
        try:
            dist.broadcast(h, src=0, group=self.host_group)
            dist.broadcast(staged.host[: layout.size], src=0, group=self.host_group)
            if num_feeds and self.device.type == "cuda":
                dist.broadcast(staged.input_ids, src=0, group=self.device_group)
        except RuntimeError as exc:
            raise rank_lost(exc, "step broadcast") from exc

    def send_copies(self, ops: KvTransferOps) -> None:
        """Send tier copies, before the step they ride with (or alone: early copies)."""
        assert self.rank == 0
        pairs = [x for pair in ops.offloads for x in pair] + [x for pair in ops.loads for x in pair]
        self._seq += 1
        h = self._header
        h.zero_()
        h[_KIND], h[_SEQ], h[_SIZE] = KIND_COPIES, self._seq, len(pairs)
        h[_T], h[_B], h[_WAIT] = len(ops.offloads), len(ops.loads), int(ops.wait_compute)
        buf = self._pairs_buffer(len(pairs))[: len(pairs)]
        buf.numpy()[:] = pairs
        try:
            dist.broadcast(h, src=0, group=self.host_group)
            if pairs:  # (a fence alone has none: every worker fences its copies anyway)
                dist.broadcast(buf, src=0, group=self.host_group)
        except RuntimeError as exc:
            raise rank_lost(exc, "tier copies broadcast") from exc

    def _pairs_buffer(self, size: int) -> torch.Tensor:
        if self._pairs.numel() < size:
            self._pairs = torch.zeros(max(size, 2 * self._pairs.numel()), dtype=torch.int32)
        return self._pairs

    def stop(self) -> None:
        """Tell every worker to leave its loop."""
        assert self.rank == 0
        self._header.zero_()
        self._header[_KIND] = KIND_STOP
        dist.broadcast(self._header, src=0, group=self.host_group)

    # -- a worker ---------------------------------------------------------------------------
    def receive(self, inputs: StepInputs) -> ReceivedStep | KvTransferOps | None:
        """Wait for the next message: a step (landed in `inputs`' buffers), tier copies, or None
        on stop."""
        assert self.rank != 0
        h = self._header
        dist.broadcast(h, src=0, group=self.host_group)
        values = h.tolist()
        if values[_KIND] == KIND_STOP:
            return None
        if values[_KIND] not in (KIND_STEP, KIND_COPIES) or values[_SEQ] != self._seq + 1:
            raise RuntimeError(f"step broadcast out of order: header {values}, expected message {self._seq + 1}")
        self._seq += 1
        if values[_KIND] == KIND_COPIES:
            return self._receive_copies(values)
        layout = make_layout(values[_T], values[_B], values[_W], values[_S], values[_R], values[_F], values[_P])
        if layout.size != values[_SIZE]:
            raise RuntimeError(f"step layout mismatch: {layout.size} here, {values[_SIZE]} at the driver")
        host, buf = inputs.receive(lambda dest: dist.broadcast(dest, src=0, group=self.host_group), layout.size)
        if values[_F] and self.device.type == "cuda":
            dist.broadcast(layout.view(buf, "input_ids"), src=0, group=self.device_group)
        if values[_GRAPH]:
            shape = GraphShape(values[_T], values[_B], values[_W], bool(values[_DECODE]), bool(values[_MIXED]))
            return ReceivedStep(self._seq, None, shape)
        staged = restage(layout, host, buf, values[_MAX_Q], values[_MAX_SEQ], inputs.block_size)
        return ReceivedStep(self._seq, staged, None)

    def _receive_copies(self, values: list[int]) -> KvTransferOps:
        size, num_offloads = values[_SIZE], values[_T]
        buf = self._pairs_buffer(size)[:size]
        if size:
            dist.broadcast(buf, src=0, group=self.host_group)
        flat = buf.tolist()
        pairs = list(zip(flat[0::2], flat[1::2]))
        return KvTransferOps(pairs[:num_offloads], pairs[num_offloads:], wait_compute=bool(values[_WAIT]))


def restage(layout: Layout, host: torch.Tensor, buf: torch.Tensor, max_query_len: int, max_seq_len: int,
            block_size: int) -> StagedStep:
    """The StagedStep an eager step's forward reads (no sampling), from a received buffer: the
    views StepInputs.stage makes, and the host lengths read from the host copy."""
    def view(name: str) -> torch.Tensor:
        return layout.view(buf, name)

    def host_values(name: str) -> np.ndarray:
        return layout.view(host, name).numpy()

    num_tokens = layout.offsets["input_ids"][1]
    num_seqs = layout.offsets["seq_lens"][1]
    width = layout.offsets["block_tables"][1] // max(num_seqs, 1)
    num_logits = layout.offsets["logits_indices"][1]
    cu = host_values("cu_seqlens_q")
    sampled = None
    if num_logits < num_tokens:  # as in stage(): a last layer that computes the sampled rows alone
        sampled = SampledRows(view("sampled_seq"), view("sampled_seq_lens"), view("sampled_cu"),
                              host_values("sampled_seq_lens").tolist())
    meta = AttentionMetadata(
        cu_seqlens_q=view("cu_seqlens_q"), seq_lens=view("seq_lens"),
        block_tables=view("block_tables").view(num_seqs, width), slot_mapping=view("slot_mapping"),
        positions=view("positions"), max_query_len=max_query_len, max_seq_len=max_seq_len, block_size=block_size,
        query_lens_host=np.diff(cu).tolist(), seq_lens_host=host_values("seq_lens").tolist(), sampled=sampled,
    )
    return StagedStep(view("input_ids"), view("positions"), view("logits_indices"), meta, None, layout,
                      num_tokens, num_seqs, host, layout.offsets["prompt_targets"][1])
