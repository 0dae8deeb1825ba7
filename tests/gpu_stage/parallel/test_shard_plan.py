"""ShardPlan: the shards of every tensor put back together are the whole model, for split and
replicated KV heads and a padded vocabulary; every loader yields exactly ShardPlan.take of its
whole tensors; unshardable sizes are refused naming the head counts."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from tiny_gguf import write_tiny_gguf

from gpu_stage.loaders.dummy_loader import PRESETS, dummy_state_dict, iter_dummy_weights
from gpu_stage.loaders.gguf_loader import FastGGUFReader, gguf_model_config, iter_gguf_tensors
from gpu_stage.loaders.hf_dir_loader import iter_safetensors
from gpu_stage.parallel.shard_plan import ShardPlan, check_shardable

TINY = PRESETS["tiny"]  # 4 heads, 2 KV heads, MLP 128, vocab 512, tied
# Untied, biased (Llama attention_bias: q/k/v and o_proj), one KV head, a vocabulary N does not divide.
MQA_BIASED = replace(TINY, num_kv_heads=1, attention_bias=True, tie_word_embeddings=False, vocab_size=509)


def reassemble(name: str, shards: list[torch.Tensor | None], plan0: ShardPlan) -> torch.Tensor:
    """The whole tensor from every rank's part (each replicated KV head once)."""
    rule = plan0.rule(name)
    if rule is None or rule.dim is None:
        return shards[0]
    plans = [ShardPlan(plan0.config, r, plan0.world_size) for r in range(plan0.world_size)]
    parts, seen = [], set()
    for plan, shard in zip(plans, shards):
        r = plan.rule(name)
        if (r.start, r.stop) in seen:  # a KV head held by several ranks
            continue
        seen.add((r.start, r.stop))
        parts.append(shard.narrow(r.dim, 0, r.stop - r.start))  # the vocabulary pad dropped
    return torch.cat(parts, dim=rule.dim)


@pytest.mark.parametrize("config,world", [(TINY, 1), (TINY, 2), (TINY, 4), (MQA_BIASED, 2), (MQA_BIASED, 4)])
def test_shards_put_back_together_are_the_model(config, world):
    full = dict(iter_dummy_weights(config, 3, torch.device("cpu"), torch.float32))
    plans = [ShardPlan(config, r, world) for r in range(world)]
    per_rank = [dict(iter_dummy_weights(config, 3, torch.device("cpu"), torch.float32, shard=p)) for p in plans]
    for name, tensor in full.items():
        shards = [ranks.get(name) for ranks in per_rank]
        assert torch.equal(reassemble(name, shards, plans[0]), tensor), name
        for plan, shard in zip(plans, shards):
            if shard is None:  # only o_proj's bias, off rank 0
                assert name.endswith("o_proj.bias") and plan.rank > 0
    local = plans[-1].local_config
    assert local.num_heads == config.num_heads // world and local.hidden_size == config.hidden_size
    assert local.num_kv_heads == max(1, config.num_kv_heads // world)
    assert local.vocab_size == config.vocab_size  # the embedding shard is the model's business
    vocab_rows = per_rank[-1]["model.embed_tokens.weight"].shape[0]
    assert vocab_rows == -(-config.vocab_size // world)


def test_each_rank_reads_the_kv_head_of_its_query_heads():
    for config, world in [(TINY, 2), (TINY, 4), (MQA_BIASED, 4), (replace(TINY, num_heads=8, num_kv_heads=4), 8)]:
        group = config.num_heads // config.num_kv_heads
        for rank in range(world):
            plan = ShardPlan(config, rank, world)
            first_q = rank * plan.num_local_heads
            last_q = first_q + plan.num_local_heads - 1
            assert first_q // group == plan.kv_head_start
            assert last_q // group == plan.kv_head_start + (plan.num_local_heads - 1) // group


def test_unshardable_sizes_name_the_head_counts():
    smollm2 = PRESETS["smollm2-135m"]  # 9 heads, 3 KV heads, MLP 1536
    check_shardable(smollm2, 3)
    with pytest.raises(ValueError, match="9 attention heads, 3 KV heads") as err:
        check_shardable(smollm2, 2)
    assert "9 attention heads do not divide by 2" in str(err.value)
    with pytest.raises(ValueError, match="3 KV heads neither divide by 2"):
        check_shardable(replace(smollm2, num_heads=6, num_kv_heads=3, intermediate_size=1536), 2)
    with pytest.raises(ValueError, match="MLP width 1536 does not divide by 9"):
        check_shardable(smollm2, 9)
    with pytest.raises(ValueError, match="at least 1"):
        ShardPlan(smollm2, 0, 0)


def test_safetensors_shards_read_only_their_part(tmp_path):
    full = dummy_state_dict("tiny", 1)
    save_file(full, str(tmp_path / "model.safetensors"))
    plan = ShardPlan(TINY, 1, 2)
    got = dict(iter_safetensors([tmp_path / "model.safetensors"], TINY, torch.device("cpu"), torch.float32, plan))
    assert got.keys() == full.keys()
    assert all(torch.equal(got[k], plan.take(k, full[k])) for k in full)


def test_gguf_shards_are_the_unpermuted_tensors_sliced(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "llama", tied=False)
    reader = FastGGUFReader(str(path))
    config = gguf_model_config({k: f.contents() for k, f in reader.fields.items()}, {t.name: t for t in reader.tensors})
    full = dict(iter_gguf_tensors(reader, config, torch.device("cpu"), torch.float32))
    plan = ShardPlan(config, 1, 2)
    got = dict(iter_gguf_tensors(reader, config, torch.device("cpu"), torch.float32, plan))
    assert got.keys() == full.keys()
    assert all(torch.equal(got[k], plan.take(k, full[k])) for k in full)
    assert got["model.layers.0.self_attn.q_proj.weight"].shape[0] == config.q_size // 2


def test_take_copies_out_of_views_and_arrays():
    plan = ShardPlan(TINY, 0, 2)
    whole = torch.randn(TINY.intermediate_size, TINY.hidden_size)
    part = plan.take("model.layers.0.mlp.gate_proj.weight", whole)
    assert part.untyped_storage().data_ptr() != whole.untyped_storage().data_ptr() and part.is_contiguous()
    array = np.arange(TINY.hidden_size * TINY.q_size, dtype=np.float32).reshape(TINY.hidden_size, TINY.q_size)
    array.flags.writeable = False  # as a memory-mapped GGUF tensor
    cols = plan.take("model.layers.0.self_attn.o_proj.weight", array)
    assert cols.is_contiguous() and torch.equal(cols, torch.from_numpy(array[:, : TINY.q_size // 2].copy()))
