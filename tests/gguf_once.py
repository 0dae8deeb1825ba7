"""transformers loading a GGUF file (a test's independent reference), with the file parsed once.

transformers parses the file (a 49,152-token vocabulary for SmolLM2, in Python) for the tokenizer,
again for the config and again for the weights, and builds the same tensor-name map once per module
of the model. Inside `gguf_parsed_once()` each is made once and handed back the same, read-only:
the same reference, in a third of the time.
"""
from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Iterator

import pytest


@contextmanager
def gguf_parsed_once() -> Iterator[None]:
    gguf = pytest.importorskip("gguf")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf, "GGUFReader", functools.lru_cache(maxsize=1)(gguf.GGUFReader))
        patch.setattr(gguf, "get_tensor_name_map", functools.lru_cache(maxsize=1)(gguf.get_tensor_name_map))
        yield
