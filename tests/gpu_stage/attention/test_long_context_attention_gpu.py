"""The long-context path on CUDA (issue 22): cuDNN's and flash's kernels against the torch backend and
the Triton kernel in bfloat16 (plain and fp8 pools, mixed steps, shuffled tables), at the Llama-3-8B
attention shape with the production piece sizes, with no host sync; and a runner whose 12K prompt
crosses MIN_CONTEXT, with the path on and off."""
from __future__ import annotations

import pytest
import torch
from test_long_context_attention import HEADS, KV_HEADS, _fresh, _reference, _rel, _step

from gpu_stage.attention import torch_backend
from gpu_stage.attention.long_backend import LongContextBackend, make_plan
from gpu_stage.attention.long_context import LongContextAttention

pytestmark = pytest.mark.gpu
SMALL_GPU = dict(min_context=256, min_query=16, unit=128, max_piece=512, query_bucket=64)
HEAD_DIM = 64  # a head size every fused kernel takes


def _long(kernels: str) -> LongContextAttention:
    long = LongContextAttention(HEADS, KV_HEADS, HEAD_DIM, torch.bfloat16, torch.device("cuda"), 4096, 512, kernels,
                                **SMALL_GPU)
    assert long.warm() == kernels, "the start-up check fell back: see the log"
    return long


@pytest.mark.parametrize("kernels", ["cudnn", "flash"])
@pytest.mark.parametrize("fmt", [None, "fp8_e4m3"])
def test_mixed_steps_match_the_torch_backend_and_the_kernel(kernels: str, fmt: str | None) -> None:
    from gpu_stage.attention import triton_backend

    query_lens = [1, 40, 100, 1, 300]
    seq_lens = [700, 40, 100 + 1000, 50, 300 + 2000]  # cached 1000 (pieces 512 + 256 + 128, tail 104), 2000
    q, layer, meta = _step(query_lens, seq_lens, torch.bfloat16, fmt, "cuda", head_dim=HEAD_DIM)
    backend = LongContextBackend(triton_backend, _long(kernels))
    got = backend.forward(q, layer, meta)
    assert len(backend._plan(meta, layer).seqs) == 2
    assert _rel(got, _reference(q, layer, meta)) < 1e-2
    assert _rel(got, triton_backend.forward(q, layer, _fresh(meta))) < 1e-2


@pytest.mark.parametrize("kernels", ["cudnn", "flash"])
def test_llama_shape_production_pieces_without_a_host_sync(kernels: str) -> None:
    """32 heads / 8 KV heads / 128, block 16, the default unit and buckets: a 2,048-token chunk after
    20,000 cached tokens (one 16,384-key piece, then a 5,664-key lower-right tail: 3,616 cached keys
    and the chunk's own) against the Triton kernel."""
    from gpu_stage.attention.metadata import build_metadata
    from gpu_stage.kernels.prefill_attention import prefill_attention

    total, new = 22048, 2048
    num_blocks = total // 16 + 8
    gen = torch.Generator(device="cuda").manual_seed(5)
    kv = torch.randn(num_blocks, 2, 16, 8, 128, generator=gen, device="cuda", dtype=torch.bfloat16)
    meta = build_metadata([new], [total], [list(range(8, num_blocks))[: total // 16]], 16, "cuda")
    q = torch.randn(new, 32, 128, generator=gen, device="cuda", dtype=torch.bfloat16)
    long = LongContextAttention(32, 8, 128, torch.bfloat16, torch.device("cuda"), 32768, 8192, kernels)
    assert long.warm() == kernels
    backend = LongContextBackend(torch_backend, long)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        plan = make_plan(meta, kv, long)
        got = long.attend(q, kv, plan.seqs[0]).clone()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    want = prefill_attention(q, kv, meta.cu_seqlens_q, meta.seq_lens, meta.block_tables, 1)
    assert _rel(got, want) < 1e-2
    assert _rel(backend.forward(q, kv, _fresh(meta)), want) < 1e-2  # the backend casts it into its rows


def test_a_runner_prefills_past_min_context_on_the_path() -> None:
    """A 12,000-token prompt in 2,048-token chunks: chunks from 8,192 cached tokens on take the path
    (counted), and the last chunk's logits equal the runner's with the path off (bf16 tolerance)."""
    from gpu_runner_helpers import source_from_hf
    from tiny_hf_models import hf_model

    from gpu_stage.model_runner import ModelRunner
    from stages.messages import NewRequestData, ScheduledChunk, StepBatch
    from stages.sampling import SamplingParams

    hf = hf_model("llama", hidden_size=256, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=3,
                  max_position_embeddings=16384)  # head_dim 64
    prompt = torch.randint(2, 400, (12000,), generator=torch.Generator().manual_seed(9)).tolist()
    logits = {}
    for mode in ("auto", "off"):
        runner = ModelRunner.build(source_from_hf(hf), "cuda", torch.bfloat16, num_blocks=800, block_size=16,
                                   max_num_batched_tokens=2048, max_num_seqs=4, attention_backend="triton",
                                   enforce_eager=True, max_model_len=16384, long_context_attention=mode)
        runner.warm_thread()
        calls = []
        if runner.long_context is not None:
            attend = runner.long_context.attend
            runner.long_context.attend = lambda *a, **k: calls.append(1) or attend(*a, **k)
        table = list(range(1, 1 + 12000 // 16 + 1))
        new = [NewRequestData("r", prompt, SamplingParams(temperature=0.0, max_tokens=1, logprobs=5))]
        for step, pos in enumerate(range(0, 12000, 2048)):
            end = min(12000, pos + 2048)
            result = runner.execute(StepBatch(step, new if step == 0 else [],
                                              [ScheduledChunk("r", prompt[pos:end], pos, table, end == 12000)]))
        logits[mode] = result.sampled[0]  # SampledToken: its id and top-5 logprobs
        if mode == "auto":
            assert runner.long_context is not None and runner.long_context.enabled
            # chunks at 8,192 and 10,240, every layer (the last one attends from the sampled rows only
            # where the step samples any: the 12,000th token's, a decode-shaped call)
            layers = hf.config.num_hidden_layers
            assert 2 * (layers - 1) <= len(calls) <= 2 * layers
        else:
            assert runner.long_context is None
    got, want = logits["auto"], logits["off"]
    print("top logprobs on / off:", got.top_logprobs, want.top_logprobs)
    # the exactness rule in bf16: the same token, or a near-tie in the reference (top-2 gap < 0.25)
    (_, first), (_, second) = want.top_logprobs[:2]
    assert got.token_id == want.token_id or first - second < 0.25
    assert abs(dict(got.top_logprobs)[got.token_id] - dict(want.top_logprobs).get(got.token_id, -1e9)) < 0.25
