"""--speculative-config parsed and checked against the other flags, without torch: `ttft serve`
checks it before torch loads (pipeline/model_checks.py), and the build resolves it again
(pipeline/build.py). A config that cannot work raises ValueError naming the flag."""
from __future__ import annotations

from pipeline.config import EngineConfig
from stages.speculative import SpeculativeConfig


def resolve_speculative(cfg: EngineConfig) -> SpeculativeConfig | None:
    """The parsed config, or None. A verifying row's next step needs its accepted tokens on the
    host, so speculation turns the default async scheduling off (and refuses it asked for)."""
    if cfg.speculative_config is None:
        return None
    try:
        spec = SpeculativeConfig.parse(cfg.speculative_config)
    except ValueError as exc:
        raise ValueError(f"--speculative-config: {exc}") from None
    if cfg.async_scheduling:
        raise ValueError("--speculative-config needs --no-async-scheduling: a verifying row's next step "
                         "needs the tokens it accepted")
    if cfg.tensor_parallel_size > 1:
        raise ValueError("--speculative-config is not supported with --tensor-parallel-size > 1 yet")
    cfg.async_scheduling = False
    return spec
