import asyncio

from stages.stage import Stage


class Recorder(Stage[int]):
    def __init__(self) -> None:
        super().__init__("rec", 8)
        self.seen: list[int] = []
        self.bursts: list[int] = []
        self.stopped = False

    async def handle(self, msg: int) -> None:
        if msg < 0:
            raise RuntimeError("boom")
        self.seen.append(msg)

    async def after_burst(self) -> None:
        self.bursts.append(len(self.seen))

    async def on_stop(self) -> None:
        self.stopped = True


async def test_handles_in_order_with_one_after_burst_per_drain():
    st = Recorder()
    for i in range(3):
        st.inbox.put_nowait(i)
    st.start()
    await asyncio.sleep(0.01)
    assert st.seen == [0, 1, 2]
    assert st.bursts == [3]  # the three waiting messages form one burst
    await st.stop()
    assert st.stopped and not st.running
    assert st.timings["int"].num_messages == 3


async def test_failure_is_kept_and_stops_the_stage():
    st = Recorder()
    st.start()
    await st.inbox.put(-1)
    await asyncio.sleep(0.01)
    assert isinstance(st.failure, RuntimeError)
    assert not st.running and st.stopped
