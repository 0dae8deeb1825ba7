"""StepHandOff: the scheduler's steps (and early tier copies) on their way to the launch thread, in
order, held back for one event-loop turn after a step that carries requests' first tokens.

The next step normally leaves before a step's tokens are emitted, so that the device computes while
the host writes. For a first token that order costs its time to first token: the launch thread takes
the interpreter lock (and on a CPU host a core) from the moment it has the step, while the first
token's bytes still wait for the emitter, a reader's wake and its write. So when the events carry a
first token, the steps built in that burst are held, the events are emitted, and the steps go to
the launch thread in a callback queued after the readers' wakes: the first bytes leave first, and
the next step starts one event-loop turn (the readers' writes) later.
"""
from __future__ import annotations

import asyncio
from typing import Callable

from stages.channel import ChannelClosed


class StepHandOff:
    def __init__(self, submit: Callable[[object], None]) -> None:
        self._submit = submit
        self._held: list[object] | None = None  # None: nothing held, items go at once

    @property
    def holding(self) -> bool:
        return self._held is not None

    def hold(self) -> None:
        """Hold what is sent from now until `release_soon`'s callback runs."""
        if self._held is None:
            self._held = []

    def send(self, item: object) -> None:
        if self._held is not None:
            self._held.append(item)  # behind what is held already: the launch order is the send order
        else:
            self._submit(item)

    def release_soon(self) -> None:
        """Send what is held in a callback queued now (after the wakes already queued)."""
        asyncio.get_running_loop().call_soon(self._release)

    def _release(self) -> None:
        held, self._held = self._held, None
        for item in held or ():
            try:
                self._submit(item)
            except ChannelClosed:  # the engine stopped meanwhile: nobody waits for these steps
                return
