"""Structured outputs at start-up: the grammar compiler (llguidance against the model's tokenizer,
its tables built on a compile thread at once, so that no request pays for them) and the runner's
GrammarHook, wrapped around the hook already attached (speculative decoding's verifier), if any."""
from __future__ import annotations

from gpu_stage.model_runner import ModelRunner
from ingress.tokenizer import Tokenizer
from structured.bitmask import GrammarBitmask
from structured.compiler import GrammarCompiler
from structured.llguidance_backend import LlguidanceBackend
from structured.runner_hook import GrammarHook
from structured.tokenizer_bridge import ll_tokenizer, warm


def llguidance_backend(tokenizer: Tokenizer, vocab_size: int) -> LlguidanceBackend:
    ll = ll_tokenizer(tokenizer, vocab_size)
    warm(ll)
    return LlguidanceBackend(ll)


def attach_structured(runner: ModelRunner, tokenizer: Tokenizer, vocab_size: int,
                      compile_timeout_s: float) -> GrammarCompiler:
    """The compiler ingress submits grammars to; `runner` masks constrained rows from its compiles."""
    compiler = GrammarCompiler(lambda: llguidance_backend(tokenizer, vocab_size))
    compiler.warm()
    bitmask = GrammarBitmask(runner.max_num_seqs, vocab_size, runner.device)
    runner.hook = GrammarHook(compiler, bitmask, runner.hook, compile_timeout_s)
    return compiler
