"""ContinuousEngine: transformers' own continuous batching with paged attention, behind the same API.

The fairer peer: a manager thread (`model.init_continuous_batching()`) schedules every request
in flight into each step over a paged KV cache. Its API moved between releases, so it is found at
run time: the manager must have `start`, `add_request`, `get_result`, `is_running` and `stop`, and only
the keyword arguments the installed signatures accept are passed. A dispatcher thread drains the
manager's output queue (cumulative outputs, one per step when streaming) into each request's
TokenBox. Sampling is server-wide in that API: this engine serves greedy requests only.
"""
from __future__ import annotations

import asyncio
import dataclasses
import inspect
import itertools
import logging
import threading
import time
from typing import Any, AsyncIterator

from bench.baselines.hf_protocol import BadRequest, HfRequest
from bench.baselines.hf_weights import import_transformers
from bench.baselines.token_box import TokenBox
from ingress.dummy_tokenizer import BOS_ID, PAD_ID

log = logging.getLogger("hf_baseline.continuous")
NO_EOS = -1  # transformers' continuous batching: an EOS id that never matches


def _accepted(fn: Any, kwargs: dict) -> dict:
    """The kwargs `fn` takes (the signatures differ between transformers releases)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


def continuous_batching_api(model: Any) -> None:
    """Raise a clear error when the installed transformers lacks the continuous-batching API."""
    transformers = import_transformers()
    if not callable(getattr(model, "init_continuous_batching", None)):
        raise RuntimeError(f"transformers {transformers.__version__} has no continuous batching "
                           "(model.init_continuous_batching): --mode continuous needs a newer release")


class ContinuousEngine:
    name = "continuous"

    def __init__(self, model: Any, eos_token_ids: frozenset[int], cb_options: dict | None = None,
                 warmup: bool | None = None, soft_options: dict | None = None) -> None:
        """`cb_options`: sizes the user set (refused when this release lacks one); `soft_options`: set
        only where this release knows them."""
        transformers = import_transformers()
        continuous_batching_api(model)
        self.eos_token_ids = sorted(eos_token_ids)
        gen = transformers.GenerationConfig(do_sample=False, max_new_tokens=16, eos_token_id=NO_EOS,
                                            bos_token_id=BOS_ID, pad_token_id=PAD_ID)
        init_kwargs: dict = {"generation_config": gen, "streaming": True}  # `streaming` on old releases
        options = {k: v for k, v in (cb_options or {}).items() if v is not None}
        config_cls = getattr(transformers, "ContinuousBatchingConfig", None)
        if config_cls is not None:  # 5.x: sizes live in their own config
            names = {f.name for f in dataclasses.fields(config_cls)} if dataclasses.is_dataclass(config_cls) \
                else set(inspect.signature(config_cls).parameters)
            unknown = set(options) - names
            if unknown:
                raise RuntimeError(f"this transformers' ContinuousBatchingConfig lacks {sorted(unknown)}")
            options.update({k: v for k, v in (soft_options or {}).items() if k in names})
            init_kwargs["continuous_batching_config"] = config_cls(**options)
        else:  # older releases read the sizes from the generation config
            for k, v in options.items():
                setattr(gen, k, v)
        self.manager = model.init_continuous_batching(**_accepted(model.init_continuous_batching, init_kwargs))
        for method in ("start", "add_request", "get_result", "is_running", "stop"):
            if not callable(getattr(self.manager, method, None)):
                raise RuntimeError(f"transformers {transformers.__version__}: the continuous batching "
                                   f"manager has no `{method}`")
        on_gpu = next(model.parameters()).device.type == "cuda"
        if (on_gpu if warmup is None else warmup) and callable(getattr(self.manager, "warmup", None)):
            t0 = time.perf_counter()
            self.manager.warmup()  # CUDA graphs captured before the first request, as ttft does
            log.info("continuous batching warm-up: %.1f s", time.perf_counter() - t0)
        self.manager.start()
        self._boxes: dict[str, TokenBox] = {}
        self._boxes_lock = threading.Lock()
        self._ids = itertools.count()
        self._closing = threading.Event()
        self._dispatcher = threading.Thread(target=self._dispatch, name="hf-cb-dispatch", daemon=True)
        self._dispatcher.start()

    def _dispatch(self) -> None:
        while not self._closing.is_set():
            result = self.manager.get_result(timeout=0.05)
            if result is None:
                if not self.manager.is_running():
                    self._fail_all("the continuous batching loop stopped")
                    time.sleep(0.05)  # get_result returns at once then: do not spin
                continue
            with self._boxes_lock:
                box = self._boxes.get(result.request_id)
                finished = result.is_finished()
                if finished:
                    self._boxes.pop(result.request_id, None)
            if box is not None:
                error = getattr(result, "error", None)
                box.replace_threadsafe(list(result.generated_tokens), done=finished, error=error)

    def _fail_all(self, message: str) -> None:
        with self._boxes_lock:
            boxes, self._boxes = list(self._boxes.values()), {}
        for box in boxes:
            box.finish_threadsafe(message)

    def check(self, req: HfRequest) -> None:
        if req.temperature > 0:
            raise BadRequest("--mode continuous serves greedy requests only (temperature 0): transformers' "
                             "continuous batching samples with one server-wide configuration", "temperature")

    async def stream(self, req: HfRequest) -> AsyncIterator[list[int]]:
        request_id = f"req-{next(self._ids)}"
        box = TokenBox(asyncio.get_running_loop())
        with self._boxes_lock:
            self._boxes[request_id] = box
        kwargs = dict(input_ids=req.prompt_ids, request_id=request_id, max_new_tokens=req.max_tokens,
                      streaming=True, eos_token_id=NO_EOS if req.ignore_eos else self.eos_token_ids)
        self.manager.add_request(**_accepted(self.manager.add_request, kwargs))
        try:
            async for tokens in box.chunks():
                yield tokens
        finally:
            if not box.done:  # the client left: free its pages now
                with self._boxes_lock:
                    self._boxes.pop(request_id, None)
                if callable(cancel := getattr(self.manager, "cancel_request", None)):  # not in every release
                    cancel(request_id)

    def close(self) -> None:
        self._closing.set()
        self._dispatcher.join(timeout=5)
        self.manager.stop(**_accepted(self.manager.stop, {"block": True, "timeout": 10}))
