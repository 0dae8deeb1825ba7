"""Speculative decoding's counters (vLLM's spec_decode_* families, in the ttft_ namespace): drafts
(verifying rows), draft tokens, accepted tokens, and accepted tokens by draft position. Nothing
while speculation is off."""
from __future__ import annotations

from typing import Iterator

from prometheus_client.core import Metric

from pipeline.metric_families import ModelFamilies
from scheduler.spec.drafts import SpecDrafts
from scheduler.step_hooks import StepHooks


def spec_metrics(hooks: StepHooks, fam: ModelFamilies) -> Iterator[Metric]:
    """From the scheduler's step hooks: its SpecDrafts' counters, if it has one."""
    drafts = hooks.get(SpecDrafts)
    if drafts is None:
        return
    c = drafts.counters
    yield fam.counter("ttft_spec_decode_num_drafts", "Rows verified with draft tokens", c.num_drafts)
    yield fam.counter("ttft_spec_decode_num_draft_tokens", "Draft tokens verified", c.num_draft_tokens)
    yield fam.counter("ttft_spec_decode_num_accepted_tokens", "Draft tokens accepted", c.num_accepted_tokens)
    yield fam.counter_by("ttft_spec_decode_num_accepted_tokens_per_pos", "Draft tokens accepted, by position "
                         "in the draft (0: the first)", "position",
                         {str(i): n for i, n in enumerate(c.accepted_by_position)})
    yield fam.counter("ttft_spec_decode_num_constrained_rows", "Decode rows given no drafts because a grammar "
                      "constrains their output", c.num_constrained_rows)
