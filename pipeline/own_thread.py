"""run_in_own_thread: await a blocking call made on a thread of its own, which ends with it.

A CPU engine builds its model this way rather than through asyncio.to_thread: the default
executor's threads outlive the call, and a thread that has run parallel torch work keeps an
OpenMP pool of workers. libgomp counts every pooled thread of every team; with more than the host
has cores it stops spinning at barriers, and a CPU step of ~200 parallel regions then pays a futex
wake-up twice a region (SmolLM2 decode on the 2-core VM: 50 ms per step instead of 31, served).
"""
from __future__ import annotations

import asyncio
import threading
from typing import Callable, TypeVar

T = TypeVar("T")


async def run_in_own_thread(fn: Callable[..., T], *args: object, name: str = "ttft-build") -> T:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(setter: Callable, value: object) -> None:
        if not done.cancelled():
            setter(value)

    def body() -> None:
        try:
            result = fn(*args)
        except BaseException as exc:  # handed to the awaiting task, raised there
            hand_over(done.set_exception, exc)
        else:
            hand_over(done.set_result, result)

    def hand_over(setter: Callable, value: object) -> None:
        try:
            loop.call_soon_threadsafe(settle, setter, value)
        except RuntimeError:  # the loop is closed: the awaiting task was cancelled and nobody waits
            pass

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    result = await done
    thread.join()  # it has handed its result over and is ending: its OpenMP pool goes with it
    return result
