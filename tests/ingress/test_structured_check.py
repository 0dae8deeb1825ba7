"""StructuredCheck.settle after tokenizing: a compile that ended is decided at once (None when it
succeeded; a 400 naming the field when the grammar is refused, a 500 for anything else, the
compiler closed included); one still running is handed back, for its request to be queued beside."""
from __future__ import annotations

from concurrent.futures import Future

import pytest

from ingress.structured_check import StructuredCheck
from protocol.errors import ApiError
from stages.sampling import SamplingParams
from stages.structured import StructuredOutput
from structured.backend import GrammarError

PARAMS = SamplingParams(structured=StructuredOutput("regex", "a", param="guided_regex"))


def check() -> StructuredCheck:
    return StructuredCheck(compiler=None, timeout_s=1.0)  # settle never touches the compiler


def test_a_finished_compile_is_decided_and_a_running_one_handed_back():
    done, running = Future(), Future()
    done.set_result("compiled")
    assert check().settle(done, PARAMS) is None
    assert check().settle(running, PARAMS) is running


@pytest.mark.parametrize("fail, status, words", [
    (lambda f: f.set_exception(GrammarError("unclosed group")), 400, "'guided_regex' does not compile: unclosed group"),
    (lambda f: f.set_exception(RuntimeError("the backend broke")), 500, "RuntimeError: the backend broke"),
    (lambda f: f.cancel(), 500, "the grammar compiler stopped"),
])
def test_a_failed_compile_is_its_error_naming_the_field(fail, status, words):
    future = Future()
    fail(future)
    with pytest.raises(ApiError) as info:
        check().settle(future, PARAMS)
    assert info.value.status == status and info.value.param == "guided_regex" and words in info.value.message
