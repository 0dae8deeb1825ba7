"""TorchProfiler: torch.profiler over the running server, started and stopped over HTTP.

`ttft serve --profile-dir DIR` enables `POST /start_profile` and `POST /stop_profile` (vLLM's
names): between the two, torch.profiler records the host's torch calls and, on a GPU, every kernel
of every stream (CUPTI sees the whole process, CUDA graph replays included), so the device's idle
gaps between steps under real load can be read off a timeline. `stop` writes one Chrome trace
(`DIR/ttft-profile-<time>.json.gz`, for https://ui.perfetto.dev) and answers with its path. Off by
default: the profiler slows every step while it runs.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile


def _all_threads():
    """Kineto's option to record the torch calls of every thread (the model runs on the GPU
    stage's, not on the event loop's that starts the profile); None where this torch lacks it."""
    try:
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(profile_all_threads=True)
    except (ImportError, TypeError):
        return None


class ProfilerError(Exception):
    """A start while running, or a stop while not (the routes answer 409)."""


class TorchProfiler:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._prof: profile | None = None

    @property
    def running(self) -> bool:
        return self._prof is not None

    def start(self) -> None:
        if self._prof is not None:
            raise ProfilerError("a profile is already running: POST /stop_profile first")
        self.directory.mkdir(parents=True, exist_ok=True)
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        prof = profile(activities=activities, experimental_config=_all_threads())
        prof.__enter__()
        self._prof = prof

    def stop(self) -> profile:
        """End the profile (on the thread that started it) -> its data, for `write`."""
        prof, self._prof = self._prof, None
        if prof is None:
            raise ProfilerError("no profile is running: POST /start_profile first")
        prof.__exit__(None, None, None)
        return prof

    def write(self, prof: profile) -> Path:
        """The profile's Chrome trace, gzipped -> its path. Seconds for a busy server: the route
        runs it in a worker thread, not on the event loop."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        path = self.directory / f"ttft-profile-{stamp}-{time.time_ns() % 10**6:06d}.json.gz"
        prof.export_chrome_trace(str(path))
        return path
