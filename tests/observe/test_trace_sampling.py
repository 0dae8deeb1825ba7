"""TraceSampling asks the SDK's own sampler: always_on/off ignore the caller, the parentbased_*
samplers follow its sampled flag, and traceidratio keeps exactly the trace ids the SDK's
TraceIdRatioBased keeps (the low 64 bits under rate * 2^64)."""
from __future__ import annotations

import random

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")

from observe.otlp_settings import SamplerChoice  # noqa: E402
from observe.trace_sampling import TraceSampling  # noqa: E402
from observe.traceparent import ParentSpan  # noqa: E402

TRACE = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SAMPLED = ParentSpan(TRACE, 0x00F067AA0BA902B7, True)
UNSAMPLED = ParentSpan(TRACE, 0x00F067AA0BA902B7, False)


@pytest.mark.parametrize("name,no_parent,sampled_parent,unsampled_parent", [
    ("always_on", True, True, True),
    ("always_off", False, False, False),
    ("parentbased_always_on", True, True, False),
    ("parentbased_always_off", False, True, False),
])
def test_the_static_samplers_and_the_caller_flag(name, no_parent, sampled_parent, unsampled_parent) -> None:
    sampling = TraceSampling(SamplerChoice(name))
    assert sampling.sampled(TRACE, None) is no_parent
    assert sampling.sampled(TRACE, SAMPLED) is sampled_parent
    assert sampling.sampled(TRACE, UNSAMPLED) is unsampled_parent


def test_traceidratio_keeps_the_trace_ids_under_its_bound() -> None:
    sampling = TraceSampling(SamplerChoice("traceidratio", 0.25))
    bound = round(0.25 * 2**64)
    assert sampling.sampled((7 << 64) | (bound - 1), None)
    assert not sampling.sampled((7 << 64) | bound, None)
    rng = random.Random(0)
    ids = [rng.getrandbits(128) for _ in range(4000)]
    kept = sum(sampling.sampled(t, None) for t in ids)
    assert kept == sum((t & (2**64 - 1)) < bound for t in ids) and 800 < kept < 1200
    # plain traceidratio ignores the caller's flag; the parent-based one follows it
    assert sampling.sampled(bound - 1, ParentSpan(bound - 1, 1, False))
    parent_based = TraceSampling(SamplerChoice("parentbased_traceidratio", 0.0))
    assert not parent_based.sampled(TRACE, None)
    assert parent_based.sampled(TRACE, SAMPLED) and not parent_based.sampled(TRACE, UNSAMPLED)
