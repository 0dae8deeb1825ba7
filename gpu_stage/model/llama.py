"""The Llama family (Llama 2/3/3.x, Mistral, Qwen2 with qkv bias, SmolLM2) over a paged KV cache.

Tokens of all sequences of a step are flattened into one dimension T (no padding); attention reads
each sequence's context through the metadata's block tables. q/k/v are fused into one `qkv_proj`
and gate/up into one `gate_up_proj` at load time (two matmuls fewer per layer, larger GEMMs). The
lm_head runs only on `logits_indices` (the last token of each sampled sequence, and the prompt
positions of a request that asked for prompt logprobs), never on the rest of a prompt.
Arithmetic follows transformers' LlamaForCausalLM (RMSNorm in float32, cos/sin cast to the model
dtype) so logits match it within rounding.

The residual add is carried into the next norm (`add_rms_norm`), so the Triton ops fuse the two
into one kernel; with the torch ops the arithmetic is the same as h = h + out; norm(h). Norms, RoPE,
SiLU-and-multiply and the matrix products go through `ops` (torch_ops.TorchOps or the Triton
kernels, whose one-row products may run in the gemv kernel), attention through `attention` (a
backend module): the CPU path and the GPU path are the same model code.

Tensor parallelism (`parallel`, a gpu_stage.parallel.TensorParallel; None on one device, which then
runs no extra line): the model is built with the shard's shape (`parallel.local_config`: its heads,
KV heads and MLP width), loads the shard's weights (parallel/shard_plan.py), and calls
`parallel` where the ranks meet: an all-reduce after o_proj and after down_proj, the vocabulary-
parallel embedding, and the lm_head's logits gathered over the vocabulary.

A family that differs inside its layers (say, norms on q and k) reuses this code: its layer
subclasses LlamaDecoderLayer (`project_qkv`: what RoPE and the KV store get; `named_weights`: its
own tensors) and its model LlamaForCausalLM (`layer_class`; `_layer_weight_shapes`, llama_weights.py).
"""
from __future__ import annotations

from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from gpu_stage.attention import torch_backend
from gpu_stage.attention.metadata import AttentionMetadata, rows_metadata
from gpu_stage.kv.cache import KvCache
from gpu_stage.model.config import ModelConfig
from gpu_stage.model.llama_weights import LlamaWeights
from gpu_stage.model.rotary import RotaryEmbedding, token_seq_lens
from gpu_stage.model.torch_ops import TorchOps


