"""TorchProfiler and its routes: a profile of the running server, written as a gzipped Chrome trace."""
from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import torch

from pipeline.app import start_profile, stop_profile
from pipeline.profiler import ProfilerError, TorchProfiler


def test_a_profile_records_the_torch_calls_between_start_and_stop(tmp_path: Path) -> None:
    profiler = TorchProfiler(tmp_path / "profiles")
    profiler.start()
    assert profiler.running
    with pytest.raises(ProfilerError, match="already running"):
        profiler.start()
    torch.mm(torch.ones(8, 8), torch.ones(8, 8))
    path = profiler.write(profiler.stop())
    assert not profiler.running and path.parent == tmp_path / "profiles"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    assert any(e.get("name") == "aten::mm" for e in events)
    with pytest.raises(ProfilerError, match="no profile is running"):
        profiler.stop()


def test_the_routes_answer_404_when_profiling_is_off() -> None:
    request = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(engine=SimpleNamespace(profiler=None))))
    for route in (start_profile, stop_profile):
        response = asyncio.run(route(request))
        assert response.status_code == 404 and b"--profile-dir" in response.body


def test_a_server_started_with_profile_dir_profiles_over_http(launch, tmp_path: Path) -> None:
    server = launch("--model", "dummy:tiny", "--max-model-len", "256", "--profile-dir", str(tmp_path))
    assert server.http("POST", "/stop_profile").status_code == 409  # nothing running yet
    assert server.http("POST", "/start_profile").json() == {"status": "profiling"}
    assert server.http("POST", "/start_profile").status_code == 409
    r = httpx.post(f"{server.base_url}/v1/completions", json={"prompt": [5, 6, 7], "max_tokens": 4}, timeout=30)
    assert r.status_code == 200
    body = server.http("POST", "/stop_profile").json()
    assert body["status"] == "written"
    events = json.loads(gzip.decompress(Path(body["path"]).read_bytes()))["traceEvents"]
    # the model's steps ran on the GPU stage's thread: the profile holds their torch calls
    assert any(str(e.get("name", "")).startswith("aten::") for e in events)
