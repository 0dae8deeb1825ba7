"""EngineHealth: one state the whole server agrees on. /health is 200 only in `ready`."""
from __future__ import annotations

import enum


class HealthState(enum.Enum):
    LOADING = "loading"
    READY = "ready"
    DRAINING = "draining"
    BROKEN = "broken"
    STOPPED = "stopped"


class EngineHealth:
    def __init__(self) -> None:
        self._state = HealthState.LOADING
        self.reason: str | None = None

    @property
    def state(self) -> str:
        return self._state.value

    @property
    def ready(self) -> bool:
        return self._state is HealthState.READY

    def set_ready(self) -> None:
        if self._state is HealthState.LOADING:
            self._state = HealthState.READY

    def set_draining(self) -> None:
        if self._state is HealthState.READY:
            self._state = HealthState.DRAINING

    def set_broken(self, reason: str) -> None:
        self._state = HealthState.BROKEN
        self.reason = reason

    def set_stopping(self) -> None:
        if self._state is not HealthState.BROKEN:
            self._state = HealthState.STOPPED
