"""Structured outputs' families: grammar compiles started (cache misses), the requests queued while
their grammar still compiled (their prefill overlapped it: scheduler/sampling_gates.py), and the
constrained requests whose matcher the runner holds (back to 0 when they end, aborts included)."""
from __future__ import annotations

from typing import Iterator

from prometheus_client.core import Metric

from gpu_stage.model_runner import ModelRunner
from pipeline.metric_families import ModelFamilies
from scheduler.sampling_gates import SamplingGates
from structured.compiler import GrammarCompiler
from structured.runner_hook import GrammarHook


def structured_metrics(compiler: GrammarCompiler | None, runner: ModelRunner, gates: SamplingGates,
                       fam: ModelFamilies) -> Iterator[Metric]:
    if compiler is None:
        return
    yield fam.counter("ttft_grammar_compiles", "Grammars compiled (a schema, regex or grammar not in the cache)",
                      compiler.num_compiles)
    yield fam.counter("ttft_grammar_late_compiles", "Constrained requests queued while their grammar still "
                      "compiled (prefilled beside the compile; only their first token waited for it)", gates.num_held)
    hook = runner.hook
    if isinstance(hook, GrammarHook):
        yield fam.gauge("ttft_grammar_matchers", "Constrained requests whose grammar matcher the runner holds",
                        hook.num_live)
