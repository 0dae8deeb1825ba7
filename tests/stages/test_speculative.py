"""--speculative-config: vLLM's JSON parsed into a SpeculativeConfig; what cannot work names its field."""
from __future__ import annotations

import pytest

from stages.speculative import MAX_SPECULATIVE_TOKENS, SpeculativeConfig


def test_vllm_ngram_and_draft_model_configs_parse() -> None:
    ngram = SpeculativeConfig.parse('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, '
                                    '"prompt_lookup_min": 2, "disable_by_batch_size": 8}')
    assert (ngram.method, ngram.k, ngram.prompt_lookup_min, ngram.prompt_lookup_max) == ("ngram", 4, 2, 4)
    assert ngram.speculates(8) and not ngram.speculates(9)
    draft = SpeculativeConfig.parse('{"method": "draft_model", "model": "dummy:tiny", "num_speculative_tokens": 3}')
    assert draft.model == "dummy:tiny" and draft.k == 3 and draft.speculates(10_000)


@pytest.mark.parametrize("text, field", [
    ('{"method": "eagle", "num_speculative_tokens": 4}', "speculative_config.method"),
    ('{"method": "ngram", "num_speculative_tokens": 0}', "speculative_config.num_speculative_tokens"),
    (f'{{"method": "ngram", "num_speculative_tokens": {MAX_SPECULATIVE_TOKENS + 1}}}',
     "speculative_config.num_speculative_tokens"),
    ('{"method": "ngram", "num_speculative_tokens": true}', "speculative_config.num_speculative_tokens"),
    ('{"method": "ngram", "num_speculative_tokens": 2.5}', "speculative_config.num_speculative_tokens"),
    ('{"method": "ngram"}', "speculative_config.num_speculative_tokens"),
    ('{"num_speculative_tokens": 2}', "speculative_config.method"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 3, "prompt_lookup_max": 2}',
     "speculative_config.prompt_lookup_min"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 0}', "speculative_config.prompt_lookup_max"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 0}',
     "speculative_config.disable_by_batch_size"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "model": "dummy:tiny"}', "speculative_config.model"),
    ('{"method": "draft_model", "num_speculative_tokens": 2}', "speculative_config.model"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "speculative_tokens": 3}',
     "speculative_config.speculative_tokens: unknown field"),
    ('[1, 2]', "must be a JSON object"),
    ('{"method": ', "not valid JSON"),
])
def test_a_config_that_cannot_work_names_its_field(text: str, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SpeculativeConfig.parse(text)
