"""CompileWatch: chained onto Triton's jit cache hook, it counts compiles only once armed and
leaves the decision to compile to the hook it replaced."""
from __future__ import annotations

import types

import pytest

from gpu_stage.compile_watch import CompileWatch

knobs = pytest.importorskip("triton.knobs")


def test_counts_compiles_after_arm_and_chains_the_previous_hook(monkeypatch) -> None:
    seen = []
    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", lambda **kw: seen.append(kw["key"]) or None)
    watch = CompileWatch()
    assert watch.install() and watch.install()  # the second is a no-op: no double chaining
    hook = knobs.runtime.jit_cache_hook
    fn = types.SimpleNamespace(name="_prefill_attention_kernel")
    hook(key="k0", fn=fn)  # start-up: not counted
    watch.arm()
    assert hook(key=("i32", "D"), fn=fn) is None  # the compile goes on
    watch.disarm()
    hook(key="k2", fn=fn)
    assert watch.late_compiles == ["_prefill_attention_kernel ('i32', 'D')"]
    assert len(seen) == 3  # the previous hook saw every call
