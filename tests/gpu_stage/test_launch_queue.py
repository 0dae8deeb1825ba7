"""LaunchQueue: what the event loop puts, the launch thread gets, in order; closing ends the thread
after what was queued; a put after the close is refused; the depth statistics are a Channel's."""
from __future__ import annotations

import threading

import pytest

from gpu_stage.launch_queue import LaunchQueue
from stages.channel import ChannelClosed


def test_the_thread_gets_every_item_in_order_then_the_end() -> None:
    q: LaunchQueue[int] = LaunchQueue("gpu.inbox", 3)
    got: list[int] = []

    def consume() -> None:
        while (item := q.get()) is not None:
            got.append(item)

    for i in range(3):
        q.put(i)
    assert len(q) == 3
    q.close()
    thread = threading.Thread(target=consume)
    thread.start()
    thread.join(5)
    assert not thread.is_alive() and got == [0, 1, 2] and len(q) == 0
    with pytest.raises(ChannelClosed):
        q.put(3)


def test_stats_count_puts_depth_and_peak() -> None:
    q: LaunchQueue[str] = LaunchQueue("gpu.inbox", 3)
    q.put("a")
    q.put("b")
    assert q.get() == "a"
    st = q.stats()
    assert (st.name, st.max_size, st.depth, st.peak_depth, st.num_put, st.closed) == ("gpu.inbox", 3, 1, 2, 2, False)
    q.close()
    assert q.stats().closed and q.stats().depth == 1
