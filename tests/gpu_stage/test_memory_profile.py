"""The memory profile's largest step (profile_num_blocks) runs through the model, the prompt-logprob
slice and the sampler; on CPU with the CUDA counters replaced (the real profile needs a GPU)."""
from __future__ import annotations

import torch

from gpu_stage import memory_profile
from gpu_stage.kv.format import resolve_kv_format
from gpu_stage.loaders.dummy_loader import dummy_preset, dummy_state_dict
from gpu_stage.model.llama import LlamaForCausalLM
from gpu_stage.sampling.sampler import Sampler
from gpu_stage.step_inputs import StepInputs


def test_the_largest_step_scores_a_prompt_and_samples(monkeypatch) -> None:
    config = dummy_preset("tiny")
    model = LlamaForCausalLM(config, "cpu", torch.float32)
    model.load_weights(dummy_state_dict("tiny", 0).items())
    lm_head_rows: list[int] = []
    compute_logits = model.compute_logits
    monkeypatch.setattr(model, "compute_logits", lambda h: (lm_head_rows.append(h.shape[0]), compute_logits(h))[1])

    def fake_profile_step(run, temporary_bytes, utilization, graph_reserve_bytes, device):
        run()
        return memory_profile.MemoryProfile(2**30, 0, 0, 0, 0, utilization)

    monkeypatch.setattr(memory_profile, "profile_step", fake_profile_step)
    inputs = StepInputs(64, 4, 16, 4, "cpu")
    num_blocks = memory_profile.profile_num_blocks(model, inputs, Sampler(), torch.float32,
                                                   resolve_kv_format("auto", torch.float32), 0.5, 0)
    assert num_blocks > 2
    assert lm_head_rows == [4, 15]  # a sampled row per sequence, then the first's 15 prompt rows
