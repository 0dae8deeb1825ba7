"""/metrics on a CPU engine carries its processor and chosen path (ttft_cpu_info), its step threads (CpuThreadPolicy): the threads now, the
switches, and the other processes' cores last read; a GPU engine, with no policy, none of them."""
from __future__ import annotations

from bench.prom_text import parse_metrics
from gpu_stage.cpu_threads import CpuThreadPolicy
from pipeline import Engine, EngineConfig
from pipeline.metric_families import ModelFamilies
from pipeline.metrics_cpu import cpu_path_metrics, cpu_thread_metrics
from stages.sampling import SamplingParams


class Busy:
    """Every sample finds 10 s more of other processes' CPU time (and 10 ms of ours): far over half
    a core for any real time between two steps' samples under 20 s."""

    def __init__(self) -> None:
        self.host = self.own = 0.0

    def sample(self) -> tuple[float, float]:
        out = (self.host, self.own)
        self.host += 10.01
        self.own += 0.01
        return out


async def test_a_cpu_engine_reports_its_step_threads() -> None:
    async with Engine(EngineConfig(model="dummy:tiny", num_kv_blocks=64, max_model_len=256, device="cpu",
                                   cpu_threads=2)) as engine:
        policy = CpuThreadPolicy(2, Busy(), window_s=0.0)
        engine.gpu_stage.thread_policy = policy
        params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
        assert sum([len(o.token_ids) async for o in engine.generate([5, 6, 7], params)]) == 4
        m = parse_metrics(engine.metrics.render().decode())
    series = {k.split("{")[0]: v for k, v in m.items() if k.startswith("ttft_cpu_")}
    assert series["ttft_cpu_step_threads"] == 1 == policy.current
    assert series["ttft_cpu_step_thread_switches_total"] == policy.num_switches == 1
    assert series["ttft_cpu_other_processes_cores"] == policy.other_cores > 0.5
    path = engine.gpu_stage.cpu_path  # read at start-up (gpu_stage/cpu_caps.py)
    assert path is not None and path.threads <= path.caps.num_usable_cores
    info = next(k for k in m if k.startswith("ttft_cpu_info{"))
    assert f'isa="{path.caps.isa}"' in info and f'threads="{path.threads}"' in info


def test_no_policy_no_series() -> None:
    class Stage:
        thread_policy = None
        cpu_path = None

    assert list(cpu_thread_metrics([Stage()], ModelFamilies("m"))) == []
    assert list(cpu_path_metrics([Stage()], ModelFamilies("m"))) == []
