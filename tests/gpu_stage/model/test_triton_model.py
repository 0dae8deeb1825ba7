"""The model and the runner with the Triton backend and ops equal the torch path (CPU: under the
Triton interpreter, tiny model; on a GPU the same tests run compiled)."""
from __future__ import annotations

import pytest
import torch
from tiny_hf_models import hf_model, model_config

pytest.importorskip("triton")

from gpu_stage.attention import get_attention_backend  # noqa: E402
from gpu_stage.attention.metadata import build_metadata  # noqa: E402
from gpu_stage.kv.cache import KvCache  # noqa: E402
from gpu_stage.loaders.model_source import ModelSource  # noqa: E402
from gpu_stage.model import get_layer_ops  # noqa: E402
from gpu_stage.model.llama import LlamaForCausalLM  # noqa: E402
from gpu_stage.model_runner import ModelRunner  # noqa: E402
from stages.messages import NewRequestData, ScheduledChunk, StepBatch  # noqa: E402
from stages.sampling import SamplingParams  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class _Tokenizer:
    vocab_size = 400
    eos_token_ids = frozenset({1})


def _model(hf, backend: str) -> LlamaForCausalLM:
    model = LlamaForCausalLM(model_config(hf), DEVICE, torch.float32, get_attention_backend(backend), get_layer_ops(backend))
    model.load_weights((k, v.to(DEVICE)) for k, v in hf.state_dict().items())
    return model


@pytest.mark.parametrize("name_sampled_rows", [False, True], ids=["all-rows", "last-layer-on-sampled-rows"])
def test_model_logits_triton_equal_torch(name_sampled_rows: bool) -> None:
    hf = hf_model("llama", num_hidden_layers=2)
    models = {b: _model(hf, b) for b in ("torch", "triton")}
    gen = torch.Generator().manual_seed(0)
    p1, p2 = torch.randint(2, 400, (13,), generator=gen).tolist(), torch.randint(2, 400, (9,), generator=gen).tolist()
    logits = {}
    for name, model in models.items():
        cache = KvCache(model.config, 12, 4, DEVICE, torch.float32)
        t1, t2 = [7, 2, 9, 4], [5, 11, 3]
        steps = [  # a prefill chunk; then a prefill mixed with a continued chunk; then two decodes
            ([8], [8], [t2[:2]], p2[:8], [7]),
            ([13, 1], [13, 9], [t1, t2], p1 + p2[8:], [12, 13]),
            ([1, 1], [14, 10], [t1, t2], [5, 6], [0, 1]),
        ]
        out = []
        for q_lens, s_lens, tables, ids, rows in steps:
            meta = build_metadata(q_lens, s_lens, tables, 4, DEVICE, sample_rows=rows if name_sampled_rows else None)
            out.append(model(torch.tensor(ids, device=DEVICE), meta.positions, cache, meta, torch.tensor(rows, device=DEVICE)))
        logits[name] = torch.cat(out)
    ref, got = logits["torch"].double(), logits["triton"].double()
    assert float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref)) < 1e-5


@pytest.mark.parametrize("kv_cache_dtype,v_transposed", [("auto", False), ("int8", False), ("fp8_e4m3", False),
                                                         ("int8", True), ("fp8_e4m3", True)])
def test_runner_triton_backend_matches_torch_backend(kv_cache_dtype: str, v_transposed: bool, monkeypatch) -> None:
    """v_transposed: an 8-bit pool in the V-transposed layout (gpu_stage/kv/layout.py's switch)."""
    from gpu_stage.kv import layout

    monkeypatch.setattr(layout, "v_transposed_by_default", lambda fmt, device: v_transposed)
    hf = hf_model("llama", num_hidden_layers=2)
    state = hf.state_dict()
    source = ModelSource("tiny", model_config(hf), lambda d, dt: ((k, v.to(d, dt)) for k, v in state.items()), _Tokenizer(), "t")
    prompts = {"a": list(range(2, 19)), "b": list(range(40, 45))}
    outputs = {}
    for backend in ("torch", "triton"):
        runner = ModelRunner.build(source, DEVICE, torch.float32, 16, 4, max_num_batched_tokens=32, max_num_seqs=4,
                             attention_backend=backend, enforce_eager=True, kv_cache_dtype=kv_cache_dtype)
        assert runner.kv_cache.v_transposed == v_transposed
        new = [NewRequestData(r, p, SamplingParams(temperature=0.0, logprobs=2)) for r, p in prompts.items()]
        chunks = [ScheduledChunk("a", prompts["a"][:10], 0, [3, 5, 7], False), ScheduledChunk("b", prompts["b"], 0, [2, 9], True)]
        got = {r: [] for r in prompts}
        logprobs = []
        result = runner.execute(StepBatch(0, new, chunks))
        for step in range(1, 5):
            for t in result.sampled:
                got[t.request_id].append(t.token_id)
                logprobs.append(t.logprob)
            a_done = len(prompts["a"]) if step > 1 else 10
            a_ids = prompts["a"][10:] if step == 1 else got["a"][-1:]
            chunks = [ScheduledChunk("a", a_ids, a_done + max(0, len(got["a"]) - 1), [3, 5, 7, 8, 10], True),
                      ScheduledChunk("b", got["b"][-1:], len(prompts["b"]) + len(got["b"]) - 1, [2, 9, 12], True)]
            result = runner.execute(StepBatch(step, [], chunks))
        outputs[backend] = (got, logprobs)
    assert outputs["triton"][0] == outputs["torch"][0]
    assert outputs["triton"][1] == pytest.approx(outputs["torch"][1], abs=1e-4)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # padded rows hold garbage by design
