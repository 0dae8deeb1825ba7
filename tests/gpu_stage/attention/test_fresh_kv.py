"""attention/fresh_kv.py: over an 8-bit pool, a sequence with no cached context attends to the
step's own K/V (the prefill kernel's FRESH path, and the torch path where the rule applies), every
other sequence of the step to the pool; under the interpreter on the CPU as on a GPU."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from gpu_stage.attention import fresh_kv, torch_backend, triton_backend  # noqa: E402
from gpu_stage.kernels.prefill_attention import prefill_attention  # noqa: E402
from tests.gpu_stage.kernels.test_kv8_kernels import DEVICE, FORMATS, LAYOUTS, TOL, _case, _rel  # noqa: E402

# fresh prompts (one of a single token), a prompt's later chunk, decodes: one step
SPECS = [(0, 9), (5, 3), (0, 1), (12, 1), (0, 20), (7, 1)]
HEADS, KV_HEADS, HEAD_DIM, BLOCK = 8, 2, 32, 4


def _step(fmt: str, vt: bool, dtype: torch.dtype = torch.bfloat16):
    """The case, the step's own k, v as column slices of one product (as the model makes them),
    and the expected output: fresh sequences over their raw K/V, the rest over the pool's."""
    layer, q, meta, ref, ks, vs = _case(fmt, SPECS, HEADS, KV_HEADS, HEAD_DIM, BLOCK, dtype, seed=9, v_transposed=vt,
                                        raw=True)
    new_k = torch.cat([k[c:] for k, (c, _) in zip(ks, SPECS)]).to(DEVICE)
    new_v = torch.cat([v[c:] for v, (c, _) in zip(vs, SPECS)]).to(DEVICE)
    kv = torch.cat([new_k.flatten(1), new_v.flatten(1)], 1)  # [T, 2 * kv_heads * head_dim]
    width = KV_HEADS * HEAD_DIM
    own = (kv[:, :width].view(-1, KV_HEADS, HEAD_DIM), kv[:, width:].view(-1, KV_HEADS, HEAD_DIM))
    expected, fresh_rows, row = ref.clone(), [], 0
    for (context, new), k, v in zip(SPECS, ks, vs):
        if context == 0:
            qs = q[row:row + new].double().transpose(0, 1)[None]
            kk, vv = (x.to(DEVICE).double().transpose(0, 1)[None] for x in (k, v))
            out = F.scaled_dot_product_attention(qs, kk, vv, is_causal=True, enable_gqa=True)
            expected[row:row + new] = out[0].transpose(0, 1)
            fresh_rows += range(row, row + new)
        row += new
    return layer, q, meta, ref, own, expected, fresh_rows


@LAYOUTS
@pytest.mark.parametrize("fmt", FORMATS)
def test_the_kernel_reads_a_fresh_sequences_keys_from_the_step(fmt: str, vt: bool) -> None:
    layer, q, meta, ref, own, expected, fresh_rows = _step(fmt, vt)
    out = prefill_attention(q, layer, meta.cu_seqlens_q, meta.seq_lens, meta.block_tables, len(SPECS), fresh_kv=own)
    assert _rel(out, expected) < TOL[torch.bfloat16]
    # the fresh rows are nearer their raw K/V's attention than the pool's: the path was taken
    assert _rel(out[fresh_rows], expected[fresh_rows]) < _rel(out[fresh_rows], ref[fresh_rows])
    plain = prefill_attention(q, layer, meta.cu_seqlens_q, meta.seq_lens, meta.block_tables, len(SPECS))
    assert _rel(plain, ref) < TOL[torch.bfloat16]


def test_the_rule_holds_for_8_bit_pools_on_a_gpu_only() -> None:
    layer, q = _step("int8", False)[:2]
    assert fresh_kv.fresh_from_step(q, layer) == (q.device.type == "cuda")
    assert not fresh_kv.fresh_from_step(q, torch.zeros(1, 2, 4, KV_HEADS, HEAD_DIM, device=q.device))


@LAYOUTS
@pytest.mark.parametrize("window", [None, 5])
def test_both_backends_follow_the_rule(vt: bool, window: int | None, monkeypatch) -> None:
    """With the rule on (as on a GPU), the Triton path and the torch path give the same step, the
    fresh sequences over their own K/V, with a sliding window too; the backends pass meta.fresh_kv
    as their store left it."""
    for module in (torch_backend, triton_backend):
        monkeypatch.setattr(module, "fresh_from_step", lambda q, kv_layer: True)
    layer, q, meta, _, own, expected, _ = _step("fp8_e4m3", vt)
    outs = []
    for backend in (torch_backend, triton_backend):
        meta.backend_plan = None
        meta.fresh_kv = own  # as store_kv leaves it
        outs.append(backend.forward(q, layer, meta, window=window))
    if window is None:
        assert _rel(outs[0], expected) < TOL[torch.bfloat16]
    else:  # the window changes what every long sequence sees
        assert _rel(outs[0], expected) > TOL[torch.bfloat16]
    assert _rel(outs[1], outs[0]) < TOL[torch.bfloat16]
