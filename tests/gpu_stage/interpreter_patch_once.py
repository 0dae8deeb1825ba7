"""Triton's CPU interpreter without its repeated language patches (test support).

Under TRITON_INTERPRET=1 a launch patches triton.language for the interpreter (`_patch_lang`:
`inspect.getmembers` over tl, tl.tensor, tl.math, ...) and restores it when its grid is done; and
every call of a @triton.jit helper inside the kernel patches the same modules again, although the
launch's patch is still in place. The decode and prefill kernels call helpers per key tile, so the
attention kernels' tests pay for those repeated patches many times per launch.

`install()` lets a helper's call skip its patch while the launch that runs it has patched every
language module the helper sees. What a kernel computes is unchanged: the repeated patch would only
replace the launch's interpreted attributes by equal ones, and the launch's restore puts back the
originals either way. A Triton without these internals keeps its own behaviour (install -> False).
"""
from __future__ import annotations

import inspect
import threading

_launches = threading.local()  # per thread: a stack of [patched language ids | None], one per launch
_installed = False


def install() -> bool:
    """Wrap the interpreter's launch and its `_patch_lang` (once per process); True when in place."""
    global _installed
    if _installed:
        return True
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return False
    grid_call = getattr(getattr(interpreter, "GridExecutor", None), "__call__", None)
    patch_lang = getattr(interpreter, "_patch_lang", None)
    empty_scope = getattr(interpreter, "_LangPatchScope", None)
    if grid_call is None or patch_lang is None or empty_scope is None:
        return False
    languages = (tl, tl.core)
    seen: dict = {}  # a kernel or helper function -> ids of the language modules in its globals

    def language_ids(fn) -> frozenset[int]:
        ids = seen.get(fn)
        if ids is None:
            ids = seen[fn] = frozenset(id(v) for v in fn.__globals__.values()
                                       if inspect.ismodule(v) and v in languages)
        return ids

    def patch_lang_once(fn):
        stack = getattr(_launches, "stack", None)
        if not stack:  # outside a launch: the interpreter's own behaviour
            return patch_lang(fn)
        if stack[-1] is None:  # the launch's own patch, restored when its grid is done
            stack[-1] = language_ids(fn)
            return patch_lang(fn)
        ids = language_ids(fn)
        if ids and ids <= stack[-1]:  # a helper inside the launch: already patched
            return empty_scope()
        return patch_lang(fn)

    def launch(self, *args, **kwargs):
        stack = _launches.__dict__.setdefault("stack", [])
        stack.append(None)
        try:
            return grid_call(self, *args, **kwargs)
        finally:
            stack.pop()

    interpreter._patch_lang = patch_lang_once
    interpreter.GridExecutor.__call__ = launch
    _installed = True
    return True


def installed() -> bool:
    """Whether install() has wrapped the interpreter in this process."""
    return _installed
