"""`ttft serve` and `ttft bench`."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from ingress.limits import IngressLimits
from scheduler.config import PREFILL_BACKLOG_STEPS
from pipeline.config import EngineConfig


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    d = EngineConfig()
    lim = IngressLimits()
    p.add_argument("--model", default=None, help="a .gguf file, a Hugging Face directory or dummy:<preset> (default: the packaged SmolLM2-135M-Instruct)")
    p.add_argument("--served-model-name", default=None, help="the name the API reports")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of dummy weights")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--uds", default=None, help="serve on this Unix domain socket instead of TCP")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default=d.device)
    p.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"], default=d.dtype)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--kv-cache-gb", type=float, default=None, help="KV pool size (default 1 GiB on CPU)")
    p.add_argument("--num-kv-blocks", type=int, default=None, help="KV pool size in blocks (overrides --kv-cache-gb)")
    p.add_argument("--block-size", type=int, default=d.block_size)
    p.add_argument("--gpu-memory-utilization", type=float, default=d.gpu_memory_utilization)
    p.add_argument("--attention-backend", choices=["auto", "triton", "torch"], default=d.attention_backend)
    p.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs")
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=d.tensor_parallel_size,
                   help="shard the model over N GPUs (N processes; under torchrun, its ranks)")
    p.add_argument("--mixed-graph-max-tokens", type=int, default=d.mixed_graph_max_tokens,
                   help="largest mixed step (prefill beside decodes) replayed as a CUDA graph; 0: none")
    p.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs, help="running requests")
    p.add_argument("--max-num-batched-tokens", type=int, default=None,
                   help="per-step token budget (default 512 on CPU, 8192 on a GPU)")
    p.add_argument("--max-queued", type=int, default=d.max_queued, help="waiting requests; past them: 503")
    p.add_argument("--long-prefill-threshold", type=int, default=None,
                   help="chunk cap for one prefill per step (lanes: not for a prompt alone in the server); "
                        "shorter uncached prompts take the fast lane (default: half the step budget)")
    p.add_argument("--prefill-step-tokens", type=int, default=None,
                   help="lanes: prefill tokens that may join a step after its first prefill, whole "
                        "prompts only (default 768 on a GPU, 0: no cap on CPU)")
    p.add_argument("--prefill-backlog-steps", type=int, default=PREFILL_BACKLOG_STEPS,
                   help="lanes: while the waiting prompts hold this many full steps of tokens, prompts "
                        "as long as a step's first join it past the cap (0: never)")
    p.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction,
                   default=d.enable_chunked_prefill,
                   help="off: every prompt prefilled whole in one step (needs --max-num-batched-tokens >= "
                        "--max-model-len); for ablations")
    p.add_argument("--scheduler-policy", choices=["lanes", "fcfs"], default=d.scheduler_policy)
    p.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=d.async_scheduling,
                   help="build the next decode step just before the running one ends, its inputs fed on "
                        "the device (default: on a GPU)")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=d.enable_prefix_caching)
    p.add_argument("--no-shadow", dest="shadow", action="store_false", help="admit without arrival-time KV reservation")
    p.add_argument("--kv-host-gb", type=float, default=d.kv_host_gb,
                   help="host-memory KV tier below the device pool, in GiB (0: off)")
    p.add_argument("--kv-disk-path", default=d.kv_disk_path,
                   help="directory of the disk KV tier (block files; kept across restarts)")
    p.add_argument("--kv-disk-gb", type=float, default=d.kv_disk_gb, help="disk KV tier size in GiB")
    p.add_argument("--kv-offload-early", action=argparse.BooleanOptionalAction, default=d.kv_offload_early,
                   help="copy each cached block to the host tier at once, beside later steps (off: only "
                        "when the device pool evicts it)")
    p.add_argument("--request-timeout-s", type=float, default=None)
    p.add_argument("--stream-stall-timeout-s", type=float, default=d.stream_stall_timeout_s)
    p.add_argument("--shutdown-grace-s", type=float, default=d.shutdown_grace_s)
    p.add_argument("--body-read-timeout-s", type=float, default=d.body_read_timeout_s)
    p.add_argument("--max-connections", type=int, default=d.max_connections,
                   help="HTTP requests in flight (streams included); past it: 503 at once")
    p.add_argument("--max-n", type=int, default=lim.max_n,
                   help="parallel samples (choices) per request: `n` above it is a 400")
    p.add_argument("--max-body-bytes", type=int, default=lim.max_body_bytes)
    p.add_argument("--max-prompt-chars", type=int, default=lim.max_prompt_chars)
    p.add_argument("--max-tokens-cap", type=int, default=lim.max_tokens_cap)
    p.add_argument("--max-stop-strings", type=int, default=lim.max_stop_strings)
    p.add_argument("--cpu-threads", type=int, default=None, help="torch threads for the CPU path")
    p.add_argument("--api-key", default=None, help="bearer token for every inference route (or TTFT_API_KEY)")
    p.add_argument("--protect-metrics", action="store_true", help="/metrics needs the API key too")
    p.add_argument("--profile-dir", default=d.profile_dir,
                   help="enable POST /start_profile and /stop_profile: torch.profiler traces written here")
    p.add_argument("--log-level", default="info")


def config_from_args(a: argparse.Namespace) -> EngineConfig:
    limits = IngressLimits(
        max_body_bytes=a.max_body_bytes, max_prompt_chars=a.max_prompt_chars,
        max_tokens_cap=a.max_tokens_cap, max_stop_strings=a.max_stop_strings, max_n=a.max_n,
    )
    return EngineConfig(
        model=a.model, served_model_name=a.served_model_name, seed=a.seed, device=a.device,
        dtype=a.dtype, max_model_len=a.max_model_len, kv_cache_gb=a.kv_cache_gb,
        num_kv_blocks=a.num_kv_blocks, gpu_memory_utilization=a.gpu_memory_utilization,
        attention_backend=a.attention_backend, enforce_eager=a.enforce_eager,
        tensor_parallel_size=a.tensor_parallel_size,
        mixed_graph_max_tokens=a.mixed_graph_max_tokens, block_size=a.block_size, max_num_seqs=a.max_num_seqs,
        max_num_batched_tokens=a.max_num_batched_tokens, max_queued=a.max_queued,
        long_prefill_threshold=a.long_prefill_threshold, prefill_step_tokens=a.prefill_step_tokens,
        prefill_backlog_steps=a.prefill_backlog_steps,
        request_timeout_s=a.request_timeout_s,
        stream_stall_timeout_s=a.stream_stall_timeout_s, shutdown_grace_s=a.shutdown_grace_s,
        body_read_timeout_s=a.body_read_timeout_s, max_connections=a.max_connections,
        limits=limits, cpu_threads=a.cpu_threads, scheduler_policy=a.scheduler_policy,
        enable_prefix_caching=a.enable_prefix_caching, shadow=a.shadow,
        kv_host_gb=a.kv_host_gb, kv_disk_path=a.kv_disk_path, kv_disk_gb=a.kv_disk_gb, kv_offload_early=a.kv_offload_early,
        enable_chunked_prefill=a.enable_chunked_prefill,
        async_scheduling=a.async_scheduling, profile_dir=a.profile_dir,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ttft", description="An LLM server obsessed with time to first token")
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve_arguments(sub.add_parser("serve", help="serve a model over an OpenAI-compatible API"))
    from bench.cli import add_bench_arguments, run_bench

    add_bench_arguments(sub.add_parser("bench", help="load-test an OpenAI-compatible server"))
    args = parser.parse_args(argv)
    if args.command == "serve":
        # Idle OpenMP workers sleep instead of spinning: on a small CPU their spinning takes the
        # cores the event loop needs between model steps (measured: TTFT P50 4.0 s -> 3.1 s, see
        # README). Set before torch is imported; an explicit setting wins.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        # Tokenizing runs one text at a time in our own thread pool: no rayon pool beside it.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        from pipeline.auth import check_api_key, resolve_api_key
        from pipeline.build import StartupError, run_worker_rank
        from pipeline.build_parallel import is_worker_rank
        from pipeline.server import serve

        try:
            if is_worker_rank(config := config_from_args(args)):  # torchrun's other ranks
                return run_worker_rank(config)
            api_key = resolve_api_key(args.api_key)
            if api_key is not None:
                check_api_key(api_key)
            args.api_key = None  # the key lives only in the middleware from here on
            return serve(config_from_args(args), args.host, args.port, args.uds, args.log_level,
                         api_key=api_key, protect_metrics=args.protect_metrics)
        except (StartupError, ValueError) as exc:
            print(f"ttft: cannot start: {exc}", file=sys.stderr)
            return 2
    if args.ablate:  # `ttft bench --ablate`: starts its own servers (bench/ablate.py)
        from bench.ablate import run_ablation

        return run_ablation(args)
    asyncio.run(run_bench(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
