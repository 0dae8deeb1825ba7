"""A plain transformers server with ttft's OpenAI endpoint, on ttft's dummy weights (the baselines).

    python -m bench.baselines.hf_server --model dummy:llama-3-8b --seed 0 --mode generate --port 8001

`--mode generate`: one request at a time through `generate()` (the "before" of published TTFT
write-ups). `--mode continuous`: transformers' own continuous batching with paged attention (the
fairer peer). Same weights as `ttft serve --model dummy:<preset> --seed S` on the same device
type, same tokenizer and chat template, same chunk format: `ttft bench` drives either unchanged.
`--model` may also name a GGUF file or a Hugging Face directory: ttft's loader reads it, so both
servers hold the same tensors and tokenizer (the packaged SmolLM2 for a CPU run).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import os
import sys
import time
from typing import Any, AsyncIterator

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from bench.baselines.hf_protocol import BadRequest, ResponseWriter, error_event, parse_request, sse
from emitter.detokenizer import IncrementalDetokenizer
from ingress.chat_template import ChatTemplate
from ingress.tokenizer import Tokenizer

log = logging.getLogger("hf_baseline")


def _json(body: bytes | dict, status: int = 200) -> Response:
    return Response(body if isinstance(body, bytes) else orjson.dumps(body), status, media_type="application/json")


def build_app(engine: Any, tokenizer: Tokenizer, model_name: str, max_model_len: int) -> Starlette:
    """`engine` has `name`, `check(req)`, `stream(req)` (async iterator of new ids) and `close()`."""
    template = ChatTemplate(tokenizer.chat_template, bos_token=tokenizer.bos_token, eos_token=tokenizer.eos_token)
    created = int(time.time())

    async def health(request: Request) -> Response:
        return _json({"status": "ok", "mode": engine.name, "attention": getattr(engine, "attention", None)})

    async def models(request: Request) -> Response:
        return _json({"object": "list", "data": [{
            "id": model_name, "object": "model", "created": created, "owned_by": f"transformers-{engine.name}",
            "max_model_len": max_model_len}]})

    async def events(req, writer: ResponseWriter) -> AsyncIterator[bytes]:
        detok = IncrementalDetokenizer(tokenizer)
        num_output = 0
        if (role := writer.role_chunk()) is not None:
            yield sse(role)
        try:
            async for ids in engine.stream(req):
                num_output += len(ids)
                text = detok.push(ids)
                if text:
                    yield sse(writer.text_chunk(text))
        except Exception as exc:  # the worker failed mid-reply: an error event, then the end
            yield sse(error_event(str(exc)))
            yield b"data: [DONE]\n\n"
            return
        yield sse(writer.text_chunk("", "length" if num_output >= req.max_tokens else "stop"))
        if req.include_usage:
            yield sse(writer.usage_chunk(num_output))
        yield b"data: [DONE]\n\n"

    async def complete(request: Request, chat: bool) -> Response:
        try:
            req = parse_request(orjson.loads(await request.body()), chat, tokenizer, template, max_model_len)
            engine.check(req)
        except orjson.JSONDecodeError as exc:
            return _json(BadRequest(f"the body is not JSON: {exc}").body(), 400)
        except BadRequest as exc:
            return _json(exc.body(), 400)
        writer = ResponseWriter(req, model_name)
        if req.stream:
            return StreamingResponse(events(req, writer), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        ids: list[int] = []
        try:
            async for new in engine.stream(req):
                ids.extend(new)
        except Exception as exc:
            return _json(error_event(str(exc)), 500)
        reason = "length" if len(ids) >= req.max_tokens else "stop"
        return _json(writer.full_body(tokenizer.decode(ids), reason, len(ids)))

    async def completions(request: Request) -> Response:
        return await complete(request, chat=False)

    async def chat_completions(request: Request) -> Response:
        return await complete(request, chat=True)

    routes = [Route("/health", health), Route("/v1/models", models),
              Route("/v1/completions", completions, methods=["POST"]),
              Route("/v1/chat/completions", chat_completions, methods=["POST"])]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        engine.close()  # stop the worker threads (and the continuous batching manager) cleanly

    return Starlette(routes=routes, lifespan=lifespan)


def build_engine(args: argparse.Namespace) -> tuple[Any, Tokenizer, int]:
    """Model and engine for the arguments (loads the weights: seconds to a minute for 8B)."""
    from bench.baselines.hf_weights import build_hf_model_from_source, dummy_preset_name, resolve_device_dtype
    from gpu_stage.loaders import DUMMY_PREFIX, load_model_source

    if args.model is not None and args.model.startswith(DUMMY_PREFIX):
        dummy_preset_name(args.model)  # unknown preset: the error names the known ones
    # ttft's own loader: the tensors (and the tokenizer) `ttft serve --model <the same>` runs
    source = load_model_source(args.model, seed=args.seed)
    device, dtype = resolve_device_dtype(args.device, args.dtype)
    t0 = time.perf_counter()
    model = build_hf_model_from_source(source, device, dtype, args.attn_implementation)
    log.info("%s (seed %d) on %s in %s: %.1f s", args.model, args.seed, device, dtype, time.perf_counter() - t0)
    tokenizer = source.tokenizer
    max_model_len = args.max_model_len or source.config.max_position_embeddings
    if args.mode == "generate":
        from bench.baselines.generate_engine import GenerateEngine

        engine = GenerateEngine(model, tokenizer.eos_token_ids)
        engine.attention = model.config._attn_implementation
        return engine, tokenizer, max_model_len
    from bench.baselines.continuous_engine import ContinuousEngine

    options = {"num_blocks": args.cb_num_blocks, "max_batch_tokens": args.cb_max_batch_tokens,
               "page_size": args.cb_page_size, "max_memory_percent": args.cb_max_memory_percent}
    # Flash attention only where it is installed: transformers would otherwise try to fetch a kernel
    # from the Hub, which a GPU host without network cannot reach.
    flash = any(importlib.util.find_spec(m) for m in ("flash_attn", "flash_attn_interface"))
    engine = ContinuousEngine(model, tokenizer.eos_token_ids, options, soft_options={"auto_switch_to_flash": flash})
    engine.attention = model.config._attn_implementation  # the manager may have switched it (paged, flash)
    log.info("continuous batching: attention %s", engine.attention)
    return engine, tokenizer, max_model_len


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.baselines.hf_server", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="dummy:<preset>, a .gguf file or a Hugging Face directory, "
                                                "loaded by ttft's own loader (the weights ttft serves for it; "
                                                "default: ttft's, the packaged SmolLM2-135M-Instruct)")
    p.add_argument("--seed", type=int, default=0, help="seed of the dummy weights")
    p.add_argument("--mode", choices=["generate", "continuous"], default="generate")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8001)
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"], default="auto")
    p.add_argument("--attn-implementation", default="sdpa",
                   help="sdpa (continuous batching switches to flash attention if installed), eager, ...")
    p.add_argument("--max-model-len", type=int, default=None, help="prompt + output limit (default: the model's)")
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--cb-num-blocks", type=int, default=None, help="continuous: KV blocks (default: from memory)")
    p.add_argument("--cb-max-batch-tokens", type=int, default=None, help="continuous: tokens per step")
    p.add_argument("--cb-page-size", type=int, default=None, help="continuous: tokens per KV page")
    p.add_argument("--cb-max-memory-percent", type=float, default=None, help="continuous: share of free memory")
    p.add_argument("--log-level", default="info")
    args = p.parse_args(argv)
    # As `ttft serve` does (pipeline/cli.py): idle OpenMP workers sleep instead of spinning. On a
    # busy CPU spinning workers made generate() ~6x slower (SmolLM2, 2 loaded cores: 30 s against
    # 5 s for 16 tokens): the baseline would be measuring the machine, not the method. Set before
    # torch is imported (build_engine imports it); an explicit setting wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        engine, tokenizer, max_model_len = build_engine(args)
    except (RuntimeError, ValueError) as exc:
        print(f"hf_server: cannot start: {exc}", file=sys.stderr)
        return 2
    import uvicorn

    app = build_app(engine, tokenizer, args.served_model_name or args.model or "default", max_model_len)
    log.info("serving %s in %s mode on %s:%d", args.model, engine.name, args.host, args.port)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level.lower(), access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
