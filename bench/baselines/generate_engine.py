"""GenerateEngine: one request at a time through transformers' `generate()`, streamed token by token.

This is the default pipeline that published "cut TTFT" write-ups start from: no batching, so
every request waits for all those ahead of it (the queueing is the point of the measurement). The
asyncio lock is the queue; `generate()` runs in one worker thread and streams through a
`BaseStreamer` into the request's TokenBox. A client that goes away stops its generation at the
next step (a stopping criterion polls the box's `cancelled` flag) so the next request starts.
"""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import AsyncIterator

import torch

from bench.baselines.hf_protocol import HfRequest
from bench.baselines.hf_weights import import_transformers
from bench.baselines.token_box import TokenBox
from ingress.dummy_tokenizer import BOS_ID, PAD_ID


class _BoxStreamer:
    """transformers' streamer protocol (put/end): the first put is the prompt, then one id per step."""

    def __init__(self, box: TokenBox) -> None:
        self.box = box
        self.seen_prompt = False

    def put(self, value: torch.Tensor) -> None:
        if not self.seen_prompt:
            self.seen_prompt = True
            return
        self.box.extend_threadsafe(value.reshape(-1).tolist())

    def end(self) -> None:
        pass  # the worker finishes the box itself, errors included


class GenerateEngine:
    name = "generate"

    def __init__(self, model, eos_token_ids: frozenset[int]) -> None:
        transformers = import_transformers()
        self._transformers = transformers
        self.model = model
        self.device = next(model.parameters()).device
        self.eos_token_ids = sorted(eos_token_ids)
        self._lock = asyncio.Lock()  # the one-at-a-time queue
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="hf-generate")

        class _Cancelled(transformers.StoppingCriteria):
            def __init__(self, box: TokenBox) -> None:
                self.box = box

            def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
                return torch.full((input_ids.shape[0],), self.box.cancelled.is_set(), dtype=torch.bool,
                                  device=input_ids.device)

        self._cancelled_criterion = _Cancelled

    def _generation_config(self, req: HfRequest):
        sampled = req.temperature > 0
        kwargs: dict = dict(max_new_tokens=req.max_tokens, do_sample=sampled, bos_token_id=BOS_ID,
                            pad_token_id=PAD_ID, eos_token_id=None if req.ignore_eos else self.eos_token_ids)
        if sampled:  # top_k=0: no top-k filter (OpenAI has none; transformers' default is 50)
            kwargs.update(temperature=req.temperature, top_p=req.top_p, top_k=req.top_k or 0)
        return self._transformers.GenerationConfig(**kwargs)

    def _run(self, req: HfRequest, box: TokenBox) -> None:
        error = None
        try:
            ids = torch.tensor([req.prompt_ids], device=self.device)
            criteria = self._transformers.StoppingCriteriaList([self._cancelled_criterion(box)])
            with torch.inference_mode():
                self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                    generation_config=self._generation_config(req),
                                    streamer=_BoxStreamer(box), stopping_criteria=criteria)
        except Exception as exc:  # reported to the client in the stream
            error = f"generate() failed: {type(exc).__name__}: {exc}"
        box.finish_threadsafe(error)

    def check(self, req: HfRequest) -> None:
        pass  # generate() takes every option the protocol parses

    async def stream(self, req: HfRequest) -> AsyncIterator[list[int]]:
        async with self._lock:
            box = TokenBox(asyncio.get_running_loop())
            done = asyncio.get_running_loop().run_in_executor(self._worker, self._run, req, box)
            try:
                async for tokens in box.chunks():
                    yield tokens
            finally:
                box.cancelled.set()  # a no-op when it finished; else stop it at the next step
                await asyncio.shield(done)  # the next request starts only once this one stopped

    def close(self) -> None:
        self._worker.shutdown(wait=True, cancel_futures=True)