@pytest.mark.skipif(torch.cuda.is_available(), reason="simulates the graph path on CPU tensors (the GPU runs it for real)")
@pytest.mark.parametrize("kv_cache_dtype", ["auto", "int8"])
def test_graph_path_of_execute_on_cpu(kv_cache_dtype: str) -> None:
    """execute()'s CUDA-graph path (bucket choice, padding, logits rows) without a GPU: "replay" runs
    the model on views taken only from the bucket's layout and the shape, as a captured graph would."""
    from gpu_stage.attention.metadata import AttentionMetadata, SampledRows
    from gpu_stage.cuda_graphs import CudaGraphRunner
    from gpu_stage.step_layout import make_layout

    class ReplayOnCpu(CudaGraphRunner):
        shapes_used: list = []

        def replay(self, shape):
            self.shapes_used.append(shape)
            lay = make_layout(shape.num_tokens, shape.num_seqs, shape.width, shape.num_seqs if shape.decode else 1, 0)
            buf = self.inputs._host[self.inputs._turn]

            def v(name):
                return lay.view(buf, name)

            n, num_logits = shape.num_seqs, shape.num_seqs if shape.decode else 1
            # a graph's host lengths are its capture's: only their count may matter
            sampled = SampledRows(v("sampled_seq"), v("sampled_seq_lens"), v("sampled_cu"), [1] * num_logits)
            meta = AttentionMetadata(v("cu_seqlens_q"), v("seq_lens"), v("block_tables").view(n, shape.width),
                                     v("slot_mapping"), v("positions"), 1 if shape.decode else shape.num_tokens,
                                     self.max_model_len, self.kv_cache.block_size, [1] * n, [1] * n,
                                     static_shape=True, sampled=sampled)
            return self.model(v("input_ids"), v("positions"), self.kv_cache, meta, v("logits_indices"))

    hf = hf_model("llama", num_hidden_layers=1)
    state = hf.state_dict()
    source = ModelSource("tiny", model_config(hf), lambda d, dt: ((k, v.to(d, dt)) for k, v in state.items()), _Tokenizer(), "t")
    outputs = {}
    for graphs in (False, True):
        runner = ModelRunner.build(source, "cpu", torch.float32, 32, 4, max_num_batched_tokens=16, max_num_seqs=4,
                             attention_backend="triton", max_model_len=40, kv_cache_dtype=kv_cache_dtype)
        if graphs:
            runner.graphs = ReplayOnCpu(runner.model, runner.kv_cache, runner.inputs, 4, 16, 40, prefill_buckets=(8, 16))
        new = [NewRequestData(r, [3 + i] * 5, SamplingParams(temperature=0.0)) for i, r in enumerate("abc")]
        tables = {"a": [1, 2, 3], "b": [4, 5, 6], "c": [7, 8, 9]}
        got = {r: [] for r in "abc"}
        # step 0: prefill "a" alone (prefill bucket 8); step 1: "b" and "c" prefill (eager, two sequences)
        runner.execute(StepBatch(0, new[:1], [ScheduledChunk("a", [3] * 5, 0, tables["a"], True)]))
        for t in runner.execute(StepBatch(1, new[1:], [ScheduledChunk(r, [3 + i] * 5, 0, tables[r], True)
                                                      for i, r in ((1, "b"), (2, "c"))])).sampled:
            got[t.request_id].append(t.token_id)
        for step in range(2, 5):  # decodes of three sequences (bucket 4, one padded row); "a" is one token behind
            chunks = [ScheduledChunk(r, [got[r][-1] if got[r] else 3], 4 + len(got[r]) + (r == "a"), tables[r], r != "a")
                      for r in "abc"]
            for t in runner.execute(StepBatch(step, [], chunks)).sampled:
                got[t.request_id].append(t.token_id)
        outputs[graphs] = got
    assert outputs[True] == outputs[False]
    assert {s.decode for s in ReplayOnCpu.shapes_used} == {True, False}
    assert all(len(v) == 4 for k, v in outputs[True].items() if k != "a")


def test_model_with_every_one_row_product_in_gemv_equals_torch() -> None:
    """Batch-1 steps (one row per product, the lm_head on one row) through the gemv kernel, fused
    gate_up + SiLU included: the same logits as the torch path. One layer holds every product's
    shape (test_model_logits_triton_equal_torch runs two layers)."""
    from gpu_stage.kernels.gemv import INTERPRETER_CONFIG

    hf = hf_model("llama", num_hidden_layers=1)
    models = {b: _model(hf, b) for b in ("torch", "triton")}
    triton_model = models["triton"]
    for layer in triton_model.layers:
        for w, act in ((layer.qkv_weight, "none"), (layer.o_weight, "none"), (layer.down_weight, "none"),
                       (layer.gate_up_weight, "silu_mul")):
            triton_model.ops.gemv_plan[(w.shape[0], w.shape[1], act)] = dict(INTERPRETER_CONFIG)
    head = triton_model.embed_weight if triton_model.lm_head_weight is None else triton_model.lm_head_weight
    triton_model.ops.gemv_plan[(head.shape[0], head.shape[1], "none")] = dict(INTERPRETER_CONFIG)
    prompt = [5, 9, 2, 7, 11]
    logits = {}
    for name, model in models.items():
        cache = KvCache(model.config, 4, 4, DEVICE, torch.float32)
        out = []
        for pos, token in enumerate(prompt):  # one token per step: every product has one row
            meta = build_metadata([1], [pos + 1], [[1, 2]], 4, DEVICE)
            out.append(model(torch.tensor([token], device=DEVICE), meta.positions, cache, meta,
                             torch.tensor([0], device=DEVICE)))
        logits[name] = torch.cat(out)
    ref, got = logits["torch"].double(), logits["triton"].double()
    assert float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref)) < 1e-5
