"""Shared test set-up: asyncio tests run on their own loop without a plugin; `gpu`-marked tests
are skipped where CUDA is absent (in every folder); `smollm_server` is defined here, once, so that
every folder's files share one per worker (tests/live_server.py)."""
from __future__ import annotations

import asyncio
import inspect

import pytest

from live_server import smollm_server  # noqa: F401


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        kwargs = {a: pyfuncitem.funcargs[a] for a in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(pyfuncitem.obj(**kwargs))
        return True
    return None


def pytest_collection_modifyitems(config, items) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
