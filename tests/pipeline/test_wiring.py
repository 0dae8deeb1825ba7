"""wire_stages: every actor joined to the scheduler's inbox, the disk stage only with a disk tier,
and the stop order ending with the disk stage (it flushes pending block writes)."""
from __future__ import annotations

from pathlib import Path

from pipeline.build import build_model
from pipeline.config import EngineConfig
from pipeline.wiring import wire_stages


def noop(*_: object) -> None:
    return None


def test_without_tiers_the_scheduler_drives_the_gpu_and_the_emitter() -> None:
    cfg = EngineConfig(model="dummy:tiny", num_kv_blocks=16, max_model_len=128)
    stages = wire_stages(build_model(cfg), cfg, noop, noop)
    assert stages.kv_disk is None and stages.scheduler.disk_inbox is None
    assert [s.name for s in stages.all] == ["scheduler", "gpu"]  # the emitter runs in the scheduler's task
    assert stages.scheduler.submit == stages.gpu.submit
    assert stages.scheduler.emit == stages.emitter.deliver
    assert stages.gpu.on_result == stages.scheduler.take_result


def test_a_disk_tier_adds_the_disk_stage_last(tmp_path: Path) -> None:
    cfg = EngineConfig(model="dummy:tiny", num_kv_blocks=16, max_model_len=128, kv_disk_path=str(tmp_path))
    stages = wire_stages(build_model(cfg), cfg, noop, noop)
    assert stages.kv_disk is not None and stages.all[-1] is stages.kv_disk
    assert stages.scheduler.disk_inbox is stages.kv_disk.inbox and stages.kv_disk.reply is stages.scheduler.inbox
