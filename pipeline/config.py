"""EngineConfig: every knob of the engine, with the defaults `ttft serve` uses."""
from __future__ import annotations

from dataclasses import dataclass, field

from ingress.limits import IngressLimits
from scheduler.config import PREFILL_BACKLOG_STEPS


@dataclass
class EngineConfig:
    model: str | None = None  # None: the packaged SmolLM2 GGUF
    served_model_name: str | None = None
    seed: int = 0  # dummy weights are a function of (preset, seed)
    device: str = "auto"  # auto | cpu | cuda
    dtype: str = "auto"  # auto (bf16 on GPU, fp32 on CPU) | float32 | bfloat16 | float16
    max_model_len: int | None = None  # default: the model's, lowered to what the KV pool holds
    kv_cache_gb: float | None = None  # default: 1 GiB on CPU
    num_kv_blocks: int | None = None  # overrides kv_cache_gb (tests, reproducible benchmarks)
    block_size: int = 16
    gpu_memory_utilization: float = 0.9  # GPU: share of device memory for weights, activations, KV
    attention_backend: str = "auto"  # auto (triton on a GPU, torch on CPU) | triton | torch
    enforce_eager: bool = False  # no CUDA graphs
    # Ranks the model is sharded over (gpu_stage/parallel): one process per GPU, this one rank 0.
    tensor_parallel_size: int = 1
    # Mixed steps (prefill chunks beside decodes) of up to this many tokens replay CUDA graphs
    # (gpu_stage/cuda_graphs.py); 0: they run eagerly.
    mixed_graph_max_tokens: int = 1024
    max_num_seqs: int = 64  # running requests
    # Per-step token budget. None: 512 on CPU (a step's cost grows with its tokens there, so small
    # steps keep short prompts and decodes moving), 8192 on a GPU (steps are weight-read bound).
    max_num_batched_tokens: int | None = None
    max_queued: int = 1024  # waiting requests; past running + queued: 503
    # Chunk cap for one prefill; below it a prompt is "short". None: half the step budget.
    long_prefill_threshold: int | None = None
    # Lanes: prefill tokens that may join a step after its first prefill (whole prompts only), so
    # a burst gets its first tokens shortest first in small steps. None: 768 on a GPU (chosen in
    # the H200 simulator, bench/results/20261129-sim/reference.md), 0 (no cap) on CPU.
    prefill_step_tokens: int | None = None
    prefill_backlog_steps: int = PREFILL_BACKLOG_STEPS  # lanes: see SchedulerConfig
    # False: no chunked prefill (ablations): each prompt in one step, so the step budget must hold
    # max_model_len (the scheduler refuses to start otherwise).
    enable_chunked_prefill: bool = True
    scheduler_policy: str = "lanes"  # lanes | fcfs (vLLM V1's arrival order)
    # While a decode step runs, build and send the next one, its inputs filled in on the device
    # (scheduler/config.py): no host turn-around between decode steps. None: on a GPU only (on
    # CPU the model runs on the host cores the scheduler would overlap with: measured no gain).
    async_scheduling: bool | None = None
    enable_prefix_caching: bool = True
    shadow: bool = True  # reserve each request's predicted KV footprint at arrival
    # KV tiers below the device pool (prefix caching must be on): host memory (pinned on a GPU)
    # and a directory of block files that survives restarts. 0 / None: off.
    kv_host_gb: float = 0.0
    kv_disk_path: str | None = None
    kv_disk_gb: float = 16.0
    kv_disk_threads: int = 4
    # Copy each block to host memory as soon as it is cached, beside later steps (False: only
    # when the device pool evicts it, in the step that reuses it).
    kv_offload_early: bool = True
    # Channel and buffer bounds (every queue is bounded).
    scheduler_inbox_size: int = 4096
    gpu_inbox_size: int = 2
    emitter_inbox_size: int = 64
    stream_buffer_items: int = 256
    # Deadlines.
    request_timeout_s: float | None = None
    body_read_timeout_s: float = 30.0  # a client that sends its body slower than this gets 408
    max_connections: int = 4096  # HTTP requests in flight (streams included); past it: 503 at once
    stream_stall_timeout_s: float = 30.0
    shutdown_grace_s: float = 30.0
    # Tokenize in a worker thread when the text is longer than this (short texts are faster inline).
    offload_tokenize_chars: int = 4096
    num_tokenizer_threads: int = 2
    cpu_threads: int | None = None  # torch intra-op threads on CPU (default: torch's own choice)
    max_traces: int = 1000  # recent traces kept for /debug/traces
    profile_dir: str | None = None  # enables POST /start_profile, /stop_profile (torch.profiler traces here)
    limits: IngressLimits = field(default_factory=IngressLimits)

    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def resolve_budgets(self) -> None:
        """Fill the device-dependent defaults in place (called once at start-up)."""
        if self.max_num_batched_tokens is None:
            self.max_num_batched_tokens = 8192 if self.resolved_device() == "cuda" else 512
        if self.long_prefill_threshold is None:
            self.long_prefill_threshold = max(1, self.max_num_batched_tokens // 2)
        if self.prefill_step_tokens is None:
            self.prefill_step_tokens = 768 if self.resolved_device() == "cuda" else 0
        if self.async_scheduling is None:
            self.async_scheduling = self.resolved_device() == "cuda"

    def resolved_dtype(self) -> str:
        if self.dtype != "auto":
            return self.dtype
        return "bfloat16" if self.resolved_device() == "cuda" else "float32"
