"""EngineConfig: every knob of the engine, with the defaults `ttft serve` uses.

Each field made with `option()` is also a `ttft serve` flag (stages/options.py derives the parser
from these fields): adding a flag is adding its field here, then using it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from protocol.limits import IngressLimits
from protocol.reasoning.parser import REASONING_PARSER_NAMES
from protocol.tool_calls.registry import TOOL_CALL_PARSER_NAMES
from scheduler.config import PREFILL_BACKLOG_STEPS
from gpu_stage.kv.format import KV_CACHE_DTYPES
from stages.options import option

# Concurrent lanes' step budgets: on a GPU a decode step of an 8B model takes ~6.5 ms, so a short
# request waits at most about two of them; on CPU (SmolLM2) chosen by the interference workload.
GPU_STEP_BUDGET_MS = 15.0
CPU_STEP_BUDGET_MS = 1500.0


@dataclass
class EngineConfig:
    model: str | None = option(None, "a .gguf file, a Hugging Face directory or dummy:<preset> "
                                     "(default: the packaged SmolLM2-135M-Instruct)")
    served_model_name: str | None = option(None, "the name the API reports")
    # vLLM's flag: a file, or the template itself (what has braces or a newline and is no file).
    chat_template: str | None = option(None, "a Jinja chat template file replacing the model's (sandboxed as "
                                             "the model's is)")
    # vLLM's flags (protocol/tool_calls/, protocol/reasoning/); tool_choice "auto" also needs
    # --enable-auto-tool-choice (IngressLimits).
    tool_call_parser: str | None = option(None, "the format the model writes tool calls in, parsed into "
                                                "message.tool_calls for tool_choice auto",
                                          choices=TOOL_CALL_PARSER_NAMES)
    reasoning_parser: str | None = option(None, "put the text inside <think>...</think> into reasoning_content",
                                          choices=REASONING_PARSER_NAMES)
    seed: int = option(0, "seed of dummy weights")  # dummy weights are a function of (preset, seed)
    device: str = option("auto", "where the model runs (auto: cuda when there is one)",
                         choices=("auto", "cpu", "cuda"))
    dtype: str = option("auto", "auto: bfloat16 on a GPU, float32 on CPU",
                        choices=("auto", "float32", "bfloat16", "float16"))
    max_model_len: int | None = option(None, "prompt + output tokens of one request (default: the "
                                             "model's, lowered to what the KV pool holds)")
    kv_cache_gb: float | None = option(None, "KV pool size (default 1 GiB on CPU)")
    # Tests and reproducible benchmarks size the pool in blocks.
    num_kv_blocks: int | None = option(None, "KV pool size in blocks (overrides --kv-cache-gb)")
    block_size: int = option(16, "tokens per KV block")
    # 8-bit formats hold a bf16 scale per token and KV head beside the values (gpu_stage/kv/layout.py).
    kv_cache_dtype: str = option("auto", "KV pool format: auto (the model's dtype), a float dtype, or 8 bits with a "
                                         "scale per token and head (fp8 = fp8_e4m3)", choices=KV_CACHE_DTYPES)
    gpu_memory_utilization: float = option(0.9, "GPU: share of device memory for weights, activations and KV")
    attention_backend: str = option("auto", "auto: triton on a GPU, torch on CPU",
                                    choices=("auto", "triton", "torch"))
    enforce_eager: bool = option(False, "no CUDA graphs", action="store_true")
    # A prefill chunk over >= 8,192 cached tokens attends through torch's fused attention on
    # its gathered K/V (gpu_stage/attention/long_context.py); CUDA with triton only.
    long_context_attention: str = option(
        "auto", "chunks over a long cached context: auto (cuDNN, else flash, checked at start-up), flash, or "
                "off (the Triton kernel)", choices=("auto", "flash", "off"))
    # Products of 2-512 rows on the split-K Triton kernel (gpu_stage/model/skinny_products.py); off until
    # a GPU A/B (lab/skinny_gemm_gpu.py, then the server) shows it faster than cuBLAS.
    skinny_gemm: str = option("off", "products of 2-512 rows on the split-K Triton kernel that streams the "
                                     "weights once (needs the Triton backend)", choices=("off", "on"))
    # Ranks the model is sharded over (gpu_stage/parallel): one process per GPU, this one rank 0.
    tensor_parallel_size: int = option(1, "shard the model over N GPUs (N processes; under torchrun, its ranks)",
                                       aliases=("-tp",))
    # Mixed steps of up to this many tokens replay CUDA graphs (gpu_stage/cuda_graphs.py).
    mixed_graph_max_tokens: int = option(1024, "largest mixed step (prefill beside decodes) replayed as a "
                                               "CUDA graph; 0: none")
    max_num_seqs: int = option(64, "running requests")
    # On CPU a step's cost grows with its tokens, so small steps keep short prompts and decodes
    # moving; on a GPU steps are weight-read bound. 1,024 on CPU, not less: a prompt's prefill
    # there costs several decode steps whatever else its step holds, so the streams' stalls are set
    # by how many steps carry a prefill, and two prompts sharing one step halve them
    # (bench/results/20261207-cpu/cpu-step-defaults/: ITL P95 1.4-2.3x its P50 against 5.4-7.2x).
    max_num_batched_tokens: int | None = option(None, "per-step token budget (default 1024 on CPU, 8192 on a GPU)")
    max_queued: int = option(1024, "waiting requests; past them: 503")
    long_prefill_threshold: int | None = option(
        None, "chunk cap for one prefill per step (lanes: not for a prompt alone in the server); shorter "
              "uncached prompts take the fast lane (default: half the step budget on a GPU, a quarter on CPU)")
    # So that a burst gets its first tokens shortest first in small steps (each default chosen in a
    # simulation of its device's step cost). 256 on CPU: a second prompt of up to the fast lane's
    # 256 tokens joins the first one's step (see max_num_batched_tokens), a longer one does not.
    prefill_step_tokens: int | None = option(
        None, "lanes: prefill tokens that may join a step after its first prefill, whole prompts only "
              "(default 768 on a GPU, 256 on CPU; 0: no cap)")
    prefill_backlog_steps: int = option(  # why: see SchedulerConfig
        PREFILL_BACKLOG_STEPS, "lanes: while the waiting prompts hold this many full steps of tokens, "
                               "prompts as long as a step's first join it past the cap (0: never)")
    # Off by default until a GPU sweep of bench/long_chunks.py shows it beats fixed chunks.
    context_aware_chunks: bool = option(
        False, "lanes: a long prompt's chunks shrink as its context grows, so that each step costs about "
               "what a chunk costs at no context (scheduler/context_chunks.py)")
    # A short request or a stream's next token never waits for a long prompt's whole chunk: the
    # chunk is cut to a step time (scheduler/step_budget.py). Off: for the ablation.
    # On by default where it is measured (CPU: a short request's TTFT during a long prefill 5.7-8.4x
    # its idle P50 without it, 1.4-2.0x with it); on a GPU it waits for the interference workload's run.
    concurrent_lanes: bool | None = option(
        None, "while a decode or a short prompt waits, cut long prompts' chunks so that no step is predicted "
              "to take longer than --step-budget-ms (a long prompt alone keeps full chunks; default: on CPU)")
    step_budget_ms: float | None = option(
        None, "concurrent lanes: the longest predicted step while a latency-bound request waits "
              f"(default {GPU_STEP_BUDGET_MS:g} on a GPU, {CPU_STEP_BUDGET_MS:g} on CPU)")
    # Off by default: beside a CPU decode step only ~32 prefill tokens fit, so a prompt's prefill
    # spreads over most steps, and the ITL P95 comes within 2x the P50 by raising the P50, the
    # TTFT and the run's time (bench/results/20261207-cpu/decode-ratio-probe/). For streams that
    # must not stall whatever it costs.
    step_decode_ratio: float = option(
        0.0, "concurrent lanes: while decodes run, a step that opens with a prefill chunk is cut to at most this "
             "many times its decodes' predicted time (e.g. 1.8: ITL P95 within 2x its P50, at a cost in TTFT "
             "and throughput; 0: off)")
    step_cost_device: str = "cpu"  # the step cost model's seed: "cpu" or "cuda" (set by resolve_budgets)
    # Off, the scheduler refuses to start unless the step budget holds max_model_len.
    enable_chunked_prefill: bool = option(
        True, "off: every prompt prefilled whole in one step (needs --max-num-batched-tokens >= "
              "--max-model-len); for ablations")
    scheduler_policy: str = option("lanes", "lanes: short prompts first; fcfs: vLLM V1's arrival order",
                                   choices=("lanes", "fcfs"))
    # No host turn-around between decode steps (scheduler/config.py). Off on CPU: the model runs
    # on the host cores the scheduler would overlap with, so there is nothing to overlap.
    async_scheduling: bool | None = option(
        None, "build the next decode step just before the running one ends, its inputs fed on the "
              "device (default: on a GPU)")
    # Speculative decoding (stages/speculative.py): vLLM's JSON, checked at start-up.
    speculative_config: str | None = option(
        None, 'speculative decoding as JSON, vLLM\'s fields: {"method": "ngram", "num_speculative_tokens": 4, '
              '"prompt_lookup_max": 4, "prompt_lookup_min": 2} or {"method": "draft_model", "model": "...", '
              '"num_speculative_tokens": 4}; "disable_by_batch_size": N')
    # Structured outputs (structured/): a grammar compiles beside the tokenizer, before queueing.
    grammar_compile_timeout_s: float = option(
        10.0, "a structured output's schema, regex or grammar that takes longer to compile is a 400")
    enable_prefix_caching: bool = option(True, "reuse the KV of prompt prefixes across requests")
    shadow: bool = option(True, "admit without arrival-time KV reservation", flag="--no-shadow",
                          action="store_false")
    # KV tiers below the device pool (prefix caching must be on): host memory (pinned on a GPU)
    # and a directory of block files that survives restarts.
    kv_host_gb: float = option(0.0, "host-memory KV tier below the device pool, in GiB (0: off)")
    kv_disk_path: str | None = option(None, "directory of the disk KV tier (block files; kept across restarts)")
    kv_disk_gb: float = option(16.0, "disk KV tier size in GiB")
    kv_disk_threads: int = 4
    # Off, a block is copied only when the device pool evicts it, in the step that reuses it.
    kv_offload_early: bool = option(
        True, "copy each cached block to the host tier at once, beside later steps (off: only when the "
              "device pool evicts it)")
    # Channel and buffer bounds (every queue is bounded).
    scheduler_inbox_size: int = 4096
    stream_buffer_items: int = 256
    # Deadlines.
    request_timeout_s: float | None = option(
        None, "seconds after which a request still running is aborted (finish_reason timeout)")
    body_read_timeout_s: float = option(30.0, "a client that sends its body slower than this gets 408")
    max_connections: int = option(4096, "HTTP requests in flight (streams included); past it: 503 at once")
    # Connection hygiene (pipeline/http_protocol.py): a socket that sends nothing is closed within
    # seconds, so silent sockets cannot fill the connection cap. A real client sends its request's
    # head in one write as soon as it connects (a TLS handshake is not counted), so 10 s leaves a
    # slow link many round trips; nginx's 60 s is sized for browsers on slow networks. 5 s keep-alive
    # is uvicorn's and vLLM's default, which clients of OpenAI-compatible servers already expect.
    header_read_timeout_s: float = option(
        10.0, "a connection's request headers must be complete this long after it opens (or after its "
              "request's first byte, or its previous response); past it: closed")
    keep_alive_timeout_s: float = option(5.0, "an idle keep-alive connection is closed after this")
    # Apache's and Tomcat's header count, URL as Apache's request line (8 KiB); 64 KiB of headers
    # hold any bearer token or proxy's additions.
    max_headers: int = option(100, "header lines of a request; past it: 431")
    max_header_bytes: int = option(64 * 1024, "bytes of a request's header lines; past it: 431")
    max_url_bytes: int = option(8 * 1024, "bytes of a request's URL (path and query); past it: 414")
    stream_stall_timeout_s: float = option(
        30.0, "a stream whose buffer stays full (its client not reading) this long is aborted")
    shutdown_grace_s: float = option(30.0, "on SIGTERM, seconds the requests in flight get to finish")
    # Tokenize in a worker thread when the text is longer than this (short texts are faster inline).
    offload_tokenize_chars: int = 4096
    num_tokenizer_threads: int = 2
    cpu_threads: int | None = option(None, "torch threads for the CPU path (default: torch's own choice)")
    cpu_decode_kernel: bool = option(
        True, "CPU path: decodes read the paged KV pool in place and the layers' norms, SiLU and RoPE run in "
              "C++ kernels compiled at start-up (g++; a few seconds the first time, then cached under "
              "$TTFT_CACHE_DIR; where the build fails the torch operators serve, with a warning)")
    max_traces: int = 1000  # recent traces kept for /debug/traces
    profile_dir: str | None = option(
        None, "enable POST /start_profile and /stop_profile: torch.profiler traces written here")
    # OpenTelemetry (observe/otlp_settings.py): also OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; the [otel] extra.
    otlp_traces_endpoint: str | None = option(
        None, "send one OpenTelemetry span per request, with a child per stage, to this OTLP/HTTP collector "
              "(e.g. http://localhost:4318; needs pip install 'ttft[otel]')")
    limits: IngressLimits = field(default_factory=IngressLimits)  # its option() fields are flags too

    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def resolve_budgets(self) -> None:
        """Fill the device-dependent defaults in place (called once at start-up)."""
        if self.max_num_batched_tokens is None:
            self.max_num_batched_tokens = 8192 if self.resolved_device() == "cuda" else 1024
        if self.long_prefill_threshold is None:
            self.long_prefill_threshold = max(1, self.max_num_batched_tokens // (2 if self.resolved_device() == "cuda" else 4))
        if self.prefill_step_tokens is None:
            self.prefill_step_tokens = 768 if self.resolved_device() == "cuda" else 256
        if self.async_scheduling is None:
            self.async_scheduling = self.resolved_device() == "cuda"
        on_gpu = self.resolved_device().startswith("cuda")
        if self.step_budget_ms is None:
            self.step_budget_ms = GPU_STEP_BUDGET_MS if on_gpu else CPU_STEP_BUDGET_MS
        self.step_cost_device = "cuda" if on_gpu else "cpu"
        if self.concurrent_lanes is None:
            self.concurrent_lanes = not on_gpu

    def resolved_dtype(self) -> str:
        if self.dtype != "auto":
            return self.dtype
        return "bfloat16" if self.resolved_device() == "cuda" else "float32"
