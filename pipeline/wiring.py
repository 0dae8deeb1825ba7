"""wire_stages: the engine's actors built from the synchronous cores and joined by their inboxes.

    ingress (in the handler task) -> engine (one Admission) -> scheduler <-> gpu, scheduler -> emitter,
    scheduler <-> kv_disk

The GPU stage hands each step's result to the scheduler on the loop (SchedulerStage.take_result),
the disk stage replies into the scheduler's inbox; the scheduler is the one owner
of the cores it drives, hands each step straight to the GPU stage's launch thread, and runs the
emitter in its own task on each step's events (with the Admissions' streams ahead of them). `all`
lists the running actors in stop order: the disk stage last, so it flushes pending block writes on
a graceful shutdown.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from emitter.output_stream import OutputStream
from emitter.stage import EmitterStage
from gpu_stage.kv_tiers.disk_stage import KvDiskStage
from gpu_stage.parallel.sharded_tiers import ShardedKvDiskStage
from gpu_stage.stage import GpuStage
from ingress.stage import IngressStage
from ingress.structured_check import StructuredCheck
from protocol.responses.output_chain import OutputParsers
from pipeline.build import BuiltModel
from pipeline.config import EngineConfig
from pipeline.faults import disk_read_delay_s
from scheduler.stage import SchedulerStage
from stages.messages import RequestOutput


@dataclass
class PipelineStages:
    ingress: IngressStage
    scheduler: SchedulerStage
    gpu: GpuStage
    emitter: EmitterStage
    kv_disk: KvDiskStage | None

    @property
    def all(self) -> list:
        return [self.scheduler, self.gpu, *([self.kv_disk] if self.kv_disk else [])]


def wire_stages(built: BuiltModel, cfg: EngineConfig, on_engine_error: Callable[[str], None],
                on_finished: Callable[[OutputStream, RequestOutput], None]) -> PipelineStages:
    ingress = IngressStage(built.tokenizer, built.chat_template, cfg.limits, built.max_model_len,
                           cfg.offload_tokenize_chars, cfg.num_tokenizer_threads,
                           OutputParsers(cfg.tool_call_parser, cfg.reasoning_parser),
                           StructuredCheck(built.grammars, cfg.grammar_compile_timeout_s) if built.grammars else None)
    scheduler = SchedulerStage(built.scheduler, submit=None, emit=None,  # joined below
                               inbox_size=cfg.scheduler_inbox_size, on_engine_error=on_engine_error)
    gpu = GpuStage(built.runner, scheduler.take_result, cfg.cpu_threads)
    emitter = EmitterStage(scheduler.inbox, on_finished)
    scheduler.submit, scheduler.emit = gpu.submit, emitter.deliver
    kv_disk = None
    tiers = built.tiers
    if tiers.disk_store is not None and tiers.disk_lanes is not None:  # every rank's shard: one job each
        kv_disk = ShardedKvDiskStage(tiers.disk_store, tiers.host_pool, scheduler.inbox, cfg.scheduler_inbox_size,
                                     tiers.disk_lanes, read_delay_s=disk_read_delay_s())
    elif tiers.disk_store is not None:
        kv_disk = KvDiskStage(tiers.disk_store, tiers.host_pool, scheduler.inbox,
                              inbox_size=cfg.scheduler_inbox_size, num_threads=cfg.kv_disk_threads,
                              read_delay_s=disk_read_delay_s())
    if kv_disk is not None:
        scheduler.disk_inbox = kv_disk.inbox
    return PipelineStages(ingress, scheduler, gpu, emitter, kv_disk)
