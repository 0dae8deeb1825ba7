"""The public surface: `from pipeline import Engine, EngineConfig`.

`Engine` is imported on first use (PEP 562), so that `python -m pipeline.cli` (and the `ttft`
script) reach their main() before torch is imported: the OpenMP settings that `ttft serve` puts
in the environment are read once, when torch loads its OpenMP runtime (pipeline/cli.py)."""
from pipeline.config import EngineConfig

__all__ = ["Engine", "EngineConfig"]


def __getattr__(name: str):
    if name == "Engine":
        from pipeline.engine import Engine

        return Engine
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
