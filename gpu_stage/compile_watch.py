"""Report Triton compilations that happen after start-up's warm-up.

A kernel variant first met while serving (Triton specialises on integer arguments equal to 1 or
divisible by 16, on pointer alignment and on every constexpr) compiles on the request's path: a
second or more of TTFT for whoever meets it, and for everyone queued behind that step. Start-up
warms up the variants it knows of; this hook names any it missed, so the warm-up can be fixed
instead of the latency being found in a benchmark's tail. Triton's hooks are per process, so is
the watch (`WATCH`): a runner disarms it while it warms up and arms it once ready.
"""
from __future__ import annotations

import logging

log = logging.getLogger("ttft.gpu")


class CompileWatch:
    """After `arm()`, each Triton compile (an in-memory cache miss: a compile, or a load from the
    disk cache) is logged with the kernel's specialisation and counted in `late_compiles`."""

    def __init__(self) -> None:
        self.late_compiles: list[str] = []
        self._armed = False
        self._installed = False
        self._previous = None

    def install(self) -> bool:
        """Chain onto Triton's jit cache hook (once); False where this Triton has none."""
        if self._installed:
            return True
        try:
            import triton.knobs as knobs
        except ImportError:
            return False
        runtime = getattr(knobs, "runtime", None)
        if runtime is None or not hasattr(runtime, "jit_cache_hook"):
            return False
        self._previous = runtime.jit_cache_hook
        runtime.jit_cache_hook = self._hook
        self._installed = True
        return True

    def arm(self) -> None:
        self._armed = True

    def disarm(self) -> None:
        self._armed = False

    def _hook(self, *args, **kwargs):
        if self._armed:
            fn = kwargs.get("fn")
            # the name, then the specialisation key (which argument took which variant)
            name = f"{getattr(fn, 'name', '?')} {str(kwargs.get('key'))[:600]}"
            self.late_compiles.append(name)
            log.warning("Triton kernel variant compiled while serving (not covered by the warm-up): %s", name)
        return self._previous(*args, **kwargs) if self._previous else None


WATCH = CompileWatch()
