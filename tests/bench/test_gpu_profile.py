"""busy_and_gaps: device time covered by kernels and the idle gaps between them (overlaps, as PDL
launches make them, counted once)."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")

from bench.gpu_profile import busy_and_gaps  # noqa: E402


def test_overlapping_kernels_count_once_and_gaps_name_their_neighbours() -> None:
    kernels = [(0.0, 10.0, "a"), (5.0, 12.0, "b"), (20.0, 25.0, "c"), (21.0, 22.0, "d"), (30.0, 31.0, "e")]
    busy, gaps, end = busy_and_gaps(kernels)
    assert busy == 12.0 + 5.0 + 1.0
    assert gaps == [(8.0, "b", "c"), (5.0, "d", "e")]
    assert end == 31.0
