"""--speculative-config at start-up: a bad config, a draft whose vocabulary differs from the target's,
or one that another flag contradicts refuses to start with a message naming the field."""
from __future__ import annotations

import pytest

from pipeline.build import StartupError, build_model
from pipeline.config import EngineConfig


def config(spec: str, **kw) -> EngineConfig:
    return EngineConfig(model="dummy:tiny", device="cpu", num_kv_blocks=32, max_model_len=256,
                        speculative_config=spec, **kw)


@pytest.mark.parametrize("spec, message", [
    ('{"method": "medusa", "num_speculative_tokens": 2}', "speculative_config.method"),
    ('{"method": "ngram", "num_speculative_tokens": 99}', "speculative_config.num_speculative_tokens"),
    ('{"method": "draft_model", "model": "dummy:smollm2-135m", "num_speculative_tokens": 2}',
     "speculative_config.model: the draft's vocabulary"),
    ('{"method": "draft_model", "model": "/no/such/model", "num_speculative_tokens": 2}',
     "speculative_config.model: cannot load"),
])
def test_a_bad_speculative_config_is_a_startup_error_naming_the_field(spec: str, message: str) -> None:
    with pytest.raises(StartupError, match=message):
        build_model(config(spec))


def test_speculation_turns_the_default_async_scheduling_off_and_refuses_it_asked_for() -> None:
    spec = '{"method": "ngram", "num_speculative_tokens": 2}'
    built = build_model(config(spec))
    assert built.scheduler.config.speculative.k == 2 and not built.scheduler.config.async_scheduling
    with pytest.raises(StartupError, match="--no-async-scheduling"):
        build_model(config(spec, async_scheduling=True))
