"""GrammarCompiler: one compile per distinct (kind, spec), shared futures, failures not kept, an
LRU bound, the backend built once on a compile thread."""
from __future__ import annotations

import threading

import pytest

from stages.structured import StructuredOutput
from structured.backend import GrammarError
from structured.compiler import GrammarCompiler


class CountingBackend:
    name = "counting"

    def __init__(self) -> None:
        self.compiles: list[tuple[str, str]] = []
        self.gate = threading.Event()
        self.gate.set()

    def compile(self, kind: str, spec: str):
        self.gate.wait(5)
        self.compiles.append((kind, spec))
        if spec == "bad":
            raise GrammarError("bad spec")
        return (kind, spec)


@pytest.fixture
def compiler():
    backend = CountingBackend()
    made = []
    compiler = GrammarCompiler(lambda: made.append(1) or backend, max_cached=2)
    compiler.made, compiler.counting = made, backend
    yield compiler
    compiler.close()


def regex(spec: str) -> StructuredOutput:
    return StructuredOutput("regex", spec)


def test_one_compile_per_key_and_the_backend_once(compiler):
    assert compiler.compiled(regex("a")) == ("regex", "a")
    assert compiler.compiled(StructuredOutput("regex", "a", param="guided_regex")) == ("regex", "a")
    assert compiler.compiled(regex("b")) == ("regex", "b")
    assert compiler.counting.compiles == [("regex", "a"), ("regex", "b")]
    assert compiler.made == [1] and compiler.num_compiles == 2


def test_a_compile_in_progress_is_shared(compiler):
    compiler.counting.gate.clear()
    first, second = compiler.submit(regex("a")), compiler.submit(regex("a"))
    assert first is second and not first.done()
    compiler.counting.gate.set()
    assert first.result(5) == ("regex", "a")


def test_a_failed_compile_is_not_kept(compiler):
    with pytest.raises(GrammarError):
        compiler.compiled(regex("bad"))
    with pytest.raises(GrammarError):
        compiler.compiled(regex("bad"))
    assert compiler.counting.compiles == [("regex", "bad")] * 2


def test_the_cache_is_bounded_least_recently_used_first(compiler):
    for spec in ("a", "b", "a", "c"):  # "a" used again: "b" is the one dropped
        compiler.compiled(regex(spec))
    compiler.compiled(regex("a"))
    compiler.compiled(regex("b"))
    assert compiler.counting.compiles == [("regex", s) for s in ("a", "b", "c", "b")]


def test_warm_builds_the_backend_on_a_compile_thread(compiler):
    assert compiler.warm().result(5) is compiler.counting
    assert compiler.made == [1]
