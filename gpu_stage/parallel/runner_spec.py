"""RunnerSpec: what every rank builds, as plain JSON (no pickle), the same on every rank.

The driver writes it into each worker's environment (TTFT_RUNNER_SPEC) when it starts them; under
torchrun every rank derives it from the same command line. Every rank then loads the model source
itself (only its shard of the weights) and builds its ModelRunner with the same arguments, so the
start-up steps that run collectives (the memory profile, the warm-up, the graph captures) happen in
the same order everywhere.
"""
from __future__ import annotations

import importlib.util
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from gpu_stage.loaders.model_source import ModelSource

ENV_VAR = "TTFT_RUNNER_SPEC"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class RunnerSpec:
    model: str | None  # --model (None: the packaged SmolLM2)
    device: str  # "cpu" | "cuda"
    dtype: str  # a key of DTYPES
    runner: dict[str, Any] = field(default_factory=dict)  # ModelRunner keyword arguments (JSON values)
    seed: int = 0  # the dummy weights' seed
    # "path/to/file.py:function" returning the ModelSource (embedding and tests), instead of `model`
    source_factory: str | None = None
    cpu_threads: int | None = None  # torch threads of each worker process (the driver's are the engine's)
    collective_timeout_s: float = 120.0
    tiers: dict[str, Any] | None = None  # the KV tiers' kv_tiers.rank_tiers.TierSpec fields; None: off

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RunnerSpec:
        return cls(**json.loads(text))

    def load_source(self) -> ModelSource:
        if self.source_factory is None:
            from gpu_stage.loaders import load_model_source

            return load_model_source(self.model, seed=self.seed)
        path, _, name = self.source_factory.rpartition(":")
        module_spec = importlib.util.spec_from_file_location(f"ttft_source_{Path(path).stem}", path)
        if module_spec is None or module_spec.loader is None:
            raise ValueError(f"source factory {self.source_factory!r}: no such file")
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        return getattr(module, name)()


def build_runner(spec: RunnerSpec, source: ModelSource, parallel, device: torch.device):
    """The rank's ModelRunner (`parallel`: its TensorParallel)."""
    from gpu_stage.model_runner import ModelRunner

    return ModelRunner.build(source, device, DTYPES[spec.dtype], parallel=parallel, **spec.runner)
