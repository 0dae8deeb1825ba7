"""NoTiers: the KV tiers when off. It answers every call KvTierManager answers, with the same
parameters, and does nothing; the scheduler holds one exactly when the tiers are off, and then
builds no tier copies and keeps its decode fast path."""
from __future__ import annotations

import inspect

import pytest

from scheduler.config import SchedulerConfig
from scheduler.kv_tiers.config import TierConfig
from scheduler.kv_tiers.manager import KvTierManager
from scheduler.kv_tiers.no_tiers import NoTiers
from scheduler.scheduler import Scheduler
from stages.messages import KvDiskDone, StepResult
from fake_step import run_step
from test_scheduler import make_req


def public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(fn) for name, fn in vars(cls).items()
            if callable(fn) and not name.startswith("_")}


def test_no_tiers_has_the_manager_interface_with_the_same_parameters() -> None:
    manager, off = public_methods(KvTierManager), public_methods(NoTiers)
    assert set(manager) == set(off)
    for name, sig in manager.items():
        assert list(off[name].parameters) == list(sig.parameters), name
    assert KvTierManager.enabled is True and NoTiers.enabled is False


def test_no_tiers_does_nothing() -> None:
    tiers = NoTiers()
    assert tiers.take_ops(0) is None and tiers.take_early_ops(0) is None
    assert not tiers.disk_requests and tiers.take_disk_requests() == []
    with pytest.raises(AssertionError):  # no disk stage exists to send one
        tiers.on_disk_done(KvDiskDone("read", b"h", 0, True))


@pytest.mark.parametrize("tiers", [None, TierConfig()])
def test_the_scheduler_holds_no_tiers_when_they_are_off(tiers: TierConfig | None) -> None:
    s = Scheduler(SchedulerConfig(num_blocks=16, block_size=4, enable_prefix_caching=True), tiers=tiers)
    assert isinstance(s.tiers, NoTiers) and not s._tiers_on
    assert s.placement.tiers is s.tiers and s.results.tiers is s.tiers


def test_the_scheduler_holds_a_manager_when_they_are_on() -> None:
    s = Scheduler(SchedulerConfig(num_blocks=16, block_size=4, enable_prefix_caching=True),
                  tiers=TierConfig(num_host_blocks=4, block_nbytes=100))
    assert isinstance(s.tiers, KvTierManager) and s._tiers_on


def test_tiers_off_no_copies_and_the_decode_fast_path_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Scheduler(SchedulerConfig(num_blocks=16, block_size=4, enable_prefix_caching=True, policy="fcfs",
                                  shadow=False), tiers=TierConfig())
    fast_calls: list[int] = []
    import scheduler.scheduler as module
    real = module.decode_chunks
    monkeypatch.setattr(module, "decode_chunks", lambda *a: fast_calls.append(1) or real(*a))
    for rid in ("a", "b"):
        assert s.add_request(make_req(rid, 6, max_tokens=5)) is None
    batches = [run_step(s) for _ in range(5)]
    assert all(b.kv_ops is None for b in batches)
    assert fast_calls, "steady decodes with the tiers off take the one-pass path"
    assert s.is_idle() and s.kv.pool.num_used == 0
    assert s.update(batches[-1], StepResult(batches[-1].step_id, [])) == []  # stale: dropped
