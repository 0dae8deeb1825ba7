"""StructuredCheck.settle after tokenizing: a compile that ended, or ends within the grace, is
decided (None when it succeeded; a 400 naming the field when the grammar is refused, a 500 for
anything else, the compiler closed included); one still running past the grace is handed back, for
its request to be queued beside."""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest

from ingress.structured_check import StructuredCheck
from protocol.errors import ApiError
from stages.sampling import SamplingParams
from stages.structured import StructuredOutput
from structured.backend import GrammarError

PARAMS = SamplingParams(structured=StructuredOutput("regex", "a", param="guided_regex"))


def check(grace_s: float = 0.0) -> StructuredCheck:
    return StructuredCheck(compiler=None, timeout_s=1.0, grace_s=grace_s)  # settle never touches the compiler


def later(future: Future, delay_s: float, fail: bool = False) -> None:
    """End `future` from another thread (as a compile thread does) after `delay_s`."""
    def end() -> None:
        future.set_exception(GrammarError("unclosed group")) if fail else future.set_result("compiled")
    threading.Timer(delay_s, end).start()


async def test_a_finished_compile_is_decided_and_a_running_one_handed_back():
    done, running = Future(), Future()
    done.set_result("compiled")
    assert await check().settle(done, PARAMS) is None
    assert await check().settle(running, PARAMS) is running
    assert await check().settle(None, PARAMS) is None


async def test_a_compile_that_ends_within_the_grace_is_waited_for_and_decided():
    quick = Future()
    later(quick, 0.01)
    t0 = time.monotonic()
    assert await check(grace_s=0.3).settle(quick, PARAMS) is None  # no gate: it compiled meanwhile
    assert time.monotonic() - t0 < 0.25  # not the whole grace: it ended first


async def test_a_compile_past_the_grace_is_handed_back_after_it():
    slow = Future()
    t0 = time.monotonic()
    assert await check(grace_s=0.03).settle(slow, PARAMS) is slow
    assert time.monotonic() - t0 >= 0.025 and not slow.cancelled()  # waited, and left running
    slow.set_result("compiled")


async def test_no_grace_where_the_timeout_is_not_much_longer():
    running = Future()
    t0 = time.monotonic()
    short = StructuredCheck(compiler=None, timeout_s=0.000001, grace_s=0.5)
    assert short.grace_s == 0 and await short.settle(running, PARAMS) is running
    assert time.monotonic() - t0 < 0.4  # handed back at once: `finish` applies the timeout


async def test_a_compile_that_fails_within_the_grace_is_its_400():
    failing = Future()
    later(failing, 0.01, fail=True)
    with pytest.raises(ApiError) as info:
        await check(grace_s=0.3).settle(failing, PARAMS)
    assert info.value.status == 400 and "unclosed group" in info.value.message


@pytest.mark.parametrize("fail, status, words", [
    (lambda f: f.set_exception(GrammarError("unclosed group")), 400, "'guided_regex' does not compile: unclosed group"),
    (lambda f: f.set_exception(RuntimeError("the backend broke")), 500, "RuntimeError: the backend broke"),
    (lambda f: f.cancel(), 500, "the grammar compiler stopped"),
])
async def test_a_failed_compile_is_its_error_naming_the_field(fail, status, words):
    future = Future()
    fail(future)
    with pytest.raises(ApiError) as info:
        await check().settle(future, PARAMS)
    assert info.value.status == status and info.value.param == "guided_regex" and words in info.value.message
