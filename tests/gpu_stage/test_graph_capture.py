"""The capture guard: a collection before, none inside, the collector's state restored after (also
when the block raises); on a GPU, dead graphs in reference cycles cannot break a capture."""
from __future__ import annotations

import gc

import pytest

from gpu_stage.graph_capture import gc_frozen


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_collects_first_then_not_inside_and_restores_the_collector() -> None:
    assert gc.isenabled()
    collected_before = gc.get_stats()[2]["collections"]
    with gc_frozen():
        assert gc.get_stats()[2]["collections"] == collected_before + 1  # the full collection before
        assert not gc.isenabled()
        for _ in range(5000):  # garbage a generation-0 collection would take, if one ran
            _Cycle()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_restores_on_an_exception_and_leaves_a_disabled_collector_disabled() -> None:
    with pytest.raises(RuntimeError), gc_frozen(collect=False):
        raise RuntimeError("capture failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_frozen(collect=False):
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.gpu
def test_dead_graphs_in_reference_cycles_do_not_break_a_capture() -> None:
    """The H200 failure: graphs only a dead cycle holds, and a capture that allocates enough Python
    objects for an automatic collection. Inside `capturing` none runs, so the capture holds."""
    import torch

    from gpu_stage.graph_capture import capturing

    x = torch.zeros(16, device="cuda")
    for _ in range(20):  # graphs that only a dead cycle holds
        holder, graph = _Cycle(), torch.cuda.CUDAGraph()
        with capturing(graph):
            x.add_(1)
        holder.graph = graph
    del holder, graph
    live = torch.cuda.CUDAGraph()
    with capturing(live):
        for _ in range(20000):  # past gc's generation-0 threshold many times over
            _Cycle()
        x.mul_(2)
    before = x.clone()
    live.replay()
    torch.cuda.synchronize()
    assert torch.equal(x, before * 2)
