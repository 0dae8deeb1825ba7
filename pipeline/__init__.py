"""The public surface: `from pipeline import Engine, EngineConfig`."""
from pipeline.config import EngineConfig
from pipeline.engine import Engine

__all__ = ["Engine", "EngineConfig"]
