"""OutputLengthPredictor: a prior before data, a high quantile per max_tokens bucket after."""
from __future__ import annotations

from scheduler.predictor import OutputLengthPredictor


def test_prior_is_capped_by_max_tokens() -> None:
    p = OutputLengthPredictor(prior_tokens=256)
    assert [p.predict(m) for m in (1, 100, 256, 4096)] == [1, 100, 256, 256]


def test_learns_a_high_quantile_per_bucket() -> None:
    p = OutputLengthPredictor(prior_tokens=256, quantile=0.9, window=10)
    for n in (10, 20, 20, 20, 20, 20, 20, 20, 20, 100):  # max_tokens 1000: bucket 10
        p.observe(1000, n)
    assert p.predict(1000) == 100  # the 90th percentile of 10 samples is the largest
    assert p.predict(600) == 60  # same bucket (512-1023): same ratio, scaled
    assert p.predict(2000) == 256  # another bucket: still the prior
    p.observe(1000, 20)  # the window drops the first sample (10), keeps the 100
    assert p.predict(1000) == 100
    for _ in range(10):
        p.observe(1000, 30)
    assert p.predict(1000) == 30  # the outlier left the window


def test_prediction_stays_in_range() -> None:
    p = OutputLengthPredictor(prior_tokens=8)
    p.observe(16, 0)  # an immediate stop
    assert p.predict(16) == 1  # at least one token is always generated
    p.observe(16, 50)  # more than max_tokens cannot happen, but is clamped anyway
    assert p.predict(16) == 16