def _param(*shape: int, device: torch.device | str, dtype: torch.dtype) -> nn.Parameter:
    # Uninitialised: every parameter is overwritten by load_weights (checked there).
    return nn.Parameter(torch.empty(shape, device=device, dtype=dtype), requires_grad=False)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, device: torch.device | str, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = _param(size, device=device, dtype=dtype)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [N, hidden] -> [N, hidden]; the variance in float32 as in HF."""
        return TorchOps.rms_norm(x, self.weight, self.eps)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, attention: ModuleType, device, dtype, ops=TorchOps,
                 window: int | None = None, parallel=None) -> None:
        super().__init__()
        c = config
        self.ops = ops
        self.window = window  # sliding window (keys seen, the query's own included); None: all
        self.parallel = parallel
        self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        self.q_size, self.kv_size = c.q_size, c.kv_size
        self.attention = attention
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, device, dtype)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, device, dtype)
        # [q_size + 2 * kv_size, hidden]: rows q | k | v, each in HF's row order.
        self.qkv_weight = _param(c.q_size + 2 * c.kv_size, c.hidden_size, device=device, dtype=dtype)
        self.qkv_bias = (
            _param(c.q_size + 2 * c.kv_size, device=device, dtype=dtype) if c.attention_bias else None
        )
        self.o_weight = _param(c.hidden_size, c.q_size, device=device, dtype=dtype)
        # HF Llama puts attention_bias on o_proj too; Qwen2 only on q/k/v. Sharded, rank 0 alone
        # adds it (the all-reduce sums the ranks' outputs).
        has_o_bias = c.attention_bias and c.architecture != "qwen2" and (parallel is None or parallel.rank == 0)
        self.o_bias = _param(c.hidden_size, device=device, dtype=dtype) if has_o_bias else None
        # [2 * intermediate, hidden]: rows gate | up.
        self.gate_up_weight = _param(2 * c.intermediate_size, c.hidden_size, device=device, dtype=dtype)
        self.down_weight = _param(c.hidden_size, c.intermediate_size, device=device, dtype=dtype)

    def forward(
        self,
        h: torch.Tensor,  # [T, hidden]: the previous layer's output (its MLP delta), or the embeddings
        residual: torch.Tensor | None,  # [T, hidden]: the residual stream before h; None in layer 0
        cos: torch.Tensor,  # [T, head_dim]
        sin: torch.Tensor,  # [T, head_dim]
        kv_layer: torch.Tensor,  # [num_blocks, 2, block_size, kv_heads, head_dim]
        meta: AttentionMetadata,
        only_rows: tuple[torch.Tensor, AttentionMetadata] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (mlp delta, residual stream before it); their sum is the layer's output. With
        `only_rows` (rows [S], their metadata from attention.metadata.rows_metadata) every row's K/V
        is still stored, but the output is computed for those S rows only, in their order."""
        ops = self.ops
        num_tokens = h.shape[0]
        norm1, norm2 = self.input_layernorm, self.post_attention_layernorm
        if residual is None:
            residual, x = h, ops.rms_norm(h, norm1.weight, norm1.eps)
        else:
            x, residual = ops.add_rms_norm(h, residual, norm1.weight, norm1.eps)
        q, k, v = self.project_qkv(x)
        q, k = self.attention.rope_store_kv(kv_layer, q, k, v, cos, sin, meta, ops)
        if only_rows is not None:
            rows, meta = only_rows
            q, residual, num_tokens = q.index_select(0, rows), residual.index_select(0, rows), rows.shape[0]
        attn = self.attention.forward(q, kv_layer, meta, window=self.window)  # [T, H, D]
        out = ops.linear(attn.reshape(num_tokens, self.q_size), self.o_weight, self.o_bias)
        if self.parallel is not None:
            out = self.parallel.all_reduce(out)  # [T, hidden]: every rank's heads
        x, residual = ops.add_rms_norm(out, residual, norm2.weight, norm2.eps)
        act = ops.gate_up_silu(x, self.gate_up_weight)  # [T, inter]
        down = ops.linear(act, self.down_weight)
        if self.parallel is not None:
            down = self.parallel.all_reduce(down)
        return down, residual  # [T, hidden] each

    def project_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The normed input [T, hidden] -> q [T, H, D], k and v [T, Hkv, D] (views of one
        fused product), as RoPE and the KV store take them."""
        num_tokens = x.shape[0]
        qkv = self.ops.linear(x, self.qkv_weight, self.qkv_bias)  # [T, q_size + 2 * kv_size]
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        return (q.view(num_tokens, self.num_heads, self.head_dim), k.view(num_tokens, self.num_kv_heads, self.head_dim),
                v.view(num_tokens, self.num_kv_heads, self.head_dim))

    def named_weights(self) -> dict[str, torch.Tensor | None]:
        """The layer's tensors that load as they are, by HF name after `model.layers.<i>.` (None:
        this configuration has no such tensor)."""
        return {
            "self_attn.o_proj.weight": self.o_weight,
            "self_attn.o_proj.bias": self.o_bias,
            "mlp.down_proj.weight": self.down_weight,
            "input_layernorm.weight": self.input_layernorm.weight,
            "post_attention_layernorm.weight": self.post_attention_layernorm.weight,
        }


class LlamaForCausalLM(LlamaWeights, nn.Module):
    layer_class = LlamaDecoderLayer  # a family that differs inside its layers subclasses both

    def __init__(
        self,
        config: ModelConfig,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        attention: ModuleType = torch_backend,
        ops=TorchOps,  # torch_ops.TorchOps or a triton_ops.TritonOps instance
        parallel=None,  # a parallel.TensorParallel (then `config` is its local_config), or None
    ) -> None:
        super().__init__()
        c = config
        assert parallel is None or c == parallel.local_config, "a sharded model takes its shard's shape"
        self.config = config
        self.ops = ops
        self.parallel = parallel
        vocab = c.vocab_size if parallel is None else parallel.plan.vocab_shard_size  # rows held here
        self.embed_weight = _param(vocab, c.hidden_size, device=device, dtype=dtype)
        self.layers = nn.ModuleList(
            self.layer_class(c, attention, device, dtype, ops, c.layer_window(i), parallel)
            for i in range(c.num_layers)
        )
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps, device, dtype)
        self.lm_head_weight = (
            None if c.tie_word_embeddings else _param(vocab, c.hidden_size, device=device, dtype=dtype)
        )
        self.rotary = RotaryEmbedding(c, device)

    @property
    def head_weight(self) -> torch.Tensor:
        """The lm_head's weight: its own, or the embedding's when they are tied."""
        return self.embed_weight if self.lm_head_weight is None else self.lm_head_weight

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,  # [T] int64 or int32, all sequences flattened
        positions: torch.Tensor,  # [T] int64 or int32, absolute positions
        kv_cache: KvCache,
        meta: AttentionMetadata,
        logits_indices: torch.Tensor,  # [S] int64 or int32 rows of T to produce logits for
    ) -> torch.Tensor:
        """-> logits [S, vocab] float32."""
        return self.compute_logits(self.hidden_states(input_ids, positions, kv_cache, meta, logits_indices))

    def hidden_states(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_cache: KvCache,
        meta: AttentionMetadata,
        logits_indices: torch.Tensor,
    ) -> torch.Tensor:
        """forward's arguments -> the final norm's output at `logits_indices` [S, hidden], what the
        lm_head reads (a step with prompt logprobs runs the lm_head on its rows a slice at a time)."""
        if self.parallel is None:
            h = F.embedding(input_ids, self.embed_weight)  # [T, hidden]
        else:
            h = self.parallel.embed(input_ids, self.embed_weight)
        # Dynamic NTK rotates by each sequence's length (read on the device: no host sync)
        seq_lens = token_seq_lens(meta.cu_seqlens_q, meta.seq_lens, h.shape[0]) if self.rotary.dynamic else None
        cos, sin = self.rotary.cos_sin(positions, h.dtype, seq_lens)  # [T, head_dim] each
        residual = None
        last = len(self.layers) - 1
        # Only the sampled rows of the last layer's output are read: when they are fewer than the
        # step's tokens, that layer stores every row's K/V and computes the rest for them alone
        # (at 2,048 prompt tokens ~1/32 of the step's products). Decode steps sample every row.
        only_rows = None
        if meta.sampled is not None and logits_indices.shape[0] < input_ids.shape[0]:
            only_rows = logits_indices, rows_metadata(meta, logits_indices)
        for i, layer in enumerate(self.layers):
            h, residual = layer(h, residual, cos, sin, kv_cache.layer(i), meta, only_rows if i == last else None)
        norm = self.norm
        if residual is None:
            h = self.ops.rms_norm(h[logits_indices], norm.weight, norm.eps)  # [S, hidden]
        elif only_rows is not None:  # the layer's outputs are the sampled rows already
            h = self.ops.add_rms_norm(h, residual, norm.weight, norm.eps)[0]
        else:  # only the sampled rows need the last residual add
            h = self.ops.add_rms_norm(h[logits_indices], residual[logits_indices], norm.weight, norm.eps)[0]
        return h

    def compute_logits(self, h: torch.Tensor) -> torch.Tensor:
        """The lm_head: [S, hidden] -> logits [S, vocab] float32 (tensor parallel: every rank
        calls it on the same rows, since the shards' logits are gathered)."""
        logits = self.ops.linear(h, self.head_weight)  # [S, vocab] (sharded: [S, vocab / N])
        if self.parallel is not None:
            logits = self.parallel.gather_vocab(logits)
        return logits.float()
