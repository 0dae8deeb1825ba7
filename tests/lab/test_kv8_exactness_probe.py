"""lab.kv8_exactness_probe: a variant's error on the exactness tests' case (one sequence here, the
interpreter's launch on the CPU)."""
from __future__ import annotations

import pytest

pytest.importorskip("triton")

from lab.kv8_exactness_probe import variant_errors  # noqa: E402


def test_an_exact_variant_is_within_the_norm_at_every_seed() -> None:
    errors = variant_errors("kbits_n64_w2_s2", [64, 1], batch=1)
    assert len(errors) == 2 and all(0 < e < 0.01 for e in errors)
