import asyncio

import pytest

from stages.channel import Channel, ChannelClosed


def test_zero_size_is_refused():
    with pytest.raises(ValueError):
        Channel("c", 0)


def test_put_nowait_respects_bound_and_stats():
    ch: Channel[int] = Channel("c", 2)
    assert ch.put_nowait(1) and ch.put_nowait(2)
    assert not ch.put_nowait(3)
    st = ch.stats()
    assert (st.depth, st.peak_depth, st.num_put, st.max_size) == (2, 2, 2, 2)
    assert ch.get_nowait() == 1
    assert ch.stats().depth == 1 and ch.stats().peak_depth == 2


async def test_full_channel_makes_producer_wait():
    ch: Channel[int] = Channel("c", 1)
    await ch.put(1)
    blocked = asyncio.create_task(ch.put(2))
    await asyncio.sleep(0.01)
    assert not blocked.done()
    assert ch.stats().waiting_senders == 1
    assert await ch.get() == 1
    await asyncio.wait_for(blocked, 1)
    assert await ch.get() == 2


async def test_close_ends_consumer_after_drain():
    ch: Channel[int] = Channel("c", 4)
    await ch.put(1)
    ch.close()
    assert await ch.get() == 1
    with pytest.raises(ChannelClosed):
        await ch.get()
    with pytest.raises(ChannelClosed):
        await ch.put(2)


async def test_close_wakes_waiting_receiver():
    ch: Channel[int] = Channel("c", 4)
    waiter = asyncio.create_task(ch.get())
    await asyncio.sleep(0.01)
    ch.close()
    with pytest.raises(ChannelClosed):
        await asyncio.wait_for(waiter, 1)


async def test_force_put_passes_the_bound_for_control_messages():
    ch: Channel[str] = Channel("c", 1)
    ch.put_nowait("a")
    ch.force_put("abort")
    assert len(ch) == 2
    assert [ch.get_nowait(), ch.get_nowait()] == ["a", "abort"]


async def test_cancelled_getter_does_not_lose_items():
    ch: Channel[int] = Channel("c", 2)
    g = asyncio.create_task(ch.get())
    await asyncio.sleep(0.01)
    g.cancel()
    await asyncio.gather(g, return_exceptions=True)
    await ch.put(7)
    assert await asyncio.wait_for(ch.get(), 1) == 7
